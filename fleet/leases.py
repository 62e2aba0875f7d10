"""Who may collect or sync a (cluster, source) now: a short lease kept alive by a heartbeat.

A worker claims the cluster's ``CollectionCursor`` for ``GPULEDGER_LEASE_SECONDS`` (45 s) with a
conditional UPDATE (``CollectionCursor.objects.claim``), and a heartbeat thread
renews it every third of that while the worker lives. A worker killed with ``kill -9`` stops
renewing, so its lease runs out within a minute and the next run takes over; the run it left
"running" is then ended as failed. A busy lease says who holds it and until when.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from fleet.choices import IngestStatus
from fleet.models import Cluster, CollectionCursor, IngestRun

logger = logging.getLogger(__name__)


def holder_identity(role: str) -> str:
    """``role@host:pid:nonce``: readable in a busy message, unique per run."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """One holder's lease on one (cluster, source) cursor; see the module docstring."""

    def __init__(self, cluster: Cluster, source: str, holder: str) -> None:
        self.cluster = cluster
        self.source = source
        self.holder = holder
        self.seconds = float(settings.GPULEDGER_LEASE_SECONDS)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def until(self, now: datetime | None = None) -> datetime:
        return (now or timezone.now()) + timedelta(seconds=self.seconds)

    def acquire(self, now: datetime | None = None) -> bool:
        """Claim the lease; on success end runs a dead holder left running and start beating."""
        now = now or timezone.now()
        if not CollectionCursor.objects.claim(
            self.cluster, self.source, self.holder, until=self.until(now), now=now
        ):
            return False
        abandoned = IngestRun.objects.filter(
            cluster=self.cluster, source=self.source, status=IngestStatus.RUNNING
        ).update(
            status=IngestStatus.FAILED,
            finished_at=now,
            error="Abandoned: its worker stopped renewing the lease (killed or hung).",
        )
        if abandoned:
            logger.warning(
                "cluster %s: %s: ended %d run(s) a stopped worker left running",
                self.cluster.name,
                self.source,
                abandoned,
            )
        if settings.GPULEDGER_LEASE_HEARTBEAT:
            self._thread = threading.Thread(
                target=self._beat, name=f"lease-{self.source}-{self.cluster.name}", daemon=True
            )
            self._thread.start()
        return True

    def renew(self) -> bool:
        """Renew from the worker itself; False when another worker has taken the lease."""
        return CollectionCursor.objects.extend(
            self.cluster, self.source, self.holder, until=self.until()
        )

    def release(self, last_window_end: datetime | None = None) -> None:
        self._stop.set()
        if self._thread is not None:
            # The beat thread never holds the worker up: a renewal in flight finishes on its own.
            self._thread.join(timeout=1.0)
        CollectionCursor.objects.release(
            self.cluster, self.source, self.holder, last_window_end=last_window_end
        )

    def busy_message(self, what: str) -> str:
        cursor = CollectionCursor.objects.filter(cluster=self.cluster, source=self.source).first()
        if cursor is None or not cursor.claimed_by:
            return f"cluster {self.cluster.name} is being {what} by another worker"
        until = cursor.claimed_until.isoformat() if cursor.claimed_until else "?"
        return (
            f"cluster {self.cluster.name} is being {what} by {cursor.claimed_by}, whose lease "
            f"runs until {until} (renewed every {self.seconds / 3:.0f} s while it lives)"
        )

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.seconds / 3):
                try:
                    if not self.renew():
                        logger.warning(
                            "cluster %s: %s lease of %s was taken over",
                            self.cluster.name,
                            self.source,
                            self.holder,
                        )
                        return
                except Exception:  # a failed renewal is retried at the next beat
                    logger.exception("cluster %s: lease renewal failed", self.cluster.name)
        finally:
            connection.close()
