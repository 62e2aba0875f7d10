"""Write one window's :class:`fleet.ingest.WindowBatch` to the database, idempotently.

Everything happens in one transaction with a bounded number of set-based statements: the count
depends on the number of batches (``fleet.constants``), never on the number of GPUs or pods.

* Nodes and GPUs: ``fleet.inventory``, which also serves the Kubernetes sync's nodes. A window
  creates the nodes it names and fills their GPU product; GPUs follow the newest window seen, so
  re-collecting an old window never rolls them back; ``first_seen_at`` is the earliest window.
* Usage: the rows of (cluster, window_end) are replaced, so a re-run changes nothing and late data
  replaces what was there. PostgreSQL gets them by COPY, other databases by ``executemany``.
* Pods resolve to Workload / LocalQueue / ClusterQueue / Team through stored Allocations with a
  workload, else the Kueue pod labels, else the namespace's only LocalQueue, else TeamNamespace.
* Allocations: ``quotas.allocations``, which also serves the API server's pods and documents
  when an allocation opens, is extended, ends and re-opens. ``close_missing_allocations`` is
  re-exported here.

The bulk engine (COPY, ``= ANY`` lookups) is ``core.bulk``; ``copy_rows`` is re-exported here for
the callers that took it from this module.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from core import bulk
from core.bulk import copy_rows
from core.timewindows import Window
from fleet import constants as c
from fleet.ingest import UsageRow, WindowBatch
from fleet.inventory import NodeInfo, ensure_nodes, upsert_gpus
from fleet.models import Cluster
from ledger.models import GpuUsage
from quotas.allocations import (
    AllocationKey,
    PodKey,
    close_missing_allocations,
    read_pod_allocations,
    write_window_allocations,
)
from quotas.models import ClusterQueue, LocalQueue, TeamNamespace

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


@dataclass(frozen=True)
class _Owner:
    """Who a pod's GPUs are charged to."""

    workload_id: int | None = None
    local_queue_id: int | None = None
    cluster_queue_id: int | None = None
    team_id: int | None = None


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
        owners = _resolve_owners(cluster, batch, stored)
        usage_rows = _replace_usage(
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


# --- Pod owners ----------------------------------------------------------------------------------


def _resolve_owners(
    cluster: Cluster,
    batch: WindowBatch,
    existing: Mapping[AllocationKey, Mapping[str, Any]],
) -> dict[PodKey, _Owner]:
    """(namespace, pod) -> owner, with a few set-based queries for the whole window."""
    queue_names: dict[PodKey, tuple[str, str]] = {}
    uids: dict[PodKey, str] = {}
    # The first row of a pod gives its queues and uid (a pod has one row per GPU it holds).
    for usage in batch.usage:
        if usage.pod:
            pod_key = (usage.namespace, usage.pod)
            if pod_key not in queue_names:
                queue_names[pod_key] = (usage.cluster_queue_name, usage.local_queue_name)
                uids[pod_key] = usage.pod_uid
    for alloc in batch.allocations:
        pod_key = (alloc.namespace, alloc.pod)
        if pod_key not in queue_names:
            queue_names[pod_key] = (alloc.cluster_queue_name, alloc.local_queue_name)
            uids[pod_key] = alloc.pod_uid
    if not queue_names:
        return {}

    # Workload through a stored allocation of the same pod: the same uid first, else the newest.
    by_workload: dict[PodKey, Mapping[str, Any]] = {}
    for (namespace, pod, uid), stored in existing.items():
        if stored["workload_id"] is None:
            continue
        current = by_workload.get((namespace, pod))
        rank = (uid == uids.get((namespace, pod)), stored["started_at"])
        if current is None or rank > (
            current["pod_uid"] == uids.get((namespace, pod)),
            current["started_at"],
        ):
            by_workload[(namespace, pod)] = stored

    namespaces = sorted({namespace for namespace, _ in queue_names})
    # .values() rows (TypedDicts for mypy), read by key.
    local_queues: dict[tuple[str, str], Mapping[str, Any]] = {}
    only_queue: dict[str, Mapping[str, Any] | None] = {}
    for queryset in bulk.filter_in(
        LocalQueue.objects.filter(cluster=cluster), "namespace", namespaces, c.LOOKUP_BATCH_SIZE
    ):
        lq_rows = queryset.values(
            "id", "namespace", "name", "cluster_queue_id", "cluster_queue_name", "deleted_at"
        )
        for lq_row in lq_rows:
            local_queues[(lq_row["namespace"], lq_row["name"])] = lq_row
            if lq_row["deleted_at"] is None:
                # Two live LocalQueues in a namespace: no "only" queue (None).
                only_queue[lq_row["namespace"]] = (
                    lq_row if lq_row["namespace"] not in only_queue else None
                )
    cluster_queues: dict[str, Mapping[str, Any]] = {}
    cluster_queue_by_id: dict[int, Mapping[str, Any]] = {}
    for cq_row in ClusterQueue.objects.filter(cluster=cluster).values("id", "name", "team_id"):
        cluster_queues[cq_row["name"]] = cq_row
        cluster_queue_by_id[cq_row["id"]] = cq_row
    teams: dict[str, int] = {}
    for queryset in bulk.filter_in(
        TeamNamespace.objects.filter(cluster=cluster), "namespace", namespaces, c.LOOKUP_BATCH_SIZE
    ):
        teams.update(queryset.values_list("namespace", "team_id"))

    owners: dict[PodKey, _Owner] = {}
    for (namespace, pod), (cq_name, lq_name) in queue_names.items():
        workload = by_workload.get((namespace, pod))
        workload_id = lq_id = cq_id = team_id = None
        if workload is not None:
            workload_id = workload["workload_id"]
            lq_id = workload["workload__local_queue_id"]
            cq_id = workload["workload__cluster_queue_id"]
            team_id = workload["workload__cluster_queue__team_id"]
        local_queue = (
            local_queues.get((namespace, lq_name)) if lq_name else only_queue.get(namespace)
        )
        if lq_id is None and local_queue is not None:
            lq_id = local_queue["id"]
        if cq_id is None:
            cluster_queue = cluster_queues.get(cq_name) if cq_name else None
            if cluster_queue is None and local_queue is not None:
                cluster_queue = cluster_queue_by_id.get(
                    local_queue["cluster_queue_id"]
                ) or cluster_queues.get(local_queue["cluster_queue_name"])
            if cluster_queue is not None:
                cq_id = cluster_queue["id"]
        if team_id is None and cq_id is not None and cq_id in cluster_queue_by_id:
            team_id = cluster_queue_by_id[cq_id]["team_id"]
        if team_id is None:
            team_id = teams.get(namespace)
        owners[(namespace, pod)] = _Owner(workload_id, lq_id, cq_id, team_id)
    return owners


# --- Usage ---------------------------------------------------------------------------------------

_USAGE_COLUMNS = (
    "cluster_id",
    "window_start",
    "window_end",
    "gpu_id",
    "gpu_key",
    "namespace",
    "pod",
    "container",
    "node_name",
    "flavor",
    "gpu_model",
    "workload_id",
    "local_queue_id",
    "cluster_queue_id",
    "team_id",
    "allocated",
    "gpus",
    "capacity_gpus",
    "shared",
    "sm_active",
    "pipe_tensor_active",
    "dram_active",
    "gr_engine_active",
    "gpu_util",
    "fb_used_mib",
    "activity",
    "activity_source",
    "samples",
    "expected_samples",
    "created_at",
)


def usage_values(
    cluster: Cluster,
    rows: Iterable[UsageRow],
    window: Window,
    gpu_ids: dict[str, int],
    gpu_models: dict[str, str],
    nodes: dict[str, NodeInfo],
    owners: dict[PodKey, _Owner],
    now: datetime,
) -> Iterator[tuple]:
    """GpuUsage rows as tuples in ``_USAGE_COLUMNS`` order.

    What rows share is worked out once (per node, GPU and pod), not once per row: the
    per-row lookups and attribute reads were most of the ~0.2 s of CPU this took for 50,000
    rows (bench/ingest_pure.py).
    """
    cluster_id, start, end = cluster.pk, window.start, window.end
    # node name -> (flavor, GPU product); GPU key -> (id, model); pod -> owner ids.
    node_facts = {name: (node.flavor, node.gpu_product) for name, node in nodes.items()}
    gpu_facts = {key: (gpu_ids.get(key), model) for key, model in gpu_models.items()}
    no_owner = (None, None, None, None)
    owner_ids = {
        pod: (owner.workload_id, owner.local_queue_id, owner.cluster_queue_id, owner.team_id)
        for pod, owner in owners.items()
    }
    for row in rows:
        node = node_facts.get(row.node_name) or node_facts.get(row.host)
        key = row.gpu_key
        if key:
            gpu_id, model = gpu_facts.get(key) or (gpu_ids.get(key), "")
        else:
            gpu_id, model = None, node[1] if node else ""
        yield (
            cluster_id,
            start,
            end,
            gpu_id,
            key,
            row.namespace,
            row.pod,
            row.container,
            row.node_name,
            node[0] if node else "",
            model,
            *(owner_ids.get((row.namespace, row.pod), no_owner) if row.pod else no_owner),
            row.allocated,
            row.gpus,
            row.capacity_gpus,
            row.shared,
            row.sm_active,
            row.pipe_tensor_active,
            row.dram_active,
            row.gr_engine_active,
            row.gpu_util,
            row.fb_used_mib,
            row.activity,
            row.activity_source,
            row.samples,
            row.expected_samples,
            now,
        )


def _replace_usage(
    cluster: Cluster,
    rows: list[UsageRow],
    window: Window,
    gpu_ids: dict[str, int],
    gpu_models: dict[str, str],
    nodes: dict[str, NodeInfo],
    owners: dict[PodKey, _Owner],
    now: datetime,
) -> int:
    GpuUsage.objects.filter(cluster=cluster, window_end=window.end).delete()
    if not rows:
        return 0
    values = usage_values(cluster, rows, window, gpu_ids, gpu_models, nodes, owners, now)
    if connection.vendor == "postgresql":
        copy_rows(GpuUsage._meta.db_table, _USAGE_COLUMNS, values)
    else:
        bulk.insert_rows(GpuUsage, _USAGE_COLUMNS, list(values))
    return len(rows)
