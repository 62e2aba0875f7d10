"""GPUs "now" on the ledger side: the newest collected window of each cluster and the figures
held now (docs/architecture.md "Figures").

GPU usage now is the newest ``GpuUsage`` window of each cluster (``latest_windows`` finds it
with an index probe per cluster). Its figures are the registry's (``ledger.figures``): the same
per-row rules as the hourly rollups, summed over one window, so "busy now" and the busy
GPU-hours, "idle now" and the idle GPU-hours count the same rows. Queue figures now (admitted,
pending, borrowed) are ``quotas.now``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.models import FloatField, OuterRef, Q, QuerySet, Subquery, Sum

from fleet.models import Cluster
from ledger.figures import (
    BY_NAME,
    CAPACITY,
    GPUS,
    NO_TELEMETRY_FREE,
    NO_TELEMETRY_HELD,
    Thresholds,
    thresholds,
)
from ledger.models import GpuUsage, UsageWindow

# The registry figures summed "now", as GPUs (one window), under their rollup names less
# ``_gpu_hours``; plus the two kinds of GPUs without telemetry.
NOW_FIGURES = (
    "capacity_gpu_hours",
    "allocated_gpu_hours",
    "telemetry_gpu_hours",
    "active_gpu_hours",
    "idle_gpu_hours",
    "fallback_gpu_hours",
    "busy_not_working_gpu_hours",
)


def busy_thresholds() -> tuple[float, float]:
    """(GPU_UTIL at or above, SM_ACTIVE below): "busy but not working"
    (docs/architecture.md "Upstream facts"), as ``ledger.figures.thresholds`` reads them."""
    limits = thresholds()
    return limits.busy_gpu_util, limits.busy_sm_active


def latest_windows() -> dict[int, datetime]:
    """cluster id → end of its newest collected window (one query, an index probe per cluster)."""
    newest = UsageWindow.objects.filter(cluster=OuterRef("pk")).order_by("-window_end")
    rows = Cluster.objects.annotate(latest=Subquery(newest.values("window_end")[:1])).values_list(
        "pk", "latest"
    )
    return {pk: latest for pk, latest in rows if latest is not None}


def latest_usage(windows: dict[int, datetime]) -> QuerySet[GpuUsage]:
    """The usage rows of each cluster's newest window (``latest_windows``)."""
    if not windows:
        return GpuUsage.objects.none()
    condition = Q()
    for cluster_id, window_end in windows.items():
        condition |= Q(cluster_id=cluster_id, window_end=window_end)
    return GpuUsage.objects.filter(condition)


def now_sums(limits: Thresholds | None = None) -> dict[str, Sum]:
    """Aggregates of the newest window's rows: one per ``NOW_FIGURES`` (named without
    ``_gpu_hours``), ``no_telemetry_allocated`` and ``no_telemetry_free``."""
    limits = limits or thresholds()
    sums: dict[str, Sum] = {}
    for name in NOW_FIGURES:
        figure = BY_NAME[name]
        sums[name.removesuffix("_gpu_hours")] = Sum(
            figure.summed.expression(), filter=figure.rows.q(limits), output_field=FloatField()
        )
    sums["no_telemetry_allocated"] = Sum(
        GPUS.expression(), filter=NO_TELEMETRY_HELD.q(limits), output_field=FloatField()
    )
    sums["no_telemetry_free"] = Sum(
        CAPACITY.expression(), filter=NO_TELEMETRY_FREE.q(limits), output_field=FloatField()
    )
    return sums


def figures_now(windows: dict[int, datetime], group_by: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The figures held now (GPUs, not GPU-hours) of the newest windows, per ``group_by``."""
    if not windows:
        return []
    rows = latest_usage(windows).order_by()
    # Aggregated under other names first: an annotation named like a field ("allocated") would
    # stand for the field in the other aggregates' filters.
    sums = {f"now_{name}": aggregate for name, aggregate in now_sums().items()}
    found = list(rows.values(*group_by).annotate(**sums)) if group_by else [rows.aggregate(**sums)]
    return [{key.removeprefix("now_"): value for key, value in row.items()} for row in found]


def held_now(workload_ids: Sequence[int]) -> dict[int, float]:
    """Workload id → GPUs its running pods hold in each cluster's newest window (the registry's
    allocated rows): "held" on every page means held by running pods, not admitted quota."""
    if not workload_ids:
        return {}
    rule = BY_NAME["allocated_gpu_hours"].rows.q(thresholds())
    rows = (
        latest_usage(latest_windows())
        .filter(rule, workload_id__in=list(workload_ids))
        .order_by()
        .values_list("workload_id")
        .annotate(gpus=Sum("gpus"))
    )
    return {workload_id: float(gpus or 0.0) for workload_id, gpus in rows}


def busy_now(windows: dict[int, datetime]) -> QuerySet[GpuUsage]:
    """The newest windows' rows that are busy but not working (``ledger.figures``)."""
    return latest_usage(windows).filter(BY_NAME["busy_not_working_gpu_hours"].rows.q(thresholds()))
