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
records of no team are then shown too).

Periods before a cluster's first record (they end at or before its earliest ``queued_at``, or the
cluster has no record) come from Kueue's metrics (``QueueMetricsHour``) where those hours are
stored, with ``source = "metrics"``: whole UTC hours inside the period, grouped by ClusterQueue,
LocalQueue, or the ClusterQueue's cohort or team as the queues are configured now (no priority
class: the metrics do not say it). ``admissions`` and ``evictions`` are the counters'; the wait
percentiles are Prometheus's ``histogram_quantile`` for one queue's hour, and for a longer period
or several queues the same interpolation over the summed buckets (bucket resolution); the mean is
the histograms' sum / count. ``preemptions`` are the Preempted evictions, and
``preemptions_made`` the workloads the group's queues preempted (Kueue counts preemptions by the
preempting queue). What the metrics cannot know is None: the maximum wait, the running delay,
pending at the end and its oldest age, preempted GPU-hours.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet

from core.timewindows import floor_time
from quotas.models import ClusterQueue, LocalQueue
from servicelevels.choices import EvictionReason
from servicelevels.metrics import HOUR, bucket_quantile
from servicelevels.models import AdmissionRecord, QueueMetricsHour
from servicelevels.stats import nearest_rank

GROUP_BY = ("cluster_queue", "local_queue", "cohort", "team", "priority_class")
STEPS = ("none", "hour", "day")
SOURCE_RECORDS = "records"
SOURCE_METRICS = "metrics"

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
    pending_at_end: int | None = 0
    oldest_pending_seconds: float | None = None
    evictions: dict[str, int] = field(default_factory=dict)
    preemptions: int = 0
    preemptions_by_reason: dict[str, int] = field(default_factory=dict)
    preemptions_by_queue: dict[str, int] = field(default_factory=dict)
    preempted_gpu_hours: float | None = 0.0
    source: str = SOURCE_RECORDS
    preemptions_made: dict[str, int] = field(default_factory=dict)

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
            "preemptions_made": dict(self.preemptions_made),
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


def _group_key(row: dict[str, Any], group_by: str) -> str:
    if group_by == "cluster_queue":
        return row["cluster_queue_name"] or ""
    if group_by == "local_queue":
        name = row["local_queue_name"]
        return f"{row['namespace']}/{name}" if name else ""
    if group_by == "cohort":
        return row["cohort_name"] or ""
    if group_by == "team":
        return row["team__name"] or ""
    return row["priority_class_name"] or ""


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


def _pending_at(row: dict[str, Any], moment: datetime) -> bool:
    if row["queued_at"] > moment:
        return False
    for name in ("admitted_at", "evicted_at", "finished_at"):
        value = row[name]
        if value is not None and value <= moment:
            return False
    return True


def levels(
    start: datetime,
    end: datetime,
    *,
    group_by: str = "cluster_queue",
    step: str = "none",
    cluster: str | None = None,
    teams: Iterable[int] | None = None,
) -> list[LevelRow]:
    """The figures per group and period, ordered by cluster, group, then period."""
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}")
    spans = periods(start, end, step)
    if not spans:
        return []
    rows = list(records(start, end, cluster=cluster, teams=teams).values(*_FIELDS))
    by_group: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_group[(row["cluster__name"], _group_key(row, group_by))].append(row)
    out: list[LevelRow] = []
    for (cluster_name, group), members in sorted(by_group.items()):
        for period_start, period_end in spans:
            out.append(_figures(group, cluster_name, period_start, period_end, members))
    from_metrics = _metrics_rows(spans, group_by, cluster, teams)
    if from_metrics:
        taken = {(r.cluster, r.group, r.period_start) for r in from_metrics}
        out = [r for r in out if (r.cluster, r.group, r.period_start) not in taken]
        out.extend(from_metrics)
        out.sort(key=lambda r: (r.cluster, r.group, r.period_start))
    return out


def _metrics_rows(
    spans: list[tuple[datetime, datetime]],
    group_by: str,
    cluster: str | None,
    teams: Iterable[int] | None,
) -> list[LevelRow]:
    """Rows from Kueue's metrics for the periods before each cluster's first record."""
    if group_by == "priority_class":
        return []
    scope = "local_queue" if group_by == "local_queue" else "cluster_queue"
    hours = QueueMetricsHour.objects.filter(
        scope=scope, hour__gte=spans[0][0] - HOUR, hour__lt=spans[-1][1]
    )
    if cluster:
        hours = hours.filter(cluster__name=cluster)
    rows = list(hours.select_related("cluster").order_by("hour"))
    if not rows:
        return []
    cluster_ids = {row.cluster_id for row in rows}
    queues: dict[tuple[int, str], dict[str, Any]] = {
        (q["cluster_id"], q["name"]): dict(q)
        for q in ClusterQueue.objects.filter(cluster_id__in=cluster_ids).values(
            "cluster_id", "name", "cohort_name", "team_id", "team__name"
        )
    }
    lq_queue = {
        (lq["cluster_id"], f"{lq['namespace']}/{lq['name']}"): lq["cluster_queue_name"]
        for lq in LocalQueue.objects.filter(cluster_id__in=cluster_ids).values(
            "cluster_id", "namespace", "name", "cluster_queue_name"
        )
    }
    cutover: dict[int, datetime | None] = {}
    for cid in cluster_ids:
        cutover[cid] = (
            AdmissionRecord.objects.filter(cluster_id=cid)
            .order_by("queued_at")
            .values_list("queued_at", flat=True)
            .first()
        )
    allowed = None if teams is None else set(teams)
    grouped: dict[tuple[str, str], list[QueueMetricsHour]] = defaultdict(list)
    for row in rows:
        cq_name = row.name if scope == "cluster_queue" else lq_queue.get((row.cluster_id, row.name))
        queue = queues.get((row.cluster_id, cq_name or ""), {})
        if allowed is not None and queue.get("team_id") not in allowed:
            continue
        if group_by in ("cluster_queue", "local_queue"):
            group = row.name
        elif group_by == "cohort":
            group = queue.get("cohort_name") or ""
        else:
            group = queue.get("team__name") or ""
        grouped[(row.cluster.name, group)].append(row)
    out: list[LevelRow] = []
    for (cluster_name, group), members in sorted(grouped.items()):
        first = cutover.get(members[0].cluster_id)
        for start, end in spans:
            if first is not None and end > first:
                continue
            inside = [m for m in members if m.hour >= start and m.hour + HOUR <= end]
            if inside:
                out.append(_metrics_figures(group, cluster_name, start, end, inside))
    return out


def _metrics_figures(
    group: str, cluster: str, start: datetime, end: datetime, hours: list[QueueMetricsHour]
) -> LevelRow:
    level = LevelRow(
        group=group,
        cluster=cluster,
        period_start=start,
        period_end=end,
        source=SOURCE_METRICS,
        pending_at_end=None,
        preempted_gpu_hours=None,
    )
    level.admissions = sum(h.admissions for h in hours)
    count = sum(h.wait_count for h in hours)
    if count > 0:
        level.wait_seconds_mean = sum(h.wait_seconds_sum for h in hours) / count
    if len(hours) == 1:
        (only,) = hours
        level.wait_seconds_p50 = only.wait_seconds_p50
        level.wait_seconds_p90 = only.wait_seconds_p90
        level.wait_seconds_p95 = only.wait_seconds_p95
    else:
        buckets: dict[str, float] = defaultdict(float)
        for h in hours:
            for le, n in (h.wait_buckets or {}).items():
                buckets[le] += float(n)
        level.wait_seconds_p50 = bucket_quantile(0.50, buckets)
        level.wait_seconds_p90 = bucket_quantile(0.90, buckets)
        level.wait_seconds_p95 = bucket_quantile(0.95, buckets)
    for h in hours:
        for reason, n in (h.evictions or {}).items():
            level.evictions[reason] = level.evictions.get(reason, 0) + int(n)
        for reason, n in (h.preemptions_made or {}).items():
            level.preemptions_made[reason] = level.preemptions_made.get(reason, 0) + int(n)
    level.preemptions = level.evictions.get(EvictionReason.PREEMPTED, 0)
    return level


def _in(moment: datetime | None, start: datetime, end: datetime) -> bool:
    return moment is not None and start < moment <= end


def _figures(
    group: str,
    cluster: str,
    start: datetime,
    end: datetime,
    members: list[dict[str, Any]],
) -> LevelRow:
    level = LevelRow(group=group, cluster=cluster, period_start=start, period_end=end)
    waits: list[float] = []
    delays: list[float] = []
    oldest: float | None = None
    pending = 0
    for row in members:
        admitted = row["admitted_at"]
        if _in(admitted, start, end):
            waits.append(max((admitted - row["queued_at"]).total_seconds(), 0.0))
            if row["running_at"] is not None:
                delays.append(max((row["running_at"] - admitted).total_seconds(), 0.0))
        if _pending_at(row, end):
            pending += 1
            age = (end - row["queued_at"]).total_seconds()
            oldest = age if oldest is None else max(oldest, age)
        if _in(row["evicted_at"], start, end):
            reason = row["eviction_reason"] or EvictionReason.OTHER
            level.evictions[reason] = level.evictions.get(reason, 0) + 1
            if reason == EvictionReason.PREEMPTED:
                _count_preemption(level, row)
    level.admissions = len(waits)
    level.pending_at_end = pending
    level.oldest_pending_seconds = oldest
    if waits:
        waits.sort()
        level.wait_seconds_p50 = nearest_rank(waits, 0.50)
        level.wait_seconds_p90 = nearest_rank(waits, 0.90)
        level.wait_seconds_p95 = nearest_rank(waits, 0.95)
        level.wait_seconds_max = waits[-1]
        level.wait_seconds_mean = sum(waits) / len(waits)
    if delays:
        delays.sort()
        level.running_delay_seconds_p50 = nearest_rank(delays, 0.50)
        level.running_delay_seconds_p95 = nearest_rank(delays, 0.95)
    return level


def _count_preemption(level: LevelRow, row: dict[str, Any]) -> None:
    level.preemptions += 1
    reason = row["preemption_reason"] or "Other"
    level.preemptions_by_reason[reason] = level.preemptions_by_reason.get(reason, 0) + 1
    by = row["preempting_cluster_queue_name"] or ""
    level.preemptions_by_queue[by] = level.preemptions_by_queue.get(by, 0) + 1
    if row["running_at"] is not None and row["evicted_at"] > row["running_at"]:
        held = (row["evicted_at"] - row["running_at"]).total_seconds() / 3600.0
        level.preempted_gpu_hours += float(row["gpus"] or 0.0) * held
