"""Chargeback figures from hourly rollups: GPU-hours, real use and cost per group and period.

All figures come from the rollup read layer (``HourlyRollup.objects.covering(…).figures(…)``,
DESIGN "Figures"); one aggregated query per request, grouped by (cluster, key, flavor, GPU
model[, period][, price segment]), then priced and summed here. The rules (README "Chargeback
API" has the worked example):

- A window is ``[start, end)`` on whole UTC hours, the rollup resolution; a rollup row belongs
  to the window when its ``hour`` starts inside it and the hour has ended
  (``core.ranges.covered_hours``): the hour in progress is not counted until it ends.
- Steps split the window at UTC hour, day or month boundaries. ``period_start`` is the
  boundary itself, so the first and last periods may be partial (only the window's hours count).
- ``no_telemetry = allocated − telemetry``; ``utilization = active / telemetry`` (null without
  telemetry); ``telemetry_coverage = telemetry / allocated`` (null without allocation). Ratios
  of totals are recomputed from the summed hours, never summed.
- Prices (``quotas.RateCard``, only cards in ``GPULEDGER_CURRENCY``): each hour uses the card
  in force when it starts: the (flavor) card first, else the (GPU model) card, else the default
  card; no card means no charge (logged). ``GPULEDGER_CHARGEBACK_MODEL``:
  ``usage`` (default): allocated GPU-hours × allocated price;
  ``quota``: nominal GPU-hours × allocated price + borrowed GPU-hours × borrowing price (the
  allocated price when no borrowing card) − lent GPU-hours × lending credit (0 when no card).
- Money is ``Decimal`` throughout and rounded to cents (half up) once, at output, per row and
  component; a row's total is the sum of its rounded components and the totals the sum of the
  rounded rows, so every printed figure adds up exactly.
- Groups that existed in the window (teams; ClusterQueues, LocalQueues, cohorts, nodes, flavors
  not deleted before it and not created after it; clusters) appear with zeros when they have no
  rollups. So do the workloads that lived in it (created before its end, not finished or deleted
  before its start: each waited or held quota there) and their namespaces, with their
  ``pending_gpu_hours``. Standalone ClusterQueues are the cohort group ``(no cohort)``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Case, Exists, F, IntegerField, OuterRef, Q, Value, When
from django.db.models.functions import Concat, TruncDay, TruncMonth

from core.params import InvalidParameter, check_moment
from fleet.models import Cluster, Node
from ledger.choices import RateKind, RollupScope
from ledger.figures import Figures
from ledger.models import HourlyRollup, RateCard
from ledger.rollup.groups import NO_COHORT
from quotas.models import (
    ClusterQueue,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Team,
    TeamNamespace,
    Workload,
)

logger = logging.getLogger(__name__)

GROUP_SCOPES: dict[str, str] = {
    "team": RollupScope.TEAM,
    "cluster_queue": RollupScope.CLUSTER_QUEUE,
    "local_queue": RollupScope.LOCAL_QUEUE,
    "cohort": RollupScope.COHORT,
    "namespace": RollupScope.NAMESPACE,
    "workload": RollupScope.WORKLOAD,
    "flavor": RollupScope.FLAVOR,
    "node": RollupScope.NODE,
    "cluster": RollupScope.FLEET,
}
CAPACITY_GROUPS = frozenset({"cluster", "node", "flavor"})
# Groupings a team lead sees in full: fleet-level aggregates (quotas/access.py).
AGGREGATE_GROUPS = frozenset({"cohort", "cluster", "node", "flavor"})
STEPS = ("none", "hour", "day", "month")
MODELS = ("usage", "quota")
UNATTRIBUTED = "(unattributed)"
CENT = Decimal("0.01")
HOURS_DIGITS = 6
# Zero rows for groups without rollups are padded per period; past this many the request is
# refused (a 1,000-queue fleet by hour over a year would be ~9 million rows).
MAX_PADDED_ROWS = 500_000

# The figures the chargeback reads: those its covering index carries, so a year by team stays
# an index-only scan on PostgreSQL (bench/chargeback.py).
CHARGEBACK_INDEX = "fleet_rollup_chargeback"
CHARGEBACK_FIGURES = HourlyRollup.figures_in_index(CHARGEBACK_INDEX)
HOUR_COLUMNS = (
    "allocated_gpu_hours",
    "active_gpu_hours",
    "idle_gpu_hours",
    "no_telemetry_gpu_hours",
    "utilization",
    "telemetry_coverage",
    "borrowed_gpu_hours",
    "lent_gpu_hours",
    "nominal_gpu_hours",
    "pending_gpu_hours",
)
COST_COLUMNS = ("allocated", "borrowing", "lending_credit", "total")


class ChargebackError(ValueError):
    """A request that cannot be answered; ``parameter`` names the culprit."""

    def __init__(self, parameter: str, reason: str) -> None:
        super().__init__(f"{parameter}: {reason}")
        self.parameter = parameter
        self.reason = reason


def chargeback_model() -> str:
    model = getattr(settings, "GPULEDGER_CHARGEBACK_MODEL", "usage")
    if model not in MODELS:
        raise ImproperlyConfigured(
            f"GPULEDGER_CHARGEBACK_MODEL={model!r} must be one of {', '.join(MODELS)}"
        )
    return model


def utc_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_decimal(hours: float) -> Decimal:
    return Decimal(repr(float(hours)))


def cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def ceil_hour(moment: datetime) -> datetime:
    floored = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return floored if floored == moment else floored + timedelta(hours=1)


def is_whole_hour(moment: datetime) -> bool:
    return moment.minute == 0 and moment.second == 0 and moment.microsecond == 0


def period_floor(moment: datetime, step: str) -> datetime:
    moment = moment.astimezone(UTC)
    if step == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    if step == "day":
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if step == "month":
        return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    raise ValueError(step)


def next_period(moment: datetime, step: str) -> datetime:
    if step == "hour":
        return moment + timedelta(hours=1)
    if step == "day":
        return moment + timedelta(days=1)
    if moment.month == 12:
        return moment.replace(year=moment.year + 1, month=1)
    return moment.replace(month=moment.month + 1)


def period_starts(start: datetime, end: datetime, step: str) -> list[datetime]:
    """The UTC boundaries of the periods that overlap ``[start, end)``."""
    starts = []
    cursor = period_floor(start, step)
    while cursor < end:
        starts.append(cursor)
        cursor = next_period(cursor, step)
    return starts


@dataclass
class Charge(Figures):
    """The read layer's figures of one group (and period), plus their unrounded money."""

    SUMMED: ClassVar[tuple[str, ...]] = CHARGEBACK_FIGURES

    cost_allocated: Decimal = field(default_factory=Decimal)
    cost_borrowing: Decimal = field(default_factory=Decimal)
    cost_lending_credit: Decimal = field(default_factory=Decimal)
    # Charged GPU-hours that no rate card priced (counted at 0.00): a row is ``priced`` only
    # when this stays 0 (and a card exists at all).
    unpriced_gpu_hours: float = 0.0

    def add(self, other: Figures) -> None:
        super().add(other)
        if isinstance(other, Charge):
            self.cost_allocated += other.cost_allocated
            self.cost_borrowing += other.cost_borrowing
            self.cost_lending_credit += other.cost_lending_credit
            self.unpriced_gpu_hours += other.unpriced_gpu_hours

    def add_rounded_costs(self, other: Charge) -> None:
        """Sum hours, and money as printed (rounded per component), for totals."""
        Figures.add(self, other)
        self.unpriced_gpu_hours += other.unpriced_gpu_hours
        self.cost_allocated += cents(other.cost_allocated)
        self.cost_borrowing += cents(other.cost_borrowing)
        self.cost_lending_credit += cents(other.cost_lending_credit)

    def hours(self, with_capacity: bool) -> dict[str, float | None]:
        values: dict[str, float | None] = {}
        if with_capacity:
            values["capacity_gpu_hours"] = round(self.capacity_gpu_hours, HOURS_DIGITS)
        for name in HOUR_COLUMNS:
            value = getattr(self, name)
            values[name] = None if value is None else round(value, HOURS_DIGITS)
        return values

    def money(self) -> dict[str, Decimal]:
        allocated = cents(self.cost_allocated)
        borrowing = cents(self.cost_borrowing)
        lending = cents(self.cost_lending_credit)
        return {
            "allocated": allocated,
            "borrowing": borrowing,
            "lending_credit": lending,
            "total": allocated + borrowing - lending,
        }


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
    rows: list[Row]
    totals: Charge
    rate_cards: int = 0

    @property
    def with_capacity(self) -> bool:
        return self.group_by in CAPACITY_GROUPS

    def priced(self, figures: Charge) -> bool:
        """Whether every charged GPU-hour of ``figures`` had a rate card (none exist: never)."""
        return self.rate_cards > 0 and figures.unpriced_gpu_hours <= 0

    def pricing(self) -> dict[str, Any]:
        """Whether the costs mean anything, said once for the whole answer."""
        unpriced = [row for row in self.rows if not self.priced(row.figures)]
        if self.rate_cards == 0:
            note = (
                f"No rate card in {self.currency}: every cost is 0.00. Add rate cards "
                "(admin, Rate cards) to price GPU-hours."
            )
        elif unpriced:
            hours = round(self.totals.unpriced_gpu_hours, 1)
            note = (
                f"{len(unpriced)} of {len(self.rows)} rows include GPU-hours no rate card "
                f"prices ({hours:g} GPU-hours in all), counted at 0.00."
            )
        else:
            note = f"Every charged GPU-hour is priced by a rate card in {self.currency}."
        return {
            "complete": self.rate_cards > 0 and not unpriced,
            "rate_cards": self.rate_cards,
            "unpriced_rows": len(unpriced),
            "unpriced_gpu_hours": round(self.totals.unpriced_gpu_hours, HOURS_DIGITS),
            "note": note,
        }


# --- Prices -----------------------------------------------------------------------------------


class Pricer:
    """Rate cards in force per hour, and the price segments of a window.

    A segment is a run of hours in which no card changes; the aggregate query groups by segment
    (a CASE on ``hour``) so each piece is priced with one card.
    """

    def __init__(self, start: datetime, end: datetime, currency: str, model: str) -> None:
        self.start = start
        self.model = model
        self.cards = list(RateCard.objects.in_currency(currency).order_by("effective_from"))
        self.breaks = sorted(
            {
                ceil_hour(card.effective_from)
                for card in self.cards
                if start < ceil_hour(card.effective_from) < end
            }
        )
        self._cache: dict[tuple[str, str, str, int], Decimal | None] = {}
        self._missing: set[tuple[str, str, str]] = set()

    def segment_expression(self) -> Case | None:
        if not self.breaks:
            return None
        whens = [
            When(hour__lt=boundary, then=Value(index)) for index, boundary in enumerate(self.breaks)
        ]
        return Case(*whens, default=Value(len(self.breaks)), output_field=IntegerField())

    def segment_start(self, index: int) -> datetime:
        return self.start if index == 0 else self.breaks[index - 1]

    def price(self, kind: str, flavor: str, gpu_model: str, segment: int) -> Decimal | None:
        cache_key = (kind, flavor, gpu_model, segment)
        if cache_key not in self._cache:
            self._cache[cache_key] = self._lookup(
                kind, flavor, gpu_model, self.segment_start(segment)
            )
        return self._cache[cache_key]

    def _lookup(self, kind: str, flavor: str, gpu_model: str, at: datetime) -> Decimal | None:
        in_force = [c for c in self.cards if c.kind == kind and ceil_hour(c.effective_from) <= at]
        for matches in (
            [c for c in in_force if flavor and c.flavor == flavor],
            [c for c in in_force if gpu_model and not c.flavor and c.gpu_model == gpu_model],
            [c for c in in_force if not c.flavor and not c.gpu_model],
        ):
            if matches:
                return matches[-1].price_per_gpu_hour
        return None

    def price_piece(self, figures: Charge, flavor: str, gpu_model: str, segment: int) -> None:
        allocated_price = self.price(RateKind.ALLOCATED, flavor, gpu_model, segment)
        if allocated_price is None:
            if self.model == "quota":
                charged = figures.nominal_gpu_hours + figures.borrowed_gpu_hours
            else:
                charged = figures.allocated_gpu_hours
            if charged > 0:
                self._warn_missing(flavor, gpu_model)
                figures.unpriced_gpu_hours += charged
            allocated_price = Decimal(0)
        if self.model == "usage":
            figures.cost_allocated = to_decimal(figures.allocated_gpu_hours) * allocated_price
            return
        borrowing_price = self.price(RateKind.BORROWING, flavor, gpu_model, segment)
        lending_price = self.price(RateKind.LENDING, flavor, gpu_model, segment)
        figures.cost_allocated = to_decimal(figures.nominal_gpu_hours) * allocated_price
        figures.cost_borrowing = to_decimal(figures.borrowed_gpu_hours) * (
            allocated_price if borrowing_price is None else borrowing_price
        )
        figures.cost_lending_credit = to_decimal(figures.lent_gpu_hours) * (
            lending_price or Decimal(0)
        )

    def _warn_missing(self, flavor: str, gpu_model: str) -> None:
        key = (RateKind.ALLOCATED, flavor, gpu_model)
        if key not in self._missing:
            self._missing.add(key)
            logger.warning(
                "no rate card for flavor %r / GPU model %r: its GPU-hours are not charged",
                flavor,
                gpu_model,
            )


# --- The aggregate query ------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """One (cluster, key, flavor, GPU model[, period][, segment]) aggregate, priced."""

    cluster_id: int
    key: str
    period: datetime | None
    figures: Charge
    extra: dict[str, Any]


def period_expression(trunc: str | None) -> Any:
    if trunc == "hour":
        return F("hour")
    if trunc == "day":
        return TruncDay("hour", tzinfo=UTC)
    if trunc == "month":
        return TruncMonth("hour", tzinfo=UTC)
    return None


def aggregate_pieces(
    *,
    start: datetime,
    end: datetime,
    scope: str,
    pricer: Pricer,
    cluster: Cluster | None = None,
    trunc: str | None = None,
    restrict: Q | None = None,
    extra_fields: Iterable[str] = (),
) -> Iterator[Piece]:
    """Priced sums of the rollups of ``scope`` over the hours ``[start, end)`` counts, one query."""
    rollups = HourlyRollup.objects.for_scope(scope).covering(start, end)
    if cluster is not None:
        rollups = rollups.filter(cluster=cluster)
    if restrict is not None:
        rollups = rollups.filter(restrict)
    computed: dict[str, Any] = {}
    group_fields = ["cluster_id", "key", "flavor", "gpu_model", *extra_fields]
    period = period_expression(trunc)
    if period is not None:
        computed["period"] = period
        group_fields.append("period")
    segment = pricer.segment_expression()
    if segment is not None:
        computed["segment"] = segment
        group_fields.append("segment")
    found = rollups.figures(
        group_fields, names=CHARGEBACK_FIGURES, computed=computed, big_scan=True, into=Charge
    )
    column = {name: index for index, name in enumerate(group_fields)}
    extra_columns = [(name, column[name]) for name in extra_fields]
    period_column, segment_column = column.get("period"), column.get("segment")
    for group, figures in found.items():
        cluster_id, key, flavor, gpu_model = group[:4]
        segment_index = 0 if segment_column is None else group[segment_column]
        pricer.price_piece(figures, flavor, gpu_model, segment_index)
        yield Piece(
            cluster_id=cluster_id,
            key=key,
            period=None if period_column is None else group[period_column].astimezone(UTC),
            figures=figures,
            extra={name: group[index] for name, index in extra_columns},
        )


# --- Who sees what ------------------------------------------------------------------------------


def pairs_q(pairs: Iterable[tuple[int, str]]) -> Q:
    """``(cluster, key) in pairs`` as a Q on HourlyRollup."""
    by_cluster: dict[int, set[str]] = {}
    for cluster_id, key in pairs:
        by_cluster.setdefault(cluster_id, set()).add(key)
    condition = Q(pk__in=[])
    for cluster_id, keys in by_cluster.items():
        condition |= Q(cluster_id=cluster_id, key__in=sorted(keys))
    return condition


def visible_namespaces(team_ids: set[int]) -> set[tuple[int, str]]:
    """Namespaces of a lead's teams: TeamNamespace, and their ClusterQueues' LocalQueues."""
    owned = TeamNamespace.objects.filter(team_id__in=team_ids).values_list(
        "cluster_id", "namespace"
    )
    queued = LocalQueue.objects.filter(cluster_queue__team_id__in=team_ids).values_list(
        "cluster_id", "namespace"
    )
    return set(owned) | set(queued)


def restriction(group_by: str, team_ids: set[int] | None) -> Q | None:
    """The rollup rows a user may see for ``group_by``; None = all (staff, finance)."""
    if team_ids is None or group_by in AGGREGATE_GROUPS:
        return None
    if group_by == "team":
        names = Team.objects.filter(id__in=team_ids).values_list("name", flat=True)
        return Q(key__in=list(names))
    if group_by == "cluster_queue":
        queues = ClusterQueue.objects.filter(team_id__in=team_ids).values_list("cluster_id", "name")
        return pairs_q(queues)
    if group_by == "local_queue":
        local = LocalQueue.objects.filter(cluster_queue__team_id__in=team_ids).values_list(
            "cluster_id", "namespace", "name"
        )
        return pairs_q((c, f"{ns}/{name}") for c, ns, name in local)
    if group_by == "namespace":
        return pairs_q(visible_namespaces(team_ids))
    if group_by == "workload":
        workloads = (
            Workload.objects.filter(
                cluster_id=OuterRef("cluster_id"),
                cluster_queue__team_id__in=team_ids,
            )
            .annotate(path=Concat("namespace", Value("/"), "name"))
            .filter(path=OuterRef("key"))
        )
        return Q(Exists(workloads))
    raise ValueError(group_by)


# --- Groups that existed in the window ---------------------------------------------------------


@dataclass(frozen=True)
class KnownGroup:
    cluster_id: int | None
    key: str
    since: datetime | None
    until: datetime | None

    def existed(self, start: datetime, end: datetime) -> bool:
        return (self.since is None or self.since < end) and (
            self.until is None or self.until > start
        )


def known_groups(
    group_by: str,
    start: datetime,
    end: datetime,
    cluster: Cluster | None,
    team_ids: set[int] | None,
) -> list[KnownGroup]:
    def lifecycle(queryset: Any, *key_fields: str) -> list[KnownGroup]:
        if cluster is not None:
            queryset = queryset.filter(cluster=cluster)
        queryset = queryset.filter(Q(deleted_at__isnull=True) | Q(deleted_at__gt=start)).filter(
            Q(observed_at__isnull=True) | Q(observed_at__lt=end)
        )
        values = queryset.values_list("cluster_id", "observed_at", "deleted_at", *key_fields)
        return [
            KnownGroup(cluster_id, "/".join(parts), since, until)
            for cluster_id, since, until, *parts in values
        ]

    if group_by == "team":
        teams = Team.objects.all()
        if team_ids is not None:
            teams = teams.filter(id__in=team_ids)
        return [KnownGroup(None, name, None, None) for name in teams.values_list("name", flat=True)]
    if group_by == "cluster":
        clusters = Cluster.objects.all() if cluster is None else [cluster]
        return [KnownGroup(c.pk, c.name, None, None) for c in clusters]
    if group_by == "cluster_queue":
        queues = ClusterQueue.objects.all()
        if team_ids is not None:
            queues = queues.filter(team_id__in=team_ids)
        return lifecycle(queues, "name")
    if group_by == "local_queue":
        local = LocalQueue.objects.all()
        if team_ids is not None:
            local = local.filter(cluster_queue__team_id__in=team_ids)
        return lifecycle(local, "namespace", "name")
    if group_by == "cohort":
        # Standalone ClusterQueues make the "(no cohort)" group of their cluster.
        standalone = ClusterQueue.objects.filter(cohort__isnull=True, cohort_name="")
        alone = [
            KnownGroup(group.cluster_id, NO_COHORT, group.since, group.until)
            for group in lifecycle(standalone, "name")
        ]
        return lifecycle(Cohort.objects.all(), "name") + alone
    if group_by in ("workload", "namespace"):
        return waiting_or_holding(group_by, start, end, cluster, team_ids)
    if group_by == "node":
        return lifecycle(Node.objects.all(), "name")
    if group_by == "flavor":
        return lifecycle(ResourceFlavor.objects.all(), "name")
    return []


def waiting_or_holding(
    group_by: str,
    start: datetime,
    end: datetime,
    cluster: Cluster | None,
    team_ids: set[int] | None,
) -> list[KnownGroup]:
    """Workloads (or their namespaces) that lived in the window: each waited for quota or held
    it there, so each gets a row, with zeros where it held no GPUs (README "Chargeback API").

    A workload lives from its creation until it finished or was deleted; one never seen created
    (no ``observed_at``) counts from the start.
    """
    workloads = Workload.objects.filter(Q(observed_at__isnull=True) | Q(observed_at__lt=end))
    workloads = workloads.filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start)).filter(
        Q(deleted_at__isnull=True) | Q(deleted_at__gt=start)
    )
    if cluster is not None:
        workloads = workloads.filter(cluster=cluster)
    if group_by == "workload":
        if team_ids is not None:
            workloads = workloads.filter(cluster_queue__team_id__in=team_ids)
        values = workloads.values_list(
            "cluster_id", "namespace", "name", "observed_at", "finished_at", "deleted_at"
        )
        return [
            KnownGroup(
                cluster_id,
                f"{namespace}/{name}",
                since,
                min((t for t in (finished, deleted) if t is not None), default=None),
            )
            for cluster_id, namespace, name, since, finished, deleted in values
        ]
    spans: dict[tuple[int, str], tuple[datetime | None, datetime | None]] = {}
    visible = visible_namespaces(team_ids) if team_ids is not None else None
    for cluster_id, namespace, since, finished, deleted in workloads.values_list(
        "cluster_id", "namespace", "observed_at", "finished_at", "deleted_at"
    ):
        if visible is not None and (cluster_id, namespace) not in visible:
            continue
        until = min((t for t in (finished, deleted) if t is not None), default=None)
        known = spans.get((cluster_id, namespace))
        if known is not None:
            since = None if since is None or known[0] is None else min(since, known[0])
            until = None if until is None or known[1] is None else max(until, known[1])
        spans[(cluster_id, namespace)] = (since, until)
    return [
        KnownGroup(cluster_id, namespace, since, until)
        for (cluster_id, namespace), (since, until) in spans.items()
    ]


# --- The report ---------------------------------------------------------------------------------


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


def build_report(
    *,
    start: datetime,
    end: datetime,
    group_by: str,
    step: str = "none",
    cluster: Cluster | None = None,
    team_ids: set[int] | None = None,
) -> Report:
    """The chargeback report of ``group_by`` over ``[start, end)`` as ``team_ids`` may see it.

    ``team_ids`` is ``access.visible_team_ids(user)``: None for staff and finance, and for
    everyone under ``GPULEDGER_TEAM_VISIBILITY=public``.
    """
    if group_by not in GROUP_SCOPES:
        raise ChargebackError("group_by", f"unknown group {group_by!r}")
    if step not in STEPS:
        raise ChargebackError("step", f"unknown step {step!r}")
    check_window(start, end, start_name="start", end_name="end")
    model = chargeback_model()
    currency = settings.GPULEDGER_CURRENCY
    periods = period_starts(start, end, step) if step != "none" else [None]

    known = known_groups(group_by, start, end, cluster, team_ids)
    if len(known) * len(periods) > MAX_PADDED_ROWS:
        raise ChargebackError(
            "step",
            f"{len(known)} groups × {len(periods)} periods is more than {MAX_PADDED_ROWS} rows: "
            "use a coarser step or a shorter window",
        )

    pricer = Pricer(start, end, currency, model)
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
    )
    for piece in pieces:
        row_key = (piece.period, piece.key, None if merged_cluster else piece.cluster_id)
        summed = rows.get(row_key)
        if summed is None:
            rows[row_key] = summed = Charge()
        summed.add(piece.figures)

    for group in known:
        for period in periods:
            if period is None:
                exists = group.existed(start, end)
            else:
                exists = group.existed(max(period, start), min(next_period(period, step), end))
            if exists:
                rows.setdefault((period, group.key, group.cluster_id), Charge())

    cluster_names: dict[int | None, str | None] = dict(Cluster.objects.values_list("id", "name"))
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
    return Report(
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
