"""``write_window``: one DCGM / kube-state-metrics collection window, in one transaction.

The order: the window's nodes and GPUs (``fleet.inventory``), the pods' stored allocations and
owners, the usage rows, then the allocations (``quotas.allocations``: opened or extended for
the pods seen, ended for the pods gone).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from fleet.ingest import WindowBatch
from fleet.inventory import NodeInfo, ensure_nodes, upsert_gpus
from fleet.models import Cluster
from ledger.store.owners import resolve_owners
from ledger.store.usage import replace_usage
from quotas.allocations import (
    close_missing_allocations,
    read_pod_allocations,
    write_window_allocations,
)

logger = logging.getLogger(__name__)


@dataclass
class WriteResult:
    gpus_created: int
    gpus_updated: int
    usage_rows: int
    allocations: int

    @property
    def rows_written(self) -> int:
        return self.gpus_created + self.gpus_updated + self.usage_rows + self.allocations


def write_window(cluster: Cluster, batch: WindowBatch) -> WriteResult:
    """Write one window in one transaction; re-running it leaves the same rows."""
    window = batch.window
    now = timezone.now()
    with transaction.atomic():
        nodes = _write_nodes(cluster, batch)
        node_ids = {name: node.id for name, node in nodes.items()}
        gpus = upsert_gpus(cluster, batch.gpus, node_ids, window)
        pods = sorted(
            {(r.namespace, r.pod) for r in batch.usage if r.pod}
            | {(a.namespace, a.pod) for a in batch.allocations}
        )
        stored = read_pod_allocations(cluster, pods)
        owners = resolve_owners(cluster, batch, stored)
        usage_rows = replace_usage(
            cluster, batch.usage, window, gpus.ids, gpus.models, nodes, owners, now
        )
        seen = write_window_allocations(
            cluster,
            window,
            batch.allocations,
            gpu_ids=gpus.ids,
            node_ids=node_ids,
            workload_ids={pod: owner.workload_id for pod, owner in owners.items()},
            stored=stored,
        )
        close_missing_allocations(cluster, window, seen)
    result = WriteResult(
        gpus_created=gpus.created,
        gpus_updated=gpus.seen_again,
        usage_rows=usage_rows,
        allocations=len(seen),
    )
    logger.info(
        "cluster %s window %s: %d GPUs new, %d seen again, %d usage rows, %d allocations",
        cluster.name,
        window.end.isoformat(),
        result.gpus_created,
        result.gpus_updated,
        result.usage_rows,
        result.allocations,
    )
    return result


def _write_nodes(cluster: Cluster, batch: WindowBatch) -> dict[str, NodeInfo]:
    """The nodes the window names (GPU hosts, pods' nodes), with the DCGM modelName per host."""
    products: dict[str, str] = {}
    for gpu in batch.gpus:
        if gpu.model_name and gpu.host not in products:
            products[gpu.host] = gpu.model_name
    names = sorted(
        {gpu.host for gpu in batch.gpus}
        | {a.node_name for a in batch.allocations if a.node_name}
        | {r.node_name for r in batch.usage if r.node_name}
    )
    return ensure_nodes(cluster, names, products)
