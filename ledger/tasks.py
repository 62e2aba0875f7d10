"""Celery tasks of the ledger app: thin glue over ``ledger.collector`` and ``ledger.rollup``.

Tasks take ids and primitives, re-read what they need and are idempotent: a doubled beat tick
finds the cursor claimed (or already past the window) and does nothing
(docs/conventions.md "Background work").
"""

from __future__ import annotations

import logging
from datetime import UTC, timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from fleet import routing
from fleet.models import Cluster, IngestRun
from fleet.prometheus import PrometheusError
from ledger import partition_order, partitions, rollup
from ledger.collector import collect_cluster
from ledger.models import PruneRun
from ledger.rollup import sweep

logger = logging.getLogger(__name__)


class TransientPrometheusError(Exception):
    """Raised by ``collect_metrics`` for a transient Prometheus failure, so Celery retries it."""


@shared_task(name="ledger.tasks.collect_metrics_all")
def collect_metrics_all() -> list[int]:
    """Fan out one ``collect_metrics`` per enabled cluster that has a Prometheus URL."""
    Cluster.objects.ensure_from_settings()
    cluster_ids = list(
        Cluster.objects.filter(collect_enabled=True)
        .exclude(prometheus_url="")
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    expires = float(settings.GPULEDGER_COLLECT_SECONDS)
    for cluster_id in cluster_ids:
        collect_metrics.apply_async(args=[cluster_id], expires=expires)
    return cluster_ids


@shared_task(
    name="ledger.tasks.collect_metrics",
    autoretry_for=(TransientPrometheusError,),
    retry_backoff=2,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=3,
)
def collect_metrics(cluster_id: int) -> dict[str, Any]:
    """Collect one cluster's missed and newest windows (see ``ledger.collector``)."""
    try:
        cluster = Cluster.objects.get(pk=cluster_id)
    except Cluster.DoesNotExist:
        logger.warning("collect_metrics: cluster %s no longer exists", cluster_id)
        return {"cluster_id": cluster_id, "skipped": "missing"}
    if not cluster.collect_enabled or not cluster.prometheus_url:
        return {"cluster_id": cluster_id, "skipped": "disabled"}
    try:
        result = collect_cluster(cluster.pk)
    except PrometheusError as exc:
        if exc.permanent:
            # Logged and recorded in a failed IngestRun; a retry would fail the same way.
            logger.error("collect_metrics: cluster %s: %s", cluster.name, exc)
            return {"cluster_id": cluster_id, "error": str(exc), "permanent": True}
        raise TransientPrometheusError(str(exc)) from exc
    return result.as_dict()


@shared_task(name="ledger.tasks.roll_up_dirty_hours")
def roll_up_dirty_hours() -> dict[str, Any]:
    """Roll up every due hour of every cluster (``ledger.rollup.sweep``).

    The safety net behind the collector, which rolls up its own cluster's due hours after each
    run: hours whose rollup failed or was killed, and hours to roll up once more after they
    settled, also while collection is off or failing. A doubled tick rolls some hour up twice,
    one after the other (the cluster lock), with the same result.
    """
    now = timezone.now()
    rolled: dict[str, list[str]] = {}
    failed = 0
    queued: list[int] = []
    for cluster_id in sweep.clusters_with_due_hours(now):
        if routing.queue_for_cluster(cluster_id) is not None:
            # The cluster's own worker rolls its hours up (fleet/routing.py).
            roll_up_cluster_hours.apply_async(
                args=[cluster_id], expires=float(settings.GPULEDGER_ROLLUP_SWEEP_SECONDS)
            )
            queued.append(cluster_id)
            continue
        swept = sweep.roll_up_due_hours(cluster_id, now)
        failed += len(swept.failed)
        if swept.rolled_up:
            rolled[str(cluster_id)] = [hour.isoformat() for hour in swept.rolled_up]
    if rolled or failed:
        logger.info(
            "roll_up_dirty_hours: %d hours rolled up, %d failed",
            sum(len(hours) for hours in rolled.values()),
            failed,
        )
    answer: dict[str, Any] = {"rolled_up": rolled, "failed": failed}
    if queued:
        answer["queued"] = queued
    return answer


@shared_task(name="ledger.tasks.roll_up_cluster_hours")
def roll_up_cluster_hours(cluster_id: int) -> dict[str, Any]:
    """Roll up one cluster's due hours: what ``roll_up_dirty_hours`` publishes for a cluster
    with a queue of its own, so that its worker does the work (docs/architecture.md
    "Scale-out")."""
    swept = sweep.roll_up_due_hours(cluster_id, timezone.now())
    return {
        "cluster_id": cluster_id,
        "rolled_up": [hour.isoformat() for hour in swept.rolled_up],
        "failed": len(swept.failed),
    }


@shared_task(name="ledger.tasks.prune_usage")
def prune_usage() -> dict[str, int]:
    """Drop per-window usage, rollups and run records older than their retention."""
    now = timezone.now()
    # Its duration and outcome are what /metrics reports about retention (README "Metrics").
    record = PruneRun.objects.create(started_at=now)
    usage_before = now - timedelta(days=settings.GPULEDGER_USAGE_RETENTION_DAYS)
    rollups_before = now - timedelta(days=settings.GPULEDGER_ROLLUP_RETENTION_DAYS)
    try:
        usage = rollup.prune_usage(usage_before)
        rollups = rollup.prune_rollups(rollups_before)
        # Run records answer "how fresh is this" and "why did it fail": the usage retention is
        # plenty; so it is for the prune's own records.
        runs, _ = IngestRun.objects.filter(started_at__lt=usage_before).delete()
        PruneRun.objects.filter(started_at__lt=usage_before).delete()
    except Exception as exc:
        record.finished_at = timezone.now()
        record.error = f"{type(exc).__name__}: {exc}"[:10_000]
        record.save(update_fields=["finished_at", "error"])
        raise
    logger.info("prune_usage: %d usage, %d rollup, %d run rows deleted", usage, rollups, runs)
    deleted = {"usage": usage, "rollups": rollups, "ingest_runs": runs}
    record.finished_at = timezone.now()
    record.succeeded = True
    record.rows_deleted = deleted
    record.save(update_fields=["finished_at", "succeeded", "rows_deleted"])
    return deleted


@shared_task(name="ledger.tasks.order_usage_partitions")
def order_usage_partitions() -> list[str]:
    """Rewrite each complete day's usage partition in (hour, holding) order, once (PostgreSQL;
    nothing elsewhere): the GPU, node and workload pages read a holding's week from a few
    hundred blocks instead of ten thousand (``ledger.partition_order``). Returns the days."""
    return [day.isoformat() for day in partition_order.order_complete_days(timezone.now())]


@shared_task(name="ledger.tasks.create_usage_partitions")
def create_usage_partitions() -> list[str]:
    """Create the usage facts' partitions from today to a few days ahead (PostgreSQL; nothing
    elsewhere), so no collection window waits for one. Returns the days created."""
    created = partitions.ensure_ahead(timezone.now().astimezone(UTC).date())
    return [day.isoformat() for day in created]
