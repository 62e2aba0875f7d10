"""Kueue's per-ClusterQueue usage samples (one row per queue, flavor, resource and window)."""

from __future__ import annotations

import logging
from datetime import datetime

from core.timewindows import ensure_aware
from fleet.models import Cluster
from quotas import constants as c
from quotas.ingest import QueueSampleRow
from quotas.models import ClusterQueue, ClusterQueueSample

logger = logging.getLogger(__name__)


def write_queue_samples(
    cluster: Cluster,
    rows: list[QueueSampleRow],
    sampled_at: datetime,
    window_seconds: int,
) -> int:
    """Upsert one ClusterQueueSample per row for the window ending at ``sampled_at``.

    Rows whose ClusterQueue is not in the database are skipped (logged). Returns rows written.
    """
    sampled_at = ensure_aware(sampled_at)
    queues = dict(ClusterQueue.objects.filter(cluster=cluster).values_list("name", "id"))
    objs = []
    for row in rows:
        queue_id = queues.get(row.cluster_queue_name)
        if queue_id is None:
            logger.warning(
                "Queue sample for unknown ClusterQueue %s on %s skipped",
                row.cluster_queue_name,
                cluster.name,
            )
            continue
        objs.append(
            ClusterQueueSample(
                cluster_queue_id=queue_id,
                flavor_name=row.flavor_name,
                resource=row.resource,
                sampled_at=sampled_at,
                window_seconds=window_seconds,
                total=row.total,
                reserved=row.reserved,
                borrowed=row.borrowed,
                lent=row.lent,
                nominal=row.nominal,
                borrowing_limit=row.borrowing_limit,
                lending_limit=row.lending_limit,
                pending_demand=row.pending_demand,
                pending_workloads=row.pending_workloads,
                admitted_workloads=row.admitted_workloads,
            )
        )
    if objs:
        ClusterQueueSample.objects.bulk_create(
            objs,
            batch_size=c.WRITE_BATCH_SIZE,
            update_conflicts=True,
            unique_fields=["cluster_queue", "flavor_name", "resource", "sampled_at"],
            update_fields=[
                "window_seconds",
                "total",
                "reserved",
                "borrowed",
                "lent",
                "nominal",
                "borrowing_limit",
                "lending_limit",
                "pending_demand",
                "pending_workloads",
                "admitted_workloads",
            ],
        )
    return len(objs)
