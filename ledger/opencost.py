"""The OpenCost-compatible ``/allocation`` call: its window, aggregate and step parameters, and
its envelope ``{"code": 200, "status": "success", "data": [{"<name>": Allocation}, ...]}``.

Figures are the chargeback figures (``ledger.chargeback``) of the same rollups, read through the
same read layer, so an ``aggregate=namespace`` call and ``/chargeback/?group_by=namespace`` agree
for the same window.

- ``window``: ``today``, ``yesterday``, ``week`` / ``lastweek`` (weeks start on Sunday, as in
  OpenCost), ``month`` / ``lastmonth``, durations ``<n>m|h|d|w`` (``24h`` ends at the end of the
  current hour, ``7d`` at the end of today, as OpenCost rounds them), an RFC 3339 pair
  ``start,end`` or a Unix-seconds pair. All times are UTC. Windows are widened to whole hours
  (the rollup resolution) and cut at the end of the current hour (``parse_window``); of those
  hours, only the ones that have ended count (``core.ranges.covered_hours``, the rule of every
  figure), and the response states that window: "today" at 10:20 is 00:00..10:00.
- ``aggregate``: ``cluster``, ``node``, ``namespace``, ``pod``, ``label:<key>``, and ours
  ``team``, ``clusterqueue``, ``localqueue``, ``cohort``, ``workload``, ``flavor``; a comma list
  aggregates by several keys, names joined with ``/``. ``pod`` reads workload rollups: GPU Ledger
  keeps Kueue Workloads (the gang of pods), not pods, for the long term, so a pod's figures are
  its Workload's. Several keys and ``label:`` also read workload rollups (each workload row knows
  its cluster, namespace, team, queues and labels; ``node`` cannot be combined); ``label:`` is a
  label of the Kueue Workload, ``__unallocated__`` when it has none.
- ``step``: a duration in whole hours; one set per step from the window start (the last may be
  shorter). Default: the window, i.e. one set. ``accumulate=true`` sums all sets into one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q

from core.params import InvalidParameter, check_moment
from core.ranges import covered_hours
from fleet.models import Cluster
from ledger.chargeback import (
    NO_COHORT,
    UNATTRIBUTED,
    Charge,
    ChargebackError,
    Pricer,
    aggregate_pieces,
    build_report,
    ceil_hour,
    chargeback_model,
    check_window,
    parse_iso,
    restriction,
    utc_text,
)
from ledger.choices import RollupScope
from quotas.models import ClusterQueue, Team, Workload

UNALLOCATED = "__unallocated__"
DURATION = re.compile(r"^(\d+)(m|h|d|w)$")
UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# OpenCost aggregate → (chargeback group_by, Allocation property name).
SINGLE_KEYS: dict[str, tuple[str, str]] = {
    "cluster": ("cluster", "cluster"),
    "node": ("node", "node"),
    "namespace": ("namespace", "namespace"),
    "pod": ("workload", "pod"),
    "workload": ("workload", "workload"),
    "team": ("team", "team"),
    "clusterqueue": ("cluster_queue", "clusterQueue"),
    "localqueue": ("local_queue", "localQueue"),
    "cohort": ("cohort", "cohort"),
    "flavor": ("flavor", "flavor"),
}
# Keys that workload rollups can answer, for multi-key and label aggregation.
ID_BATCH = 500
# Far beyond any chargeback limit, small enough that datetime arithmetic cannot overflow.
MAX_DURATION_SECONDS = 100 * 365 * 86400


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def midnight(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def parse_duration(parameter: str, raw: str) -> timedelta:
    match = DURATION.match(raw.strip().lower())
    if not match or int(match.group(1)) == 0:
        raise ChargebackError(parameter, f"{raw!r} is not a duration like 90m, 24h, 7d or 2w")
    seconds = int(match.group(1)) * UNIT_SECONDS[match.group(2)]
    if seconds > MAX_DURATION_SECONDS:
        raise ChargebackError(
            parameter, f"{raw!r} is longer than {MAX_DURATION_SECONDS // 86400} days"
        )
    return timedelta(seconds=seconds)


def parse_point(parameter: str, raw: str) -> datetime:
    text = raw.strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", text):
        try:
            moment = datetime.fromtimestamp(float(text), tz=UTC)
            return check_moment(parameter, moment)
        except InvalidParameter as exc:
            raise ChargebackError(parameter, f"{raw!r} {exc.reason}") from None
        except (OverflowError, OSError, ValueError):
            raise ChargebackError(parameter, f"{raw!r} is not a valid Unix time") from None
    return parse_iso(
        parameter,
        raw,
        invalid="is neither RFC 3339 (2026-01-01T00:00:00Z) nor Unix seconds",
        naive="is naive: give a UTC offset (Z or ±hh:mm)",
    )


def parse_window(raw: str | None, now: datetime) -> tuple[datetime, datetime]:
    """OpenCost's ``window`` as a UTC ``[start, end)`` on whole hours, cut at the current hour."""
    if raw is None or raw.strip() == "":
        raise ChargebackError("window", "required, e.g. 7d, lastmonth or start,end")
    text = raw.strip()
    word = text.lower()
    now = now.astimezone(UTC)
    today = midnight(now)
    sunday = today - timedelta(days=(today.weekday() + 1) % 7)
    this_month = today.replace(day=1)
    if word == "today":
        start, end = today, today + timedelta(days=1)
    elif word == "yesterday":
        start, end = today - timedelta(days=1), today
    elif word == "week":
        start, end = sunday, sunday + timedelta(days=7)
    elif word == "lastweek":
        start, end = sunday - timedelta(days=7), sunday
    elif word == "month":
        start = this_month
        end = (this_month + timedelta(days=32)).replace(day=1)
    elif word == "lastmonth":
        start, end = (this_month - timedelta(days=1)).replace(day=1), this_month
    elif DURATION.match(word):
        length = parse_duration("window", word)
        unit = word[-1]
        if unit == "m":
            end = now.replace(second=0, microsecond=0)
            end = end if end == now else end + timedelta(minutes=1)
        elif unit == "h":
            end = ceil_hour(now)
        else:
            end = today + timedelta(days=1)
        start = end - length
    elif "," in text:
        parts = text.split(",")
        if len(parts) != 2:
            raise ChargebackError("window", f"{raw!r}: a pair is exactly two times, start,end")
        start, end = parse_point("window", parts[0]), parse_point("window", parts[1])
    else:
        raise ChargebackError(
            "window",
            f"{raw!r} is not today, yesterday, week, lastweek, month, lastmonth, a duration "
            "(24h, 7d) or a start,end pair",
        )
    if start >= end:
        raise ChargebackError("window", "the window's end must be after its start")
    start, end = floor_hour(start), ceil_hour(min(end, now))
    if start >= end:
        raise ChargebackError("window", "the window lies entirely in the future")
    check_window(start, end, start_name="window", end_name="window")
    return start, end


def parse_aggregate(raw: str | None) -> list[str]:
    text = (raw or "").strip() or "pod"
    keys = [part.strip() for part in text.split(",")]
    for key in keys:
        if key.startswith("label:"):
            if not key[len("label:") :]:
                raise ChargebackError("aggregate", "label: needs a label name, e.g. label:app")
        elif key not in SINGLE_KEYS:
            raise ChargebackError(
                "aggregate",
                f"unknown aggregate {key!r}; use {', '.join(SINGLE_KEYS)} or label:<name>",
            )
    if len(set(keys)) != len(keys):
        raise ChargebackError("aggregate", "a key is repeated")
    if len(keys) > 1 and any(key in ("node", "flavor") for key in keys):
        raise ChargebackError(
            "aggregate", "node and flavor cannot be combined with other keys (no workload split)"
        )
    return keys


def parse_bool(parameter: str, raw: str | None) -> bool:
    value = (raw or "").strip().lower()
    if value in ("", "false", "0", "no"):
        return False
    if value in ("true", "1", "yes"):
        return True
    raise ChargebackError(parameter, f"{raw!r} is not true or false")


def parse_step(raw: str | None, start: datetime, end: datetime) -> timedelta | None:
    if raw is None or raw.strip() == "":
        return None
    step = parse_duration("step", raw)
    if step.total_seconds() % 3600:
        raise ChargebackError(
            "step", f"{raw!r} is not a whole number of hours (rollups are hourly)"
        )
    return step


@dataclass
class AllocationSet:
    start: datetime
    end: datetime
    allocations: dict[str, tuple[dict[str, Any], Charge]]


def set_bounds(start: datetime, end: datetime, step: timedelta | None) -> list[tuple]:
    if step is None or step >= end - start:
        return [(start, end)]
    bounds = []
    cursor = start
    while cursor < end:
        bounds.append((cursor, min(cursor + step, end)))
        cursor += step
    return bounds


def base_step(start: datetime, bounds: list[tuple]) -> str:
    """The coarsest rollup truncation whose periods fall inside single sets."""
    if len(bounds) == 1:
        return "none"
    if all(midnight(s) == s for s, _ in bounds):
        return "day"
    return "hour"


def set_index(bounds: list[tuple], moment: datetime | None) -> int:
    if moment is None or len(bounds) == 1:
        return 0
    for index, (_, set_end) in enumerate(bounds):
        if moment < set_end:
            return index
    return len(bounds) - 1


def build_sets(
    *,
    start: datetime,
    end: datetime,
    keys: list[str],
    step: timedelta | None,
    accumulate: bool,
    team_ids: set[int] | None,
) -> list[AllocationSet]:
    """The allocation sets of ``[start, end)``, cut to the hours that have ended."""
    span = covered_hours(start, end)
    start, end = span.first, span.stop
    bounds = [(start, end)] if accumulate else set_bounds(start, end, step)
    sets = [AllocationSet(s, e, {}) for s, e in bounds]
    if not span.count:
        return sets
    base = base_step(start, bounds)
    if len(keys) == 1 and not keys[0].startswith("label:"):
        group_by, prop = SINGLE_KEYS[keys[0]]
        report = build_report(start=start, end=end, group_by=group_by, step=base, team_ids=team_ids)
        for row in report.rows:
            period = None if row.period_start is None else max(row.period_start, start)
            target = sets[set_index(bounds, period)].allocations
            properties: dict[str, Any] = {prop: row.group}
            if row.cluster:
                properties.setdefault("cluster", row.cluster)
            add_allocation(target, row.group, properties, row.figures)
        return sets
    for name, properties, period, figures in workload_pieces(
        start=start, end=end, keys=keys, trunc=None if base == "none" else base, team_ids=team_ids
    ):
        add_allocation(sets[set_index(bounds, period)].allocations, name, properties, figures)
    return sets


def add_allocation(
    target: dict[str, tuple[dict[str, Any], Charge]],
    name: str,
    properties: dict[str, Any],
    figures: Charge,
) -> None:
    if name in target:
        known, summed = target[name]
        for prop, value in list(known.items()):
            if properties.get(prop) != value:
                del known[prop]
        summed.add(figures)
    else:
        merged = Charge()
        merged.add(figures)
        target[name] = (dict(properties), merged)


def workload_pieces(
    *,
    start: datetime,
    end: datetime,
    keys: list[str],
    trunc: str | None,
    team_ids: set[int] | None,
) -> Any:
    """Workload rollups named by several keys (or a label): (name, properties, period, figures)."""
    pricer = Pricer(start, end, settings.GPULEDGER_CURRENCY, chargeback_model())
    restrict: Q | None = restriction("workload", team_ids)
    pieces = list(
        aggregate_pieces(
            start=start,
            end=end,
            scope=RollupScope.WORKLOAD,
            pricer=pricer,
            trunc=trunc,
            restrict=restrict,
            extra_fields=("workload_id", "team_id", "cluster_queue_id"),
        )
    )
    clusters = dict(Cluster.objects.values_list("id", "name"))
    teams = dict(Team.objects.values_list("id", "name"))
    queue_ids = {p.extra["cluster_queue_id"] for p in pieces if p.extra["cluster_queue_id"]}
    queues = {
        pk: (name, cohort)
        for pk, name, cohort in ClusterQueue.objects.filter(id__in=queue_ids).values_list(
            "id", "name", "cohort_name"
        )
    }
    workload_ids = sorted({p.extra["workload_id"] for p in pieces if p.extra["workload_id"]})
    workloads: dict[int, tuple[str, str, dict]] = {}
    for offset in range(0, len(workload_ids), ID_BATCH):
        batch = workload_ids[offset : offset + ID_BATCH]
        for pk, namespace, lq_name, queue_name, labels in Workload.objects.filter(
            id__in=batch
        ).values_list("id", "namespace", "local_queue__name", "queue_name", "labels"):
            local_queue = lq_name or queue_name
            workloads[pk] = (
                namespace,
                f"{namespace}/{local_queue}" if local_queue else UNALLOCATED,
                labels or {},
            )
    for piece in pieces:
        queue = queues.get(piece.extra["cluster_queue_id"])
        workload = workloads.get(piece.extra["workload_id"])
        properties: dict[str, Any] = {}
        values = []
        for key in keys:
            if key == "cluster":
                prop, value = "cluster", clusters.get(piece.cluster_id, UNALLOCATED)
            elif key == "namespace":
                prop, value = "namespace", piece.key.split("/", 1)[0]
            elif key in ("pod", "workload"):
                prop, value = key, piece.key
            elif key == "team":
                prop, value = "team", teams.get(piece.extra["team_id"], UNATTRIBUTED)
            elif key == "clusterqueue":
                prop, value = "clusterQueue", queue[0] if queue else UNATTRIBUTED
            elif key == "cohort":
                prop, value = "cohort", (queue[1] or NO_COHORT) if queue else UNATTRIBUTED
            elif key == "localqueue":
                prop, value = "localQueue", workload[1] if workload else UNALLOCATED
            else:
                label = key[len("label:") :]
                prop = "labels"
                value = str(workload[2].get(label, UNALLOCATED)) if workload else UNALLOCATED
                properties.setdefault("labels", {})[label] = value
                values.append(value)
                continue
            properties[prop] = value
            values.append(value)
        if "cluster" not in properties:
            properties["cluster"] = clusters.get(piece.cluster_id, UNALLOCATED)
        yield "/".join(values), properties, piece.period, piece.figures


def allocation_dict(
    name: str, properties: dict[str, Any], start: datetime, end: datetime, figures: Charge
) -> dict[str, Any]:
    hours = (end - start).total_seconds() / 3600
    money = figures.money()
    allocated = figures.allocated_gpu_hours
    ledger: dict[str, Any] = dict(figures.hours(with_capacity=True))
    ledger["telemetry_gpu_hours"] = round(figures.telemetry_gpu_hours, 6)
    ledger["cost"] = {key: float(value) for key, value in money.items()}
    return {
        "name": name,
        "properties": properties,
        "window": {"start": utc_text(start), "end": utc_text(end)},
        "start": utc_text(start),
        "end": utc_text(end),
        "minutes": hours * 60,
        "gpuCount": round(allocated / hours, 6),
        "gpuHours": round(allocated, 6),
        "gpuRequestAverage": round(allocated / hours, 6),
        "gpuUsageAverage": round(figures.active_gpu_hours / hours, 6),
        "gpuEfficiency": round(figures.active_gpu_hours / allocated, 6) if allocated > 0 else 0.0,
        "gpuCost": float(money["total"]),
        "totalCost": float(money["total"]),
        "gpuLedger": ledger,
    }


def envelope(sets: list[AllocationSet]) -> dict[str, Any]:
    return {
        "code": 200,
        "status": "success",
        "data": [
            {
                name: allocation_dict(name, properties, item.start, item.end, figures)
                for name, (properties, figures) in sorted(item.allocations.items())
            }
            for item in sets
        ],
    }
