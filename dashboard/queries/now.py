"""Figures "now": the newest collected window of each cluster, the newest sample of each queue.

GPU usage now is the newest ``GpuUsage`` window of each cluster (``latest_windows`` finds it
with an index probe per cluster); queue usage now is the newest ``ClusterQueueSample`` of each
(queue, flavor) that is recent enough (``sample_freshness``), and the GPUs admitted to holding
workloads.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import OuterRef, Q, QuerySet, Subquery, Sum

from core.mig import GPU_RESOURCE
from fleet.models import Cluster
from ledger.models import GpuUsage
from quotas.models import ClusterQueueQuota, ClusterQueueSample, Workload


def busy_thresholds() -> tuple[float, float]:
    """(GPU_UTIL at or above, SM_ACTIVE below): "busy but not working" (DESIGN "Upstream facts")."""
    return (
        float(getattr(settings, "GPULEDGER_BUSY_GPU_UTIL", 50.0)),
        float(getattr(settings, "GPULEDGER_BUSY_SM_ACTIVE", 0.2)),
    )


# --- GPUs: the newest window of each cluster ----------------------------------------------------


def latest_windows() -> dict[int, datetime]:
    """cluster id → end of its newest collected window (one query, an index probe per cluster)."""
    newest = GpuUsage.objects.filter(cluster=OuterRef("pk")).order_by("-window_end")
    rows = Cluster.objects.annotate(latest=Subquery(newest.values("window_end")[:1])).values_list(
        "pk", "latest"
    )
    return {pk: latest for pk, latest in rows if latest is not None}


def latest_usage(windows: dict[int, datetime]) -> QuerySet[GpuUsage]:
    if not windows:
        return GpuUsage.objects.none()
    condition = Q()
    for cluster_id, window_end in windows.items():
        condition |= Q(cluster_id=cluster_id, window_end=window_end)
    return GpuUsage.objects.filter(condition)


# --- Queues: the newest ClusterQueue samples ----------------------------------------------------


def sample_freshness() -> timedelta:
    """How old the newest queue sample may be and still describe "now"."""
    return timedelta(seconds=max(900, 5 * settings.GPULEDGER_COLLECT_SECONDS))


@dataclass
class QueueNow:
    """A ClusterQueue's GPU usage now, per flavor, from its newest samples."""

    total: float = 0.0
    borrowed: float = 0.0
    lent: float = 0.0
    nominal: float = 0.0
    pending: float = 0.0
    sampled_at: datetime | None = None
    flavors: dict[str, dict[str, float]] = field(default_factory=dict)


def latest_samples(queue_filter: Q, now: datetime) -> dict[int, QueueNow]:
    """The newest GPU sample of each (queue, flavor) within ``sample_freshness()``: one query.

    PostgreSQL keeps only the newest row per (queue, flavor) with DISTINCT ON, walking the
    ``quotas_cqsample_window`` unique index; elsewhere the older rows are skipped here.
    """
    samples = ClusterQueueSample.objects.filter(
        queue_filter,
        resource=GPU_RESOURCE,
        sampled_at__gt=now - sample_freshness(),
        sampled_at__lte=now,
    ).order_by("cluster_queue_id", "flavor_name", "-sampled_at")
    if connection.features.can_distinct_on_fields:
        samples = samples.distinct("cluster_queue_id", "flavor_name")
    rows = samples.values(
        "cluster_queue_id",
        "flavor_name",
        "sampled_at",
        "total",
        "borrowed",
        "lent",
        "nominal",
        "pending_demand",
    )
    result: dict[int, QueueNow] = {}
    for row in rows:
        queue = result.setdefault(row["cluster_queue_id"], QueueNow())
        if row["flavor_name"] in queue.flavors:
            continue
        values = {
            "total": float(row["total"]),
            "borrowed": float(row["borrowed"]),
            "lent": float(row["lent"]),
            "nominal": float(row["nominal"]),
            "pending": float(row["pending_demand"]),
        }
        queue.flavors[row["flavor_name"]] = values
        queue.total += values["total"]
        queue.borrowed += values["borrowed"]
        queue.lent += values["lent"]
        queue.nominal += values["nominal"]
        queue.pending += values["pending"]
        if queue.sampled_at is None or row["sampled_at"] > queue.sampled_at:
            queue.sampled_at = row["sampled_at"]
    return result


def gpu_quotas(queue_filter: Q) -> dict[int, list[ClusterQueueQuota]]:
    """GPU quotas per queue, in flavor order: one query."""
    result: dict[int, list[ClusterQueueQuota]] = defaultdict(list)
    for quota in ClusterQueueQuota.objects.filter(queue_filter, resource=GPU_RESOURCE).order_by(
        "cluster_queue_id", "position", "flavor_name"
    ):
        result[quota.cluster_queue_id].append(quota)
    return result


def holding_gpus(queue_filter: Q, group_by: str) -> dict[Any, float]:
    """GPUs admitted to holding workloads, grouped by a ``cluster_queue__…`` field: one query."""
    rows = (
        Workload.objects.holding()
        .filter(queue_filter)
        .order_by()
        .values(group_by)
        .annotate(gpus=Sum("admitted_gpus"))
    )
    return {row[group_by]: float(row["gpus"] or 0.0) for row in rows}
