"""``ClusterSync``: one sync of one cluster, put together from its steps.

The steps share two small pieces of state, handed to each explicitly: the in-memory lists
(``ObjectLists``) and the run's counters and errors (``Tally``).

* ``Lister`` (``listing``): LIST every kind into the lists, or one kind again after ``410 Gone``.
* ``Writer`` (``writer``): rows for the whole lists after a LIST, or for what events changed.
* ``Sampler`` (``samples``): the queue samples and pending positions, once per window.
* ``Watch`` (``watch``): the WATCH threads and the loop that applies their events in batches.

``relist`` runs LIST, build, write and samples in turn, and ends by the sync's deadline: past
it, the run fails and nothing is written. ``watch`` then keeps the lists and the tables up to
date for a while. ``finish`` leaves the run's ``IngestRun``.
"""

from __future__ import annotations

import logging
import time

from core.deadlines import Deadline
from fleet.models import Cluster, IngestRun
from quotas.ingest import KueueBatch
from quotas.kueue import KueueClient
from quotas.sync.listing import Lister
from quotas.sync.objects import Changes, ObjectLists
from quotas.sync.samples import Sampler
from quotas.sync.tally import Tally
from quotas.sync.watch import Watch
from quotas.sync.writer import Writer

logger = logging.getLogger(__name__)


class ClusterSync:
    """One sync of ``cluster`` through ``client``, recorded in ``run``."""

    def __init__(
        self,
        cluster: Cluster,
        client: KueueClient,
        run: IngestRun,
        deadline: Deadline | None = None,
    ) -> None:
        self.cluster = cluster
        self.client = client
        self.run = run
        # Every upstream call of the LIST phase ends by this; the watch has its own end.
        self.deadline = deadline or Deadline.never()
        self.lists = ObjectLists()
        self.tally = Tally()
        self.lister = Lister(cluster.name, client, self.lists, self.tally)
        self.writer = Writer(cluster, self.lists, self.tally)
        self.sampler = Sampler(cluster, client, self.lists, self.tally)
        # Seconds spent per phase of the last relist (logged; the benchmark prints them).
        self.timings: dict[str, float] = {}

    def relist(self) -> KueueBatch:
        """LIST every kind, write the snapshot, sample the window; KubeError if nothing listed."""
        started = time.perf_counter()
        self.lister.list_all(self.deadline)
        listed_at = time.perf_counter()
        batch = self.writer.build_all()
        built_at = time.perf_counter()
        rows_written = self.writer.write_all(batch)
        written_at = time.perf_counter()
        self.sampler.sample(self.deadline, batch, force=True)
        self.timings = {
            "list": listed_at - started,
            "build": built_at - listed_at,
            "write": written_at - built_at,
            "samples": time.perf_counter() - written_at,
        }
        logger.info(
            "cluster %s: relisted %d objects in %.1f s, built rows in %.1f s, wrote %d rows "
            "in %.1f s, sampled in %.1f s",
            self.cluster.name,
            batch.stats.records_read,
            self.timings["list"],
            self.timings["build"],
            rows_written,
            self.timings["write"],
            self.timings["samples"],
        )
        return batch

    def watch(self, seconds: float, *, stop_after_events: int | None = None) -> None:
        """Apply WATCH events of every complete kind for ``seconds``, writing in batches.

        ``stop_after_events`` ends the watch early, once that many object events are written.
        """
        watch = Watch(
            self.cluster.name,
            self.client,
            self.lists,
            self.tally,
            lister=self.lister,
            sampler=self.sampler,
            flush=self.flush,
            seconds=seconds,
        )
        watch.run(stop_after_events=stop_after_events)

    def flush(self, changes: Changes) -> None:
        """Write what a batch of events changed."""
        self.writer.flush(changes)

    def finish(self, status: str, error: str = "") -> IngestRun:
        """Save the run's ``IngestRun`` with its counters and the windows it sampled."""
        return self.tally.finish(self.run, status, self.sampler.window(), error)
