"""The chargeback report: rows per group and period, totals, and their JSON and CSV forms."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from core.params import InvalidParameter, check_moment
from fleet.models import Cluster
from ledger.chargeback.base import (
    CAPACITY_GROUPS,
    COST_COLUMNS,
    GROUP_SCOPES,
    HOUR_COLUMNS,
    HOURS_DIGITS,
    MAX_PADDED_ROWS,
    STEPS,
    Charge,
    ChargebackError,
    chargeback_model,
    is_whole_hour,
    next_period,
    period_starts,
    utc_text,
)
from ledger.chargeback.groups import KnownGroup, known_groups
from ledger.chargeback.pricing import Pricer, rate_cards
from ledger.chargeback.query import aggregate_pieces, restriction
from ledger.models import RateCard


@dataclass
class Row:
    group: str
    cluster: str | None
    period_start: datetime | None
    figures: Charge


@dataclass
class Report:
    start: datetime
    end: datetime
    group_by: str
    step: str
    currency: str
    model: str
    # A list when built; a stored report's rows are read as they are asked for (``cache``).
    rows: Sequence[Row]
    totals: Charge
    rate_cards: int = 0
    # Rows with GPU-hours no rate card priced (every row when there is no card): counted once.
    unpriced_rows: int = 0

    @property
    def with_capacity(self) -> bool:
        return self.group_by in CAPACITY_GROUPS

    def priced(self, figures: Charge) -> bool:
        """Whether every charged GPU-hour of ``figures`` had a rate card (none exist: never)."""
        return self.rate_cards > 0 and figures.unpriced_gpu_hours <= 0

    def pricing(self) -> dict[str, Any]:
        """Whether the costs mean anything, said once for the whole answer."""
        unpriced = self.unpriced_rows
        if self.rate_cards == 0:
            note = (
                f"No rate card in {self.currency}: every cost is 0.00. Add rate cards "
                "(admin, Rate cards) to price GPU-hours."
            )
        elif unpriced:
            hours = round(self.totals.unpriced_gpu_hours, 1)
            note = (
                f"{unpriced} of {len(self.rows)} rows include GPU-hours no rate card "
                f"prices ({hours:g} GPU-hours in all), counted at 0.00."
            )
        else:
            note = f"Every charged GPU-hour is priced by a rate card in {self.currency}."
        return {
            "complete": self.rate_cards > 0 and not unpriced,
            "rate_cards": self.rate_cards,
            "unpriced_rows": unpriced,
            "unpriced_gpu_hours": round(self.totals.unpriced_gpu_hours, HOURS_DIGITS),
            "note": note,
        }


def parse_iso(parameter: str, raw: str, *, invalid: str, naive: str) -> datetime:
    """An ISO 8601 / RFC 3339 datetime with a UTC offset (``Z`` allowed), in UTC and within the
    calendar bounds of ``core.params``; ``invalid`` and ``naive`` say what was wrong."""
    text = raw.strip()
    if text.endswith(("z", "Z")):
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ChargebackError(parameter, f"{raw!r} {invalid}") from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ChargebackError(parameter, f"{raw!r} {naive}")
    try:
        return check_moment(parameter, moment)
    except InvalidParameter as exc:
        raise ChargebackError(parameter, f"{raw!r} {exc.reason}") from None


def parse_instant(parameter: str, raw: str | None) -> datetime:
    if raw is None or raw.strip() == "":
        raise ChargebackError(parameter, "required: an ISO 8601 datetime with a UTC offset")
    return parse_iso(
        parameter,
        raw,
        invalid="is not an ISO 8601 datetime (e.g. 2026-01-01T00:00:00Z)",
        naive="is naive: give a UTC offset, e.g. 2026-01-01T00:00:00Z",
    )


def check_window(start: datetime, end: datetime, *, start_name: str, end_name: str) -> None:
    for name, moment in ((start_name, start), (end_name, end)):
        if not is_whole_hour(moment):
            raise ChargebackError(
                name, f"{utc_text(moment)} is not on a whole UTC hour (rollups are hourly)"
            )
    if start >= end:
        raise ChargebackError(end_name, "must be after start (the window is [start, end))")
    limit = settings.GPULEDGER_CHARGEBACK_MAX_DAYS
    if end - start > timedelta(days=limit):
        raise ChargebackError(
            end_name, f"the window is longer than {limit} days (GPULEDGER_CHARGEBACK_MAX_DAYS)"
        )


def resolve_cluster(name: str | None) -> Cluster | None:
    # Text bounds (no NUL, length) are checked for every API parameter by core.api.ApiViewMixin.
    if not name:
        return None
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise ChargebackError("cluster", f"unknown cluster {name!r}")
    return cluster


def check_request(group_by: str, step: str, start: datetime, end: datetime) -> None:
    """What ``build_report`` refuses before it reads anything."""
    if group_by not in GROUP_SCOPES:
        raise ChargebackError("group_by", f"unknown group {group_by!r}")
    if step not in STEPS:
        raise ChargebackError("step", f"unknown step {step!r}")
    check_window(start, end, start_name="start", end_name="end")


@dataclass
class ReportInputs:
    """What a report reads besides the rollups: the groups that existed in the window (they get
    zero rows), the rate cards in the currency and the cluster names. Read once per request:
    ``cache.data_version`` keys a stored report by them, ``build_report`` builds from them."""

    known: list[KnownGroup]
    cards: list[RateCard]
    cluster_names: dict[int, str]


def read_inputs(
    group_by: str,
    start: datetime,
    end: datetime,
    cluster: Cluster | None,
    team_ids: set[int] | None,
) -> ReportInputs:
    return ReportInputs(
        known=known_groups(group_by, start, end, cluster, team_ids),
        cards=rate_cards(settings.GPULEDGER_CURRENCY),
        cluster_names=dict(Cluster.objects.values_list("id", "name")),
    )


def build_report(
    *,
    start: datetime,
    end: datetime,
    group_by: str,
    step: str = "none",
    cluster: Cluster | None = None,
    team_ids: set[int] | None = None,
    inputs: ReportInputs | None = None,
) -> Report:
    """The chargeback report of ``group_by`` over ``[start, end)`` as ``team_ids`` may see it.

    ``team_ids`` is ``access.visible_team_ids(user)``: None for staff and finance, and for
    everyone under ``GPULEDGER_TEAM_VISIBILITY=public``. ``inputs``: ``read_inputs`` of these
    parameters when the caller has read them already.
    """
    check_request(group_by, step, start, end)
    model = chargeback_model()
    currency = settings.GPULEDGER_CURRENCY
    periods = period_starts(start, end, step) if step != "none" else [None]

    if inputs is None:
        inputs = read_inputs(group_by, start, end, cluster, team_ids)
    known = inputs.known
    if len(known) * len(periods) > MAX_PADDED_ROWS:
        raise ChargebackError(
            "step",
            f"{len(known)} groups × {len(periods)} periods is more than {MAX_PADDED_ROWS} rows: "
            "use a coarser step or a shorter window",
        )

    pricer = Pricer(start, end, currency, model, cards=inputs.cards)
    merged_cluster = group_by == "team"
    rows: dict[tuple[datetime | None, str, int | None], Charge] = {}
    pieces = aggregate_pieces(
        start=start,
        end=end,
        scope=GROUP_SCOPES[group_by],
        pricer=pricer,
        cluster=cluster,
        trunc=None if step == "none" else step,
        restrict=restriction(group_by, team_ids),
        groups=len(known) * len(periods),
    )
    for piece in pieces:
        row_key = (piece.period, piece.key, None if merged_cluster else piece.cluster_id)
        summed = rows.get(row_key)
        if summed is None:
            # Each piece's figures are its own object: the row's first piece starts the sum.
            rows[row_key] = piece.figures
        else:
            summed.add(piece.figures)

    for group in known:
        for period in periods:
            if period is None:
                exists = group.existed(start, end)
            else:
                exists = group.existed(max(period, start), min(next_period(period, step), end))
            if exists:
                rows.setdefault((period, group.key, group.cluster_id), Charge())

    cluster_names: dict[int | None, str | None] = {k: v for k, v in inputs.cluster_names.items()}
    # Team rows span clusters; they name one only when the request was for one.
    cluster_names[None] = cluster.name if cluster is not None else None
    report_rows = [
        Row(group=key, cluster=cluster_names.get(cluster_id), period_start=period, figures=figures)
        for (period, key, cluster_id), figures in rows.items()
    ]
    report_rows.sort(key=lambda row: (row.period_start or start, row.group, row.cluster or ""))
    totals = Charge()
    for row in report_rows:
        totals.add_rounded_costs(row.figures)
    report = Report(
        start=start,
        end=end,
        group_by=group_by,
        step=step,
        currency=currency,
        model=model,
        rows=report_rows,
        totals=totals,
        rate_cards=len(pricer.cards),
    )
    report.unpriced_rows = sum(1 for row in report_rows if not report.priced(row.figures))
    return report


def row_dict(report: Report, row: Row) -> dict[str, Any]:
    values: dict[str, Any] = {"group": row.group, "cluster": row.cluster}
    if report.step != "none":
        values["period_start"] = utc_text(row.period_start) if row.period_start else None
    values.update(row.figures.hours(report.with_capacity))
    values["cost"] = row.figures.money()
    values["priced"] = report.priced(row.figures)
    return values


def totals_dict(report: Report) -> dict[str, Any]:
    values: dict[str, Any] = dict(report.totals.hours(report.with_capacity))
    # Totals were summed from the rounded row money: print them as they are.
    allocated = report.totals.cost_allocated
    borrowing = report.totals.cost_borrowing
    lending = report.totals.cost_lending_credit
    values["cost"] = {
        "allocated": allocated,
        "borrowing": borrowing,
        "lending_credit": lending,
        "total": allocated + borrowing - lending,
    }
    return values


def csv_columns(report: Report) -> list[str]:
    columns = ["group", "cluster"]
    if report.step != "none":
        columns.append("period_start")
    if report.with_capacity:
        columns.append("capacity_gpu_hours")
    columns.extend(HOUR_COLUMNS)
    columns.extend(f"cost_{name}" for name in COST_COLUMNS)
    columns.extend(["currency", "priced"])
    return columns


def csv_records(report: Report) -> Iterator[list[Any]]:
    """The CSV header and one record per row; empty cells for null ratios and clusters."""
    columns = csv_columns(report)
    yield columns
    for row in report.rows:
        values = row_dict(report, row)
        cost = values.pop("cost")
        for name in COST_COLUMNS:
            values[f"cost_{name}"] = f"{cost[name]:.2f}"
        values["currency"] = report.currency
        values["priced"] = "true" if values["priced"] else "false"
        yield ["" if values.get(column) is None else values[column] for column in columns]
