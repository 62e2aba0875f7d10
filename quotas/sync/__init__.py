"""One Kueue sync of one cluster: LIST everything, write it, then WATCH and write the changes.

The glue between the thin client (``quotas.kueue``), the pure row builder (``quotas.ingest``) and
the writer (``quotas.store``), as docs/architecture.md "Data flow" describes:

* **LIST** every kind with its resourceVersion; ``build_snapshot`` on the lists;
  ``write_snapshot`` with ``complete`` = the kinds whose LIST finished. A kind whose LIST failed
  (or is not served, like Cohort on older Kueue) is left out of ``complete``, so nothing of that
  kind is ever marked deleted because of it; the run is ``partial`` with the error, and the next
  sync recovers.
* **WATCH** (when ``watch_seconds > 0``) each listed kind from its resourceVersion, one thread per
  kind doing HTTP only; the calling thread applies the events in batches to the lists it keeps in
  memory and writes only what changed. ``410 Gone`` relists that kind and turns the difference
  into events. A DELETED event removes the object from the in-memory list, which is complete, so
  the object is marked deleted exactly as a complete LIST would: Workloads, Pods and Nodes by key
  (``quotas.store.mark_deleted``), the small kinds by the writer's pass over their lists.
* **Per collection window**, one ClusterQueue sample per queue and flavor at the aligned window
  end (``floor_time(now, GPULEDGER_COLLECT_SECONDS)``), so syncs every 30 s still leave exactly one
  sample per window, and pending positions from the visibility API when it is served.

The client is ``quotas.sources.SourceClient``: on a cluster whose quota source is Volcano or KAI
Scheduler it serves the same kinds, translated from that scheduler's queues and PodGroups
(docs/architecture.md "Quota sources"), so nothing here knows the difference.

Every run leaves an ``IngestRun`` (source ``kueue``). Two syncs of one cluster never overlap: a
sync claims the cluster's ``CollectionCursor`` with a conditional UPDATE whose rowcount is checked.

The package: ``run`` (``sync_cluster``, the lease and the ``IngestRun``), ``cluster``
(``ClusterSync``: puts the steps together), and the steps, each handed what it needs:
``listing`` (``Lister``: LIST into the in-memory lists), ``writer`` (``Writer``: rows for the
whole lists or for what changed), ``watch`` (``Watch``: the WATCH threads and the batching
loop), ``samples`` (``Sampler``: queue samples and pending positions per window). The state
they share: ``objects`` (``ObjectLists``, the in-memory lists, and the identities and changes
of their objects) and ``tally`` (``Tally``, the run's counters and errors).
"""

from quotas.sync.cluster import ClusterSync
from quotas.sync.objects import object_key
from quotas.sync.run import SyncBusy, sync_cluster
from quotas.sync.samples import pending_positions, write_pending_positions

__all__ = [
    "ClusterSync",
    "SyncBusy",
    "object_key",
    "pending_positions",
    "sync_cluster",
    "write_pending_positions",
]
