"""Per collection window: the ClusterQueue samples, and pending positions from the visibility
API when it is served.

One sample per queue and flavor at the aligned window end (``floor_time(now,
GPULEDGER_COLLECT_SECONDS)``), so syncs every 30 s still leave exactly one sample per window.
A sample needs complete ClusterQueue and Workload lists (pending demand is summed over the
Workloads): without either, the window has no sample rather than a wrong one.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from core.timewindows import floor_time
from fleet.models import Cluster
from quotas.constants import LOOKUP_BATCH_SIZE, WRITE_BATCH_SIZE
from quotas.ingest import PENDING_STATES, KueueBatch, build_queue_samples, build_snapshot
from quotas.kueue import KubeError, KubeTimeout
from quotas.models import Workload
from quotas.store import write_queue_samples
from quotas.sync.objects import SMALL_KINDS, Key

if TYPE_CHECKING:
    from quotas.sync.cluster import ClusterSync

logger = logging.getLogger(__name__)


def sample_window(
    sync: ClusterSync, batch: KueueBatch | None = None, *, force: bool = False
) -> None:
    """The window's ClusterQueue samples and pending positions, once per aligned window."""
    seconds = settings.GPULEDGER_COLLECT_SECONDS
    window_end = floor_time(timezone.now(), seconds)
    if not force and sync.sampled_until is not None and window_end <= sync.sampled_until:
        return
    if not {"ClusterQueue", "Workload"} <= sync.complete:
        return
    if batch is None:
        # Samples need every workload (pending demand) but no pods or nodes.
        kinds = (*SMALL_KINDS, "Workload")
        batch = build_snapshot(sync.snapshot(kinds), settings.GPULEDGER_TEAM_LABELS)
    rows = build_queue_samples(batch)
    sync.rows_written += write_queue_samples(sync.cluster, rows, window_end, seconds)
    sync.sampled_until = window_end
    sync.first_window = sync.first_window or window_end
    _pending_positions(sync)


def _pending_positions(sync: ClusterSync) -> None:
    """Read every queue's pending positions from the visibility API and store them."""
    if sync.client.discover(deadline=sync.deadline).visibility_version is None:
        sync.notes["visibility API: not served"] = 1
        return
    positions: dict[Key, int] = {}
    for key, cq in sync.objects["ClusterQueue"].items():
        status = cq.get("status")
        if not isinstance(status, dict) or not status.get("pendingWorkloads"):
            continue
        try:
            items = sync.client.pending_workloads(key[1], deadline=sync.deadline)
        except KubeError as exc:
            if isinstance(exc, KubeTimeout) and exc.run_deadline:
                raise  # the run is out of time: the other queues would not be asked either
            logger.warning(
                "cluster %s: pending workloads of %s: %s", sync.cluster.name, key[1], exc
            )
            sync.errors.append(f"visibility {key[1]}: {exc.message}")
            if exc.permanent:
                return
            continue
        positions.update(pending_positions(items))
    sync.rows_written += write_pending_positions(sync.cluster, positions)


def pending_positions(items: list[Any]) -> dict[Key, int]:
    """(namespace, name) → ``positionInClusterQueue`` of one queue's visibility API answer (its
    place in the answer when the field is missing); items without a name are skipped."""
    positions: dict[Key, int] = {}
    for index, item in enumerate(items):
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or not meta.get("name"):
            continue
        position = item.get("positionInClusterQueue")
        if not isinstance(position, int) or isinstance(position, bool) or position < 0:
            position = index
        positions[(str(meta.get("namespace") or ""), str(meta["name"]))] = position
    return positions


def seconds_to_next_window(sync: ClusterSync) -> float:
    """Seconds until the next window is due to be sampled (zero or less once it is)."""
    seconds = settings.GPULEDGER_COLLECT_SECONDS
    if sync.sampled_until is None:
        return float(seconds)
    next_end = sync.sampled_until + timedelta(seconds=seconds)
    return (next_end - timezone.now()).total_seconds()


def write_pending_positions(cluster: Cluster, positions: dict[Key, int]) -> int:
    """Set ``Workload.pending_position`` from the visibility API; clear it where it no longer is."""
    scope = Workload.objects.filter(cluster=cluster)
    current = {
        (ns, name): (pk, position)
        for pk, ns, name, position in scope.filter(
            Q(pending_position__isnull=False) | Q(state__in=PENDING_STATES, deleted_at__isnull=True)
        ).values_list("id", "namespace", "name", "pending_position")
    }
    changed = []
    for key, (pk, position) in current.items():
        wanted = positions.get(key)
        if wanted != position:
            changed.append(Workload(pk=pk, pending_position=wanted))
    missing = [key for key in positions if key not in current]
    if missing:
        # Pending by the visibility API but not by our reading of its conditions (a race).
        for start in range(0, len(missing), LOOKUP_BATCH_SIZE):
            chunk = missing[start : start + LOOKUP_BATCH_SIZE]
            query = Q()
            for ns, name in chunk:
                query |= Q(namespace=ns, name=name)
            for pk, ns, name in scope.filter(query).values_list("id", "namespace", "name"):
                changed.append(Workload(pk=pk, pending_position=positions[(ns, name)]))
    if changed:
        Workload.objects.bulk_update(changed, ["pending_position"], batch_size=WRITE_BATCH_SIZE)
    return len(changed)
