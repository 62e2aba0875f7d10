"""Celery tasks for the Kueue side: thin glue around ``quotas.sync``
(docs/conventions.md "Background work")."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from fleet.models import Cluster
from quotas.kueue import KubeError
from quotas.sync import SyncBusy, sync_cluster

logger = logging.getLogger(__name__)

# Transient failures are retried this many times, after 5, 10, 20 s (capped at the sync interval).
SYNC_MAX_RETRIES = 3
SYNC_RETRY_BASE_SECONDS = 5
# The watch ends this long before a beat tick, so the tick finds the claim released.
WATCH_MARGIN_SECONDS = 3


def watch_window_seconds() -> int:
    """How long a sync watches after its LIST: until just before the beat tick at which the
    next relist is due (``GPULEDGER_RELIST_SECONDS`` rounded down to whole beat intervals)."""
    interval = settings.GPULEDGER_SYNC_SECONDS
    ticks = max(1, settings.GPULEDGER_RELIST_SECONDS // interval)
    return max(0, ticks * interval - WATCH_MARGIN_SECONDS)


@shared_task(name="quotas.tasks.sync_clusters_all", ignore_result=True)
def sync_clusters_all() -> int:
    """Fan out one ``sync_cluster`` per cluster with sync enabled; returns how many."""
    Cluster.objects.ensure_from_settings()
    interval = float(settings.GPULEDGER_SYNC_SECONDS)
    cluster_ids = list(Cluster.objects.filter(sync_enabled=True).values_list("id", flat=True))
    for cluster_id in cluster_ids:
        sync_cluster_task.apply_async(args=[cluster_id], expires=interval)
    return len(cluster_ids)


@shared_task(
    bind=True,
    name="quotas.tasks.sync_cluster",
    ignore_result=True,
    max_retries=SYNC_MAX_RETRIES,
)
def sync_cluster_task(self: Any, cluster_id: int) -> None:
    """LIST one cluster, write it, then WATCH until the next relist is due.

    Like a Kubernetes informer: a full LIST every ``GPULEDGER_RELIST_SECONDS`` (default 300 s),
    and in between the WATCH streams every change as it happens, so the ledger lags the API
    server by seconds, not by the relist interval. Beat ticks every ``GPULEDGER_SYNC_SECONDS``
    find the claim held while a sync watches and skip; the first tick after it ends relists.
    When the LIST itself takes longer than that (very large clusters), the cluster is relisted
    as often as it can be.

    Retries only transient ``KubeError`` (connection, timeout, 429, 5xx) with exponential
    backoff and a small cap; permanent ones (bad credentials, RBAC) are logged and left to the
    ``IngestRun`` the sync recorded. A tick that finds the previous sync still running skips.
    """
    watch_seconds = watch_window_seconds()
    watch_until = timezone.now() + timedelta(seconds=watch_seconds)
    try:
        sync_cluster(cluster_id, watch_seconds=float(watch_seconds), watch_until=watch_until)
    except Cluster.DoesNotExist:
        logger.warning("cluster %s no longer exists; nothing to sync", cluster_id)
    except SyncBusy:
        logger.info("cluster %s: a sync is already running; this tick skips", cluster_id)
    except KubeError as exc:
        if exc.permanent:
            logger.error("cluster %s: sync failed permanently: %s", cluster_id, exc.message)
            return
        countdown = min(
            SYNC_RETRY_BASE_SECONDS * 2**self.request.retries,
            settings.GPULEDGER_SYNC_SECONDS,
        )
        logger.warning(
            "cluster %s: sync failed (%s); retry %d/%d in %d s",
            cluster_id,
            exc.message,
            self.request.retries + 1,
            SYNC_MAX_RETRIES,
            countdown,
        )
        raise self.retry(exc=exc, countdown=countdown) from exc
