"""Retention: per-window usage and ClusterQueue samples go first, hourly rollups much later.

Usage goes a day at a time on PostgreSQL (``ledger.partitions``). Other deletes run in batches of
``PRUNE_BATCH_SIZE`` rows, each walking an index, so a prune never holds up a collector writing
the next window for long.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, time, timedelta
from typing import Any

from django.db import connection
from django.db.models import Min, QuerySet, Subquery, Sum

from core.timewindows import ensure_aware
from fleet.models import Cluster
from ledger import partitions
from ledger.choices import RollupScope
from ledger.models import HourlyRollup, RollupHour, UsageFact, UsageHolding, UsageWindow
from ledger.rollup.completeness import mark_pruned
from quotas.models import ClusterQueueSample

logger = logging.getLogger(__name__)

# Rows per DELETE when pruning. Measured on PostgreSQL 15 here (2 busy cores): 20,000 usage rows
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
    """Drop per-window usage and delete ClusterQueue samples older than ``before``; returns rows
    removed.

    PostgreSQL drops whole daily partitions, those whose every window ends before ``before``
    (the day ``before`` falls in stays until it is wholly past): no DELETE, no VACUUM debt.
    Other databases DELETE the facts older than ``before``, one statement per cluster. Then the
    windows and the holdings left without facts go. Rollups are kept: they are what outlives
    the usage retention. The hours this cuts into are flagged (``RollupHour.usage_pruned``), so
    nothing rebuilds them from the rows left.
    """
    before = ensure_aware(before)
    if partitions.partitioned():
        days = [
            day
            for day in partitions.existing_days()
            if datetime.combine(day + timedelta(days=1), time(), tzinfo=UTC) <= before
        ]
        if days:
            before = datetime.combine(days[-1] + timedelta(days=1), time(), tzinfo=UTC)
        else:
            before = min(before, _first_kept())
    usage = 0
    for cluster_id in Cluster.objects.order_by("pk").values_list("pk", flat=True):
        old = UsageWindow.objects.filter(cluster_id=cluster_id, window_end__lt=before)
        found = old.aggregate(first=Min("window_end"), rows=Sum("rows"))
        if found["first"] is None:
            continue
        usage += found["rows"] or 0
        if not partitions.partitioned():
            _delete_facts(cluster_id, before)
        mark_pruned(cluster_id, found["first"], before)
    if partitions.partitioned():
        partitions.drop_days_before(before)
    UsageWindow.objects.filter(window_end__lt=before).delete()
    with connection.cursor() as cursor:
        # Every fact of these holdings was older than the cutoff and is gone.
        cursor.execute(
            f"DELETE FROM {UsageHolding._meta.db_table} WHERE last_window_end < %s",  # noqa: S608
            [connection.ops.adapt_datetimefield_value(before)],
        )
        holdings = cursor.rowcount
    samples = _delete_in_batches(ClusterQueueSample.objects.filter(sampled_at__lt=before))
    logger.info(
        "Pruned usage before %s: %d usage rows (%d holdings), %d queue samples",
        before.isoformat(),
        usage,
        holdings,
        samples,
    )
    return usage + samples


def _first_kept() -> datetime:
    """The start of the oldest partition: nothing before it is left to prune."""
    days = partitions.existing_days()
    if not days:
        return datetime.max.replace(tzinfo=UTC)
    return datetime.combine(days[0], time(), tzinfo=UTC)


def _delete_facts(cluster_id: int, before: datetime) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {UsageFact._meta.db_table} WHERE window_end < %s AND holding_id IN "  # noqa: S608
            f"(SELECT id FROM {UsageHolding._meta.db_table} WHERE cluster_id = %s)",
            [connection.ops.adapt_datetimefield_value(before), cluster_id],
        )


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
