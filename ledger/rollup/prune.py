"""Retention: per-window usage and ClusterQueue samples go first, hourly rollups much later.

Deletes run in batches of ``PRUNE_BATCH_SIZE`` rows, each walking an index, so a prune never
holds up a collector writing the next window for long.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db.models import Min, QuerySet, Subquery

from core.timewindows import ensure_aware
from fleet.models import Cluster
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup, RollupHour
from ledger.rollup.completeness import mark_pruned
from quotas.models import ClusterQueueSample

logger = logging.getLogger(__name__)

# Rows per DELETE when pruning. Measured on PostgreSQL 15 here (2 busy cores): 20,000 GpuUsage rows
# took 0.2-0.6 s per statement, short enough not to hold up a collector writing the next window;
# 5,000 took 0.1-0.3 s each but nearly doubled the total time.
PRUNE_BATCH_SIZE = 20_000


def _delete_in_batches(queryset: QuerySet[Any]) -> int:
    """Delete what ``queryset`` matches, PRUNE_BATCH_SIZE rows per statement."""
    model = queryset.model
    total = 0
    while True:
        batch = queryset.order_by().values("pk")[:PRUNE_BATCH_SIZE]
        deleted, _ = model.objects.filter(pk__in=Subquery(batch)).delete()
        total += deleted
        if deleted < PRUNE_BATCH_SIZE:
            return total


def prune_usage(before: datetime) -> int:
    """Delete per-window usage and ClusterQueue samples older than ``before``; returns rows deleted.

    Usage is deleted cluster by cluster so each batch walks the (cluster, window_end) index.
    Rollups are kept: they are what outlives the usage retention. The hours this cuts into are
    flagged (``RollupHour.usage_pruned``), so nothing rebuilds them from the rows left.
    """
    before = ensure_aware(before)
    usage = 0
    for cluster_id in Cluster.objects.order_by("pk").values_list("pk", flat=True):
        old = GpuUsage.objects.filter(cluster_id=cluster_id, window_end__lt=before)
        first = old.aggregate(first=Min("window_end"))["first"]
        if first is None:
            continue
        usage += _delete_in_batches(old)
        mark_pruned(cluster_id, first, before)
    samples = _delete_in_batches(ClusterQueueSample.objects.filter(sampled_at__lt=before))
    logger.info(
        "Pruned usage before %s: %d usage rows, %d queue samples",
        before.isoformat(),
        usage,
        samples,
    )
    return usage + samples


def prune_rollups(before: datetime) -> int:
    """Delete hourly rollups of hours starting before ``before``; returns rows deleted.

    Scope by scope, so each batch walks the (scope, hour, key) index.
    """
    before = ensure_aware(before)
    deleted = 0
    for scope in RollupScope.values:
        deleted += _delete_in_batches(HourlyRollup.objects.filter(scope=scope, hour__lt=before))
    RollupHour.objects.filter(hour__lt=before).delete()
    logger.info("Pruned rollups before %s: %d rows", before.isoformat(), deleted)
    return deleted
