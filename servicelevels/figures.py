"""Queue service-level figures, read from admission records: the one definition of each.

For a group (ClusterQueue, LocalQueue, cohort, team or priority class) and a period ``(start, end]``
(the whole range, or each UTC hour or day in it, clipped to the range):

- ``admissions``: records whose ``admitted_at`` falls in the period;
- ``wait_seconds_*``: queued -> admitted of those admissions; p50/p90/p95 are nearest rank
  (``servicelevels.stats.nearest_rank``), ``max`` and ``mean`` are plain;
- ``running_delay_seconds_*``: admitted -> first pod Running, over those admissions whose pods ran;
- ``pending_at_end``: records queued at or before the period's end and not yet admitted, evicted or
  finished then; ``oldest_pending_seconds`` is the longest of their waits at the end;
- ``evictions``: records evicted in the period, by reason; ``preemptions`` those whose reason is
  Preempted, by the Preempted condition's reason and by the preempting ClusterQueue;
- ``preempted_gpu_hours``: the GPU-hours of the runs that ended in a preemption in the period, from
  the first pod Running to the eviction (a run whose pods never ran lost no GPU time).

Visibility is the caller's: pass the teams a user may see (None = every team, admins only;
records of no team are then shown too). A preempting ClusterQueue of a team the user may not
see is counted under ``HIDDEN_QUEUE``, never named.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet

from core.timewindows import floor_time
from servicelevels.choices import EvictionReason
from servicelevels.models import AdmissionRecord
from servicelevels.stats import nearest_rank

GROUP_BY = ("cluster_queue", "local_queue", "cohort", "team", "priority_class")
STEPS = ("none", "hour", "day")
SOURCE_RECORDS = "records"
# What a viewer who may not see the preempting queue's team reads in its place.
HIDDEN_QUEUE = "(another team)"

_STEP_DELTA = {"hour": timedelta(hours=1), "day": timedelta(days=1)}


@dataclass
class LevelRow:
    """The figures of one group over one period."""

    group: str
    cluster: str
    period_start: datetime
    period_end: datetime
    admissions: int = 0
    wait_seconds_p50: float | None = None
    wait_seconds_p90: float | None = None
    wait_seconds_p95: float | None = None
    wait_seconds_max: float | None = None
    wait_seconds_mean: float | None = None
    running_delay_seconds_p50: float | None = None
    running_delay_seconds_p95: float | None = None
    pending_at_end: int = 0
    oldest_pending_seconds: float | None = None
    evictions: dict[str, int] = field(default_factory=dict)
    preemptions: int = 0
    preemptions_by_reason: dict[str, int] = field(default_factory=dict)
    preemptions_by_queue: dict[str, int] = field(default_factory=dict)
    preempted_gpu_hours: float = 0.0
    source: str = SOURCE_RECORDS

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "cluster": self.cluster,
            "period_start": self.period_start,
            "period_end": self.period_end,
            "admissions": self.admissions,
            "wait_seconds_p50": self.wait_seconds_p50,
            "wait_seconds_p90": self.wait_seconds_p90,
            "wait_seconds_p95": self.wait_seconds_p95,
            "wait_seconds_max": self.wait_seconds_max,
            "wait_seconds_mean": self.wait_seconds_mean,
            "running_delay_seconds_p50": self.running_delay_seconds_p50,
            "running_delay_seconds_p95": self.running_delay_seconds_p95,
            "pending_at_end": self.pending_at_end,
            "oldest_pending_seconds": self.oldest_pending_seconds,
            "evictions": dict(self.evictions),
            "preemptions": self.preemptions,
            "preemptions_by_reason": dict(self.preemptions_by_reason),
            "preemptions_by_queue": dict(self.preemptions_by_queue),
            "preempted_gpu_hours": self.preempted_gpu_hours,
            "source": self.source,
        }


def periods(start: datetime, end: datetime, step: str) -> list[tuple[datetime, datetime]]:
    """The periods ``(a, b]`` of ``(start, end]``: the whole range, or each UTC hour or day."""
    if step not in STEPS:
        raise ValueError(f"step must be one of {', '.join(STEPS)}")
    if end <= start:
        return []
    if step == "none":
        return [(start, end)]
    delta = _STEP_DELTA[step]
    edge = floor_time(start, int(delta.total_seconds()))
    out: list[tuple[datetime, datetime]] = []
    while edge < end:
        stop = edge + delta
        out.append((max(edge, start), min(stop, end)))
        edge = stop
    return out


_FIELDS = (
    "cluster__name",
    "cluster_queue_name",
    "namespace",
    "local_queue_name",
    "cohort_name",
    "team__name",
    "priority_class_name",
    "gpus",
    "queued_at",
    "admitted_at",
    "running_at",
    "evicted_at",
    "eviction_reason",
    "preemption_reason",
    "preempting_cluster_queue_name",
    "finished_at",
)
# Positions in the value tuples of ``_FIELDS``.
(
    _CLUSTER,
    _QUEUE,
    _NAMESPACE,
    _LOCAL_QUEUE,
    _COHORT,
    _TEAM,
    _PRIORITY_CLASS,
    _GPUS,
    _QUEUED,
    _ADMITTED,
    _RUNNING,
    _EVICTED,
    _EVICTION_REASON,
    _PREEMPTION_REASON,
    _PREEMPTING_QUEUE,
    _FINISHED,
) = range(len(_FIELDS))


def _group_key(row: tuple[Any, ...], group_by: str) -> str:
    if group_by == "cluster_queue":
        return row[_QUEUE] or ""
    if group_by == "local_queue":
        name = row[_LOCAL_QUEUE]
        return f"{row[_NAMESPACE]}/{name}" if name else ""
    if group_by == "cohort":
        return row[_COHORT] or ""
    if group_by == "team":
        return row[_TEAM] or ""
    return row[_PRIORITY_CLASS] or ""


def records(
    start: datetime,
    end: datetime,
    *,
    cluster: str | None = None,
    teams: Iterable[int] | None = None,
) -> QuerySet[AdmissionRecord]:
    """Every record that can count in ``(start, end]``: admitted, evicted or pending in it."""
    qs = AdmissionRecord.objects.filter(queued_at__lte=end).filter(
        Q(admitted_at__gt=start)
        | Q(evicted_at__gt=start)
        | Q(admitted_at__isnull=True, finished_at__isnull=True, evicted_at__isnull=True)
        | Q(admitted_at__isnull=True, finished_at__gt=start)
        | Q(admitted_at__isnull=True, evicted_at__gt=start)
    )
    if cluster:
        qs = qs.filter(cluster__name=cluster)
    if teams is not None:
        qs = qs.filter(team_id__in=list(teams))
    return qs


class _Tally:
    """What one group gathers per period before its figures are taken."""

    __slots__ = ("waits", "delays", "pending", "oldest_queued", "rows")

    def __init__(self, count: int) -> None:
        self.waits: list[list[float]] = [[] for _ in range(count)]
        self.delays: list[list[float]] = [[] for _ in range(count)]
        self.pending = [0] * count
        self.oldest_queued: list[datetime | None] = [None] * count
        # Evictions and preemptions are rare: kept as (period, row) pairs.
        self.rows: list[tuple[int, tuple[Any, ...]]] = []


def levels(
    start: datetime,
    end: datetime,
    *,
    group_by: str = "cluster_queue",
    step: str = "none",
    cluster: str | None = None,
    teams: Iterable[int] | None = None,
) -> list[LevelRow]:
    """The figures per group and period, ordered by cluster, group, then period.

    One pass over the records: each lands in the period of its admission and of its eviction
    (periods are ``(a, b]``, found by bisecting their ends), and counts as pending at every
    period end between its queueing and its admission, eviction or finish.
    """
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}")
    spans = periods(start, end, step)
    if not spans:
        return []
    ends = [stop for _, stop in spans]
    count = len(spans)
    team_ids = None if teams is None else list(teams)
    shown = None if team_ids is None else visible_queue_names(team_ids)
    tallies: dict[tuple[str, str], _Tally] = {}
    for row in records(start, end, cluster=cluster, teams=team_ids).values_list(*_FIELDS):
        key = (row[_CLUSTER], _group_key(row, group_by))
        tally = tallies.get(key)
        if tally is None:
            tally = tallies[key] = _Tally(count)
        _add(tally, row, start, ends)
    out: list[LevelRow] = []
    for (cluster_name, group), tally in sorted(tallies.items()):
        for index, (period_start, period_end) in enumerate(spans):
            level = _figures(group, cluster_name, period_start, period_end, tally, index)
            if shown is not None:
                level.preemptions_by_queue = _hide_queues(
                    level.preemptions_by_queue, cluster_name, shown
                )
            out.append(level)
    return out


def visible_queue_names(team_ids: Iterable[int]) -> set[tuple[str, str]]:
    """(cluster, ClusterQueue name) of the queues of these teams."""
    from quotas.models import ClusterQueue

    return set(
        ClusterQueue.objects.filter(team_id__in=list(team_ids)).values_list("cluster__name", "name")
    )


def _hide_queues(
    counts: dict[str, int], cluster: str, shown: set[tuple[str, str]]
) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, count in counts.items():
        key = name if (cluster, name) in shown else HIDDEN_QUEUE
        out[key] = out.get(key, 0) + count
    return out


def _period(moment: datetime | None, start: datetime, ends: list[datetime]) -> int | None:
    """The index of the period ``(a, b]`` holding ``moment``, or None outside the range."""
    if moment is None or moment <= start:
        return None
    index = bisect_left(ends, moment)
    return index if index < len(ends) else None


def _add(tally: _Tally, row: tuple[Any, ...], start: datetime, ends: list[datetime]) -> None:
    queued, admitted = row[_QUEUED], row[_ADMITTED]
    index = _period(admitted, start, ends)
    if index is not None:
        tally.waits[index].append(max((admitted - queued).total_seconds(), 0.0))
        if row[_RUNNING] is not None:
            tally.delays[index].append(max((row[_RUNNING] - admitted).total_seconds(), 0.0))
    index = _period(row[_EVICTED], start, ends)
    if index is not None:
        tally.rows.append((index, row))
    # Pending at every period end b with queued <= b < the first of admitted/evicted/finished.
    stops = [moment for moment in (admitted, row[_EVICTED], row[_FINISHED]) if moment is not None]
    first = bisect_left(ends, queued)
    last = bisect_left(ends, min(stops)) if stops else len(ends)
    for index in range(first, last):
        tally.pending[index] += 1
        oldest = tally.oldest_queued[index]
        if oldest is None or queued < oldest:
            tally.oldest_queued[index] = queued


def _figures(
    group: str,
    cluster: str,
    start: datetime,
    end: datetime,
    tally: _Tally,
    index: int,
) -> LevelRow:
    level = LevelRow(group=group, cluster=cluster, period_start=start, period_end=end)
    level.pending_at_end = tally.pending[index]
    oldest = tally.oldest_queued[index]
    level.oldest_pending_seconds = None if oldest is None else (end - oldest).total_seconds()
    for row_index, row in tally.rows:
        if row_index != index:
            continue
        reason = row[_EVICTION_REASON] or EvictionReason.OTHER
        level.evictions[reason] = level.evictions.get(reason, 0) + 1
        if reason == EvictionReason.PREEMPTED:
            _count_preemption(level, row)
    waits = tally.waits[index]
    level.admissions = len(waits)
    if waits:
        waits.sort()
        level.wait_seconds_p50 = nearest_rank(waits, 0.50)
        level.wait_seconds_p90 = nearest_rank(waits, 0.90)
        level.wait_seconds_p95 = nearest_rank(waits, 0.95)
        level.wait_seconds_max = waits[-1]
        level.wait_seconds_mean = sum(waits) / len(waits)
    delays = tally.delays[index]
    if delays:
        delays.sort()
        level.running_delay_seconds_p50 = nearest_rank(delays, 0.50)
        level.running_delay_seconds_p95 = nearest_rank(delays, 0.95)
    return level


def _count_preemption(level: LevelRow, row: tuple[Any, ...]) -> None:
    level.preemptions += 1
    reason = row[_PREEMPTION_REASON] or "Other"
    level.preemptions_by_reason[reason] = level.preemptions_by_reason.get(reason, 0) + 1
    by = row[_PREEMPTING_QUEUE] or ""
    level.preemptions_by_queue[by] = level.preemptions_by_queue.get(by, 0) + 1
    running, evicted = row[_RUNNING], row[_EVICTED]
    if running is not None and evicted > running:
        held = (evicted - running).total_seconds() / 3600.0
        level.preempted_gpu_hours += float(row[_GPUS] or 0.0) * held
