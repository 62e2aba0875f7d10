"""Writes a ``KueueBatch`` (quotas.ingest) into the database: one transaction, bulk upserts.

Every kind is upserted on its named unique constraint (docs/conventions.md "Models") through
``core.bulk``. Existing rows are read once per kind first, so only new or changed rows are written:
a re-run of the same snapshot writes nothing and ``WriteResult`` says what changed. Foreign keys are
resolved by name with one query per kind, never per row.

The big kinds (Workload, Node, Allocation, transitions) are read selectively, so a watch batch of
a hundred objects costs a hundred rows, not the cluster: only the batch's keys are read unless the
kind is checked for deletions. Rows are compared field by field, not by resourceVersion: a row
also depends on other objects (queues, priority classes, borrowing) and on this code's reading.
Transitions already stored are not re-inserted. ``mark_deleted`` marks objects a WATCH saw
deleted, by key.

History is never deleted: an object missing from a *complete* LIST gets ``deleted_at`` (a pod's
allocation gets ``ended_at``), and one that comes back has it cleared. Kinds outside ``complete``
(a failed or paginated-away LIST) are never marked deleted (docs/architecture.md "Upstream facts":
never read a failed or partial LIST as everything was deleted). Quota rows are configuration, not
history: a ClusterQueue's quota rows are replaced by what its spec says now.

Modules: ``writer`` (the batch's state and the upsert every kind goes through), ``queues``
(flavors, cohorts, teams, ClusterQueues and quotas, LocalQueues, namespaces, priority classes),
``workloads`` (Workloads, transitions), ``snapshot`` (``write_snapshot``, in foreign-key order),
``deletions`` (``mark_deleted``), ``samples`` (``write_queue_samples``, and
``write_metric_samples`` for the windows Kueue's metrics fill). Nodes are written by
``fleet.inventory`` and pods' allocations by ``quotas.allocations``, which the DCGM windows'
writer (``ledger.store``) shares.
"""

from quotas.store.deletions import mark_deleted
from quotas.store.samples import (
    metric_sample_context,
    quota_metrics_source,
    synced_cohorts,
    write_metric_samples,
    write_queue_samples,
)
from quotas.store.snapshot import write_snapshot
from quotas.store.writer import WriteResult

__all__ = [
    "WriteResult",
    "mark_deleted",
    "metric_sample_context",
    "quota_metrics_source",
    "synced_cohorts",
    "write_metric_samples",
    "write_queue_samples",
    "write_snapshot",
]
