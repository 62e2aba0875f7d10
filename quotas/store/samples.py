"""Kueue's per-ClusterQueue usage samples (one row per queue, flavor, resource and window)."""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal

from core.mig import GPU_RESOURCE
from core.quantity import parse_quantity
from core.timewindows import ensure_aware
from fleet.models import Cluster
from quotas import constants as c
from quotas.choices import SampleSource
from quotas.ingest import QueueSampleRow
from quotas.models import ClusterQueue, ClusterQueueQuota, ClusterQueueSample, Cohort

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
                source=SampleSource.API,
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
                "source",
            ],
        )
    return len(objs)


def write_metric_samples(
    cluster: Cluster,
    rows: list[QueueSampleRow],
    sampled_at: datetime,
    window_seconds: int,
) -> int:
    """Store samples made from Kueue's metrics where the API server has none for the window.

    The window's earlier metric samples are replaced (a re-run changes nothing); a sample the
    sync wrote for the same queue, flavor and window is kept (the API server's status wins),
    and the sync's later upsert replaces a metric sample. Queues the database does not know
    (never listed by a sync) are skipped and logged. Returns rows written.
    """
    sampled_at = ensure_aware(sampled_at)
    queues = dict(ClusterQueue.objects.filter(cluster=cluster).values_list("name", "id"))
    unknown = sorted({row.cluster_queue_name for row in rows} - set(queues))
    if unknown:
        logger.info(
            "cluster %s window %s: Kueue metrics of %d ClusterQueue(s) the API server has not "
            "listed skipped (e.g. %s)",
            cluster.name,
            sampled_at.isoformat(),
            len(unknown),
            unknown[0],
        )
    objs = [
        ClusterQueueSample(
            cluster_queue_id=queues[row.cluster_queue_name],
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
            source=SampleSource.METRICS,
        )
        for row in rows
        if row.cluster_queue_name in queues
    ]
    ClusterQueueSample.objects.filter(
        cluster_queue__cluster=cluster, sampled_at=sampled_at, source=SampleSource.METRICS
    ).delete()
    if not objs:
        return 0
    before = ClusterQueueSample.objects.filter(
        cluster_queue__cluster=cluster, sampled_at=sampled_at
    ).count()
    ClusterQueueSample.objects.bulk_create(
        objs, batch_size=c.WRITE_BATCH_SIZE, ignore_conflicts=True
    )
    after = ClusterQueueSample.objects.filter(
        cluster_queue__cluster=cluster, sampled_at=sampled_at
    ).count()
    return after - before


def metric_sample_context(
    cluster: Cluster,
) -> tuple[dict[str, list[str]], dict[tuple[str, str], Decimal]]:
    """What Kueue's metrics do not carry, from the stored objects: each ClusterQueue's GPU
    flavors in ``resourceGroups`` order, and each cohort's own GPU quota per flavor."""
    order: dict[str, list[str]] = {}
    quotas = ClusterQueueQuota.objects.filter(
        cluster_queue__cluster=cluster, resource=GPU_RESOURCE
    ).order_by("cluster_queue__name", "position", "flavor_name")
    for queue, flavor in quotas.values_list("cluster_queue__name", "flavor_name"):
        order.setdefault(queue, []).append(flavor)
    pools: dict[tuple[str, str], Decimal] = {}
    for name, groups in Cohort.objects.filter(cluster=cluster).values_list(
        "name", "resource_groups"
    ):
        for flavor, amount in cohort_gpu_pool(groups).items():
            pools[(name, flavor)] = pools.get((name, flavor), Decimal(0)) + amount
    return order, pools


def cohort_gpu_pool(groups: object) -> dict[str, Decimal]:
    """A cohort's own ``nvidia.com/gpu`` nominal quota per flavor from its stored
    ``spec.resourceGroups``; malformed entries are skipped."""
    pool: dict[str, Decimal] = {}
    for group in groups if isinstance(groups, list) else []:
        flavors = group.get("flavors") if isinstance(group, dict) else None
        for flavor in flavors if isinstance(flavors, list) else []:
            if not isinstance(flavor, dict) or not flavor.get("name"):
                continue
            for resource in flavor.get("resources") or []:
                if not isinstance(resource, dict) or resource.get("name") != GPU_RESOURCE:
                    continue
                try:
                    amount = parse_quantity(str(resource.get("nominalQuota", "0")))
                except (ValueError, ArithmeticError):
                    continue
                name = str(flavor["name"])
                pool[name] = pool.get(name, Decimal(0)) + Decimal(amount)
    return pool
