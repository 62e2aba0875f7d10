"""Write one window's :class:`fleet.ingest.WindowBatch` to the database, idempotently.

Everything happens in one transaction with a bounded number of set-based statements: the count
depends on the number of batches (``fleet.constants``), never on the number of GPUs or pods.

* Nodes and GPUs: ``fleet.inventory``, which also serves the Kubernetes sync's nodes. A window
  creates the nodes it names and fills their GPU product; GPUs follow the newest window seen, so
  re-collecting an old window never rolls them back; ``first_seen_at`` is the earliest window.
* Usage (``usage``): the rows of (cluster, window_end) are replaced, so a re-run changes nothing
  and late data replaces what was there. PostgreSQL gets them by COPY, other databases by
  ``executemany``.
* Owners (``owners``): pods resolve to Workload / LocalQueue / ClusterQueue / Team through stored
  Allocations with a workload, else the Kueue pod labels, else the namespace's only LocalQueue,
  else TeamNamespace.
* Allocations: ``quotas.allocations``, which also serves the API server's pods and documents
  when an allocation opens, is extended, ends and re-opens.

``write_window`` (``window``) puts them together. The bulk engine (COPY, ``= ANY`` lookups) is
``core.bulk``; ``copy_rows`` and ``close_missing_allocations`` are re-exported here for the
callers that took them from this module.
"""

from core.bulk import copy_rows
from ledger.store.usage import USAGE_COLUMNS, usage_values
from ledger.store.window import WriteResult, write_window
from quotas.allocations import close_missing_allocations

__all__ = [
    "USAGE_COLUMNS",
    "WriteResult",
    "close_missing_allocations",
    "copy_rows",
    "usage_values",
    "write_window",
]
