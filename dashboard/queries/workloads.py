"""The workload page's reads: its figures over the range, transitions, pods and GPUs, and its
activity for the charts.

Per-GPU activity comes from the stored collection windows (kept
``GPULEDGER_USAGE_RETENTION_DAYS``); figures over the range and the hours without stored windows
(``ledger.window_detail``) from the read layer (the workload's hourly rollups).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db.models import Avg, Count, F, Max, Min, QuerySet, Sum
from django.db.models.expressions import Combinable

from core.ranges import HourSpan, TimeRange
from dashboard.frame import LIST_LIMIT
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup
from ledger.range_figures import Figures
from ledger.read import HourlyRollupQuerySet
from quotas.models import Allocation, Workload, WorkloadTransition

# The ratio of the read layer's ``Figures`` behind each activity metric of the chart.
ROLLUP_ACTIVITY = {"sm_active": "utilization", "tensor": "tensor_activity"}


def _rollups(workload: Workload) -> HourlyRollupQuerySet:
    return HourlyRollup.objects.for_scope(RollupScope.WORKLOAD).filter(workload=workload)


def workload_total(workload: Workload, span: HourSpan) -> Figures:
    """The workload's figures over the span: one aggregate."""
    return _rollups(workload).covering(span).total()


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
    """The newest preemptions this workload caused (``LIST_LIMIT``), with each victim's queue."""
    return list(
        workload.preemptions_caused.select_related("workload__cluster_queue").order_by("-at")[
            :LIST_LIMIT
        ]
    )


def workload_allocations(workload: Workload) -> list[Allocation]:
    """The workload's pods that held GPUs, newest first, with their node and GPU devices."""
    return list(
        Allocation.objects.filter(workload=workload)
        .select_related("node")
        .prefetch_related("gpu_devices")
        .order_by("-started_at", "pod")[:LIST_LIMIT]
    )


# --- Charts -------------------------------------------------------------------------------------


def timeline_transitions(workload: Workload, limit: int) -> list[dict[str, Any]]:
    """The workload's newest ``limit`` transitions (kind, at, reason, message, the preemptor's
    queue path and team), oldest first."""
    transitions: list[dict[str, Any]] = [
        dict(row)
        for row in WorkloadTransition.objects.filter(workload=workload)
        .order_by("-at", "kind")
        .values(
            "kind",
            "at",
            "reason",
            "message",
            "preemptor_path",
            preemptor_team_id=F("preemptor__cluster_queue__team_id"),
        )[:limit]
    ]
    transitions.reverse()
    return transitions


def activity_usage(
    workload: Workload, time_range: TimeRange, after: datetime | None = None
) -> QuerySet[GpuUsage]:
    """The workload's stored allocated GPU-windows in the range, those ending after ``after``
    (the start of the range's per-window rows, ``ledger.window_detail``)."""
    return GpuUsage.objects.filter(
        workload=workload,
        allocated=True,
        window_end__gt=max(time_range.start, after or time_range.start),
        window_end__lte=time_range.end,
    )


def activity_summary(usage: QuerySet[GpuUsage]) -> dict[str, Any]:
    """``first`` and ``last`` stored window, how many distinct ``gpus`` they cover, and
    ``at_once``: the most GPUs held in one window (a gang re-admitted on other GPUs covers more
    distinct GPUs than it ever held: a 24-GPU gang moved once covers 48)."""
    summary = usage.aggregate(
        first=Min("window_end"), gpus=Count("gpu_key", distinct=True), last=Max("window_end")
    )
    summary["at_once"] = (
        usage.order_by()
        .values("window_end")
        .annotate(held=Sum("gpus"))
        .order_by("-held")
        .values_list("held", flat=True)
        .first()
    ) or 0
    return summary


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
    workload: Workload, span: HourSpan, metric: str
) -> list[tuple[datetime, float | None]]:
    """Per hour of the span that has a rollup: (hour, the workload's mean ``metric``, 0-1; None
    without telemetry). The span is the range's hours without stored windows
    (``WindowDetail.hourly_span``)."""
    hourly = _rollups(workload).hourly(span)
    return [
        (hour, getattr(found, ROLLUP_ACTIVITY[metric]))
        for hour, found in zip(span.starts(), hourly, strict=True)
        if found is not None
    ]
