"""GPUs "now": the newest collected window of each cluster, and what counts as busy but not working.

GPU usage now is the newest ``GpuUsage`` window of each cluster (``latest_windows`` finds it
with an index probe per cluster). Queue figures now (the newest ClusterQueue samples, GPU quotas,
GPUs held by holding workloads, the eviction pace) are ``quotas.now``'s, shared with the API.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db.models import OuterRef, Q, QuerySet, Subquery

from fleet.models import Cluster
from ledger.models import GpuUsage, UsageWindow


def busy_thresholds() -> tuple[float, float]:
    """(GPU_UTIL at or above, SM_ACTIVE below): "busy but not working"
    (docs/architecture.md "Upstream facts")."""
    return (
        float(settings.GPULEDGER_BUSY_GPU_UTIL),
        float(settings.GPULEDGER_BUSY_SM_ACTIVE),
    )


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
