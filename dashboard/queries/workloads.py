"""The workload page's reads: its transitions, pods and GPUs, and its activity for the charts.

Per-GPU activity comes from the stored collection windows (kept
``GPULEDGER_USAGE_RETENTION_DAYS``); hours before them from the workload's hourly rollups.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db.models import Avg, Count, Max, Min, QuerySet, Sum
from django.db.models.expressions import Combinable

from core.ranges import TimeRange
from dashboard.frame import LIST_LIMIT
from dashboard.queries.rollups import rollups_in_range
from ledger.choices import RollupScope
from ledger.models import GpuUsage
from quotas.models import Allocation, Workload, WorkloadTransition

# The stored fraction and its covered GPU-hours behind each activity metric.
ROLLUP_ACTIVITY = {
    "sm_active": ("active_gpu_hours", "telemetry_gpu_hours"),
    "tensor": ("tensor_active_gpu_hours", "tensor_covered_gpu_hours"),
}


def recent_transitions(workload: Workload) -> list[WorkloadTransition]:
    """The workload's newest transitions (``LIST_LIMIT``), oldest first, with their preemptor."""
    transitions = list(
        workload.transitions.select_related("preemptor", "preemptor__cluster_queue").order_by(
            "-at", "kind"
        )[:LIST_LIMIT]
    )
    transitions.reverse()
    return transitions


def preemptions_caused(workload: Workload) -> list[WorkloadTransition]:
    return list(workload.preemptions_caused.select_related("workload").order_by("-at")[:LIST_LIMIT])


def workload_allocations(workload: Workload) -> list[Allocation]:
    """The workload's pods that held GPUs, newest first, with their node and GPU devices."""
    return list(
        Allocation.objects.filter(workload=workload)
        .select_related("node")
        .prefetch_related("gpu_devices")
        .order_by("-started_at", "pod")[:LIST_LIMIT]
    )


# --- Charts -------------------------------------------------------------------------------------


def timeline_transitions(workload: Workload, limit: int) -> list[Mapping[str, Any]]:
    """The workload's newest ``limit`` transitions (kind, at, reason, message), oldest first."""
    transitions: list[Mapping[str, Any]] = list(
        WorkloadTransition.objects.filter(workload=workload)
        .order_by("-at", "kind")
        .values("kind", "at", "reason", "message")[:limit]
    )
    transitions.reverse()
    return transitions


def activity_usage(workload: Workload, time_range: TimeRange) -> QuerySet[GpuUsage]:
    """The workload's stored allocated GPU-windows in the range."""
    return GpuUsage.objects.filter(
        workload=workload,
        allocated=True,
        window_end__gt=time_range.start,
        window_end__lte=time_range.end,
    )


def activity_summary(usage: QuerySet[GpuUsage]) -> dict[str, Any]:
    """``first`` and ``last`` stored window and how many ``gpus`` they cover."""
    return usage.aggregate(
        first=Min("window_end"), gpus=Count("gpu_key", distinct=True), last=Max("window_end")
    )


def gpu_points(
    usage: QuerySet[GpuUsage], bucket: Combinable, field: str
) -> dict[str, list[tuple[datetime, float | None]]]:
    """GPU key → its (bucket, mean ``field``) points; GPUs without a key are "no telemetry"."""
    rows = list(
        usage.annotate(bucket=bucket)
        .order_by()
        .values("gpu_key", "bucket")
        .annotate(value=Avg(field))
    )
    by_gpu: dict[str, list[tuple[datetime, float | None]]] = defaultdict(list)
    for row in rows:
        by_gpu[row["gpu_key"] or "no telemetry"].append((row["bucket"], row["value"]))
    return by_gpu


def gang_spread(
    usage: QuerySet[GpuUsage], bucket: Combinable, field: str
) -> list[Mapping[str, Any]]:
    """Per bucket, in time order: the mean ``value``, ``low`` and ``high`` GPU of the gang."""
    return sorted(
        usage.annotate(bucket=bucket)
        .order_by()
        .values("bucket")
        .annotate(value=Avg(field), low=Min(field), high=Max(field)),
        key=lambda row: row["bucket"],
    )


def rollup_activity(
    workload: Workload, time_range: TimeRange, older_than: datetime, metric: str
) -> list[Mapping[str, Any]]:
    """Per hour before ``older_than``: the workload's ``part`` (active) and ``whole`` (covered)."""
    numerator, denominator = ROLLUP_ACTIVITY[metric]
    return list(
        rollups_in_range(RollupScope.WORKLOAD, time_range)
        .filter(workload=workload, hour__lt=older_than)
        .order_by()
        .values("hour")
        .annotate(part=Sum(numerator), whole=Sum(denominator))
        .order_by("hour")
    )
