"""``sync_cluster``: one Kueue sync of one cluster under the cluster's cursor lease.

Every run leaves an ``IngestRun`` (source ``kueue``). Two syncs of one cluster never overlap: a
sync holds the cluster's lease (fleet.leases: a conditional UPDATE whose rowcount is checked,
renewed by a heartbeat while the worker lives) and releases it, with the last sampled window,
when it ends.

A run ends on time whatever the API server does: its LIST phase (discovery, every LIST and the
window's visibility calls) by ``GPULEDGER_SYNC_DEADLINE_SECONDS``, its WATCH by the watch's end
plus a short grace. A run past its deadline fails and says which call timed out.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from core.deadlines import Deadline
from fleet.choices import IngestSource, IngestStatus
from fleet.leases import Lease, holder_identity
from fleet.models import Cluster, IngestRun
from quotas.kueue import KubeError, KueueClient
from quotas.sources import SourceClient
from quotas.sync.cluster import ClusterSync
from quotas.sync.tally import Tally

logger = logging.getLogger(__name__)


class SyncBusy(Exception):
    """Another sync of the same cluster holds the claim."""


def sync_cluster(
    cluster_id: int,
    watch_seconds: float = 0,
    *,
    watch_until: datetime | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    client: KueueClient | None = None,
) -> IngestRun:
    """LIST the cluster's Kueue objects, GPU pods and nodes, write them, then WATCH a while.

    The LIST phase ends by ``GPULEDGER_SYNC_DEADLINE_SECONDS`` (past it the run fails and writes
    nothing); the watch lasts ``watch_seconds`` after the LIST, and ends at ``watch_until`` at the
    latest (the task's next beat tick). Returns the run's ``IngestRun``: ``success``,
    ``partial`` (some LIST failed or some objects were skipped; the rest is written and nothing
    is deleted for the failed kinds) or ``failed``.
    A failed run re-raises its ``KubeError`` (``permanent`` tells the caller whether to retry).
    Raises ``SyncBusy`` when another sync of the cluster is running.
    """
    cluster = Cluster.objects.get(pk=cluster_id)
    lease = Lease(cluster, IngestSource.KUEUE, holder_identity("sync"))
    if not lease.acquire():
        raise SyncBusy(lease.busy_message("synced"))
    run = IngestRun.objects.create(
        cluster=cluster,
        source=IngestSource.KUEUE,
        status=IngestStatus.RUNNING,
        started_at=timezone.now(),
    )
    deadline = Deadline(
        settings.GPULEDGER_SYNC_DEADLINE_SECONDS,
        "the sync deadline",
        "GPULEDGER_SYNC_DEADLINE_SECONDS",
    )
    sync: ClusterSync | None = None
    own_client = client is None
    try:
        if client is None:
            # Kueue's kinds from the cluster's quota source (docs/architecture.md "Quota sources").
            client = SourceClient.for_cluster(cluster, kubeconfig=kubeconfig, context=context)
        sync = ClusterSync(cluster, client, run, deadline)
        sync.relist()
        if watch_until is not None:
            watch_seconds = min(watch_seconds, (watch_until - timezone.now()).total_seconds())
        if watch_seconds > 0:
            sync.watch(watch_seconds)
    except KubeError as exc:
        if sync is None:
            # The client could not be made: nothing was read.
            Tally(errors=[exc.message]).finish(run, IngestStatus.FAILED)
        else:
            sync.tally.errors.append(exc.message)
            sync.finish(IngestStatus.FAILED)
        logger.warning("cluster %s: Kueue sync failed: %s", cluster.name, exc.message)
        raise
    except Exception as exc:
        run.status = IngestStatus.FAILED
        run.finished_at = timezone.now()
        run.error = f"{type(exc).__name__}: {exc}"
        run.save()
        raise
    finally:
        lease.release(last_window_end=sync.sampler.sampled_until if sync else None)
        if own_client and client is not None:
            client.close()
    tally = sync.tally
    status = IngestStatus.PARTIAL if tally.errors or tally.skipped else IngestStatus.SUCCESS
    run = sync.finish(status)
    logger.info(
        "cluster %s: Kueue sync %s: read %d, wrote %d, skipped %d",
        cluster.name,
        run.status,
        run.records_read,
        run.rows_written,
        run.skipped,
    )
    return run
