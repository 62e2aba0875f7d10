"""The ClusterQueue pages' reads: queues with their GPU quota, one queue's holding and pending
workloads, its evictions, and its hours for the charts (the read layer, over the hours the range
counts). Its figures now (samples, quotas, holdings) are ``quotas.now``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db.models import Case, Count, IntegerField, Max, Q, QuerySet, Value, When
from django.db.models.functions import TruncHour

from core.ranges import HourSpan, TimeRange
from dashboard.frame import bounded
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.range_figures import Figures
from ledger.read import HourlyRollupQuerySet
from quotas.choices import SampleSource, TransitionKind
from quotas.models import ClusterQueue, ClusterQueueSample, Workload, WorkloadTransition

EVICTION_KINDS = [TransitionKind.EVICTED, TransitionKind.PREEMPTED]


def cluster_queues(search: str, allowed: set[int] | None) -> QuerySet[ClusterQueue]:
    """ClusterQueues that exist, of the teams ``allowed`` (``quotas.access``; None: all), whose
    name or cohort name contains ``search``."""
    queues = ClusterQueue.objects.present().select_related("cluster", "cohort", "team")
    if allowed is not None:
        queues = queues.filter(team_id__in=allowed)
    if search:
        queues = queues.filter(Q(name__icontains=search) | Q(cohort_name__icontains=search))
    return queues.order_by("cluster__name", "name")


def hidden_queue_count(allowed: set[int] | None) -> int:
    """How many existing ClusterQueues ``allowed`` hides; whatever the search, so a search
    cannot tell whether another team's queue name exists."""
    if allowed is None:
        return 0
    return ClusterQueue.objects.present().exclude(team_id__in=allowed).count()


def _queue_rollups(queue: ClusterQueue) -> HourlyRollupQuerySet:
    return HourlyRollup.objects.for_scope(RollupScope.CLUSTER_QUEUE).filter(cluster_queue=queue)


def queue_total(queue: ClusterQueue, span: HourSpan) -> Figures:
    """The queue's figures over the span: one aggregate."""
    return _queue_rollups(queue).covering(span).total()


def quota_history_start(queue: ClusterQueue) -> datetime | None:
    """When the queue's quota history starts, if only the API server sync feeds it (Kueue
    exports no quota metrics for this cluster): its first sample. None when Kueue's metrics
    fill the hours before, or there is no sample yet."""
    samples = ClusterQueueSample.objects.filter(cluster_queue__cluster_id=queue.cluster_id)
    if samples.filter(source=SampleSource.METRICS).exists():
        return None
    return (
        samples.filter(cluster_queue=queue)
        .order_by("sampled_at")
        .values_list("sampled_at", flat=True)
        .first()
    )


def holding_workloads(queue: ClusterQueue) -> tuple[list[Workload], bool]:
    """The queue's holding workloads, highest priority first (a bounded list), and whether
    there are more (their count and GPUs: ``quotas.now.holding_demand``)."""
    return bounded(
        Workload.objects.holding()
        .filter(cluster_queue=queue)
        .select_related("local_queue")
        .order_by("-priority", "admitted_at")
    )


def pending_workloads(queue: ClusterQueue) -> QuerySet[Workload]:
    """The queue's pending workloads in Kueue's order (positions first, then priority, age)."""
    return (
        Workload.objects.pending()
        .filter(cluster_queue=queue)
        .select_related("local_queue")
        .annotate(
            position_missing=Case(
                When(pending_position__isnull=True, then=Value(1)),
                default=Value(0),
                output_field=IntegerField(),
            )
        )
        .order_by("position_missing", "pending_position", "-priority", "observed_at", "name")
    )


def last_requeues(workload_ids: list[int]) -> dict[int, datetime]:
    """workload id → when it last went back to waiting (requeued, or its quota released)."""
    return dict(
        WorkloadTransition.objects.filter(
            workload_id__in=workload_ids,
            kind__in=[TransitionKind.REQUEUED, TransitionKind.QUOTA_RELEASED],
        )
        .order_by()
        .values("workload_id")
        .annotate(last=Max("at"))
        .values_list("workload_id", "last")
    )


def _evictions(queue: ClusterQueue, time_range: TimeRange) -> QuerySet[WorkloadTransition]:
    return WorkloadTransition.objects.filter(
        workload__cluster_queue=queue,
        kind__in=EVICTION_KINDS,
        at__gt=time_range.start,
        at__lte=time_range.end,
    )


def eviction_counts(queue: ClusterQueue, time_range: TimeRange) -> dict[str, int]:
    """Evictions and preemptions of the queue's workloads in the range, per transition kind."""
    rows = _evictions(queue, time_range).order_by().values("kind").annotate(count=Count("id"))
    return {row["kind"]: row["count"] for row in rows}


# --- Charts -------------------------------------------------------------------------------------


def queue_hours(queue: ClusterQueue, span: HourSpan) -> dict[str, list[Figures | None]]:
    """The queue's figures per flavor, one ``Figures`` (or None) per hour of the span."""
    return _queue_rollups(queue).series(span, ("flavor",))


def evictions_per_hour(queue: ClusterQueue, time_range: TimeRange) -> list[Mapping[str, Any]]:
    """Evictions and preemptions per hour (``bucket``), kind and reason."""
    return list(
        _evictions(queue, time_range)
        .annotate(bucket=TruncHour("at"))
        .order_by()
        .values("bucket", "kind", "reason")
        .annotate(count=Count("id"))
    )
