"""Per collection window: the ClusterQueue samples, and pending positions from the visibility
API when it is served.

One sample per queue and flavor at the aligned window end (``floor_time(now,
GPULEDGER_COLLECT_SECONDS)``), so syncs every 30 s still leave exactly one sample per window.
A sample needs complete ClusterQueue and Workload lists (pending demand is summed over the
Workloads): without either, the window has no sample rather than a wrong one.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from core.deadlines import Deadline
from core.timewindows import floor_time
from fleet.models import Cluster
from quotas.constants import LOOKUP_BATCH_SIZE, WRITE_BATCH_SIZE
from quotas.ingest import PENDING_STATES, KueueBatch, build_gpu_queue_samples, build_snapshot
from quotas.kueue import KubeError, KubeTimeout, KueueClient
from quotas.models import Workload
from quotas.store import write_queue_samples
from quotas.sync.objects import SMALL_KINDS, Key, ObjectLists
from quotas.sync.tally import Tally

logger = logging.getLogger(__name__)


class Sampler:
    """Samples the lists' queues once per aligned window and remembers which windows it did."""

    def __init__(
        self, cluster: Cluster, client: KueueClient, lists: ObjectLists, tally: Tally
    ) -> None:
        self.cluster = cluster
        self.client = client
        self.lists = lists
        self.tally = tally
        # The end of the first and of the last window sampled.
        self.first_window: datetime | None = None
        self.sampled_until: datetime | None = None

    def sample(
        self, deadline: Deadline, batch: KueueBatch | None = None, *, force: bool = False
    ) -> None:
        """The window's ClusterQueue samples and pending positions, once per aligned window.

        ``batch`` is the build of the lists when the caller has one; ``force`` samples even when
        this window was sampled (a relist's samples replace the window's).
        """
        seconds = settings.GPULEDGER_COLLECT_SECONDS
        window_end = floor_time(timezone.now(), seconds)
        if not force and self.sampled_until is not None and window_end <= self.sampled_until:
            return
        if not {"ClusterQueue", "Workload"} <= self.lists.complete:
            return
        if batch is None:
            # Samples need every workload (pending demand) but no pods or nodes.
            kinds = (*SMALL_KINDS, "Workload")
            batch = build_snapshot(self.lists.snapshot(kinds), settings.GPULEDGER_TEAM_LABELS)
        rows = build_gpu_queue_samples(batch)
        self.tally.rows_written += write_queue_samples(self.cluster, rows, window_end, seconds)
        self.sampled_until = window_end
        self.first_window = self.first_window or window_end
        self._pending_positions(deadline)

    def _pending_positions(self, deadline: Deadline) -> None:
        """Read every queue's pending positions from the visibility API and store them."""
        if self.client.discover(deadline=deadline).visibility_version is None:
            self.tally.notes["visibility API: not served"] = 1
            return
        positions: dict[Key, int] = {}
        for key, cq in self.lists.objects["ClusterQueue"].items():
            status = cq.get("status")
            if not isinstance(status, dict) or not status.get("pendingWorkloads"):
                continue
            try:
                items = self.client.pending_workloads(key[1], deadline=deadline)
            except KubeError as exc:
                if isinstance(exc, KubeTimeout) and exc.run_deadline:
                    raise  # the run is out of time: the other queues would not be asked either
                logger.warning(
                    "cluster %s: pending workloads of %s: %s", self.cluster.name, key[1], exc
                )
                self.tally.errors.append(f"visibility {key[1]}: {exc.message}")
                if exc.permanent:
                    return
                continue
            positions.update(pending_positions(items))
        self.tally.rows_written += write_pending_positions(self.cluster, positions)

    def seconds_to_next_window(self) -> float:
        """Seconds until the next window is due to be sampled (zero or less once it is)."""
        seconds = settings.GPULEDGER_COLLECT_SECONDS
        if self.sampled_until is None:
            return float(seconds)
        next_end = self.sampled_until + timedelta(seconds=seconds)
        return (next_end - timezone.now()).total_seconds()

    def window(self) -> tuple[datetime, datetime] | None:
        """The time the sampled windows cover (start of the first, end of the last), if any."""
        if self.first_window is None or self.sampled_until is None:
            return None
        start = self.first_window - timedelta(seconds=settings.GPULEDGER_COLLECT_SECONDS)
        return start, self.sampled_until


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
