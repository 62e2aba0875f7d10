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
* Allocations: upserted per pod; ``started_at`` is the earliest window start seen, ``ended_at``
  is set by :func:`close_missing_allocations` for pods no longer seen.

The bulk engine (COPY, ``= ANY`` lookups) is ``core.bulk``; ``copy_rows`` is re-exported here for
the callers that took it from this module.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from core import bulk
from core.bulk import copy_rows
from core.timewindows import Window
from fleet import constants as c
from fleet.ingest import PodAllocationRow, UsageRow, WindowBatch
from fleet.inventory import NodeInfo, ensure_nodes, upsert_gpus
from fleet.models import Cluster
from ledger.models import GpuUsage
from quotas.models import Allocation, ClusterQueue, LocalQueue, TeamNamespace

logger = logging.getLogger(__name__)

PodKey = tuple[str, str]
AllocationKey = tuple[str, str, str]


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


_NO_OWNER = _Owner()


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
        existing = _existing_allocations(cluster, pods)
        owners = _resolve_owners(cluster, batch, existing)
        usage_rows = _replace_usage(
            cluster, batch.usage, window, gpus.ids, gpus.models, nodes, owners, now
        )
        seen = _upsert_allocations(
            cluster, batch.allocations, window, gpus.ids, node_ids, owners, existing
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


_ALLOCATION_READ = (
    "id",
    "namespace",
    "pod",
    "pod_uid",
    "node_id",
    "node_name",
    "resource",
    "gpus",
    "workload_id",
    "started_at",
    "ended_at",
    "last_seen_at",
    "workload__local_queue_id",
    "workload__cluster_queue_id",
    "workload__cluster_queue__team_id",
)


def _existing_allocations(cluster: Cluster, pods: Sequence[PodKey]) -> dict[AllocationKey, dict]:
    """Stored allocations of these pod names (any uid), with their workload's queues."""
    wanted = set(pods)
    names = sorted({pod for _, pod in pods})
    found: dict[AllocationKey, dict] = {}
    queryset = Allocation.objects.filter(cluster=cluster)
    for batch in bulk.filter_in(queryset, "pod", names, c.LOOKUP_BATCH_SIZE):
        # values_list + zip: QuerySet.values() costs several times more per row.
        for values in bulk.fetch_rows(batch, *_ALLOCATION_READ):
            if (values[1], values[2]) in wanted:
                found[(values[1], values[2], values[3])] = dict(
                    zip(_ALLOCATION_READ, values, strict=True)
                )
    return found


def _resolve_owners(
    cluster: Cluster,
    batch: WindowBatch,
    existing: dict[AllocationKey, dict],
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
    by_workload: dict[PodKey, dict] = {}
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


# --- Allocations ---------------------------------------------------------------------------------


_ALLOCATION_COLUMNS = (
    "cluster_id",
    "namespace",
    "pod",
    "pod_uid",
    "node_id",
    "node_name",
    "resource",
    "gpus",
    "workload_id",
    "started_at",
    "ended_at",
    "last_seen_at",
)
# What a window says about a pod, compared as one tuple against the stored row.


def _upsert_allocations(
    cluster: Cluster,
    allocations: list[PodAllocationRow],
    window: Window,
    gpu_ids: dict[str, int],
    node_ids: dict[str, int],
    owners: dict[PodKey, _Owner],
    existing: dict[AllocationKey, dict],
) -> set[AllocationKey]:
    """Upsert the window's allocations and their GPU links; returns the keys seen.

    Only new allocations and those that changed are upserted; the others get ``last_seen_at``
    in one UPDATE.
    """
    start, end = window.start, window.end
    cluster_id = cluster.pk
    upserts: list[tuple] = []
    touch: list[int] = []
    links: dict[AllocationKey, list[int]] = {}
    seen: set[AllocationKey] = set()
    for alloc in allocations:
        key = (alloc.namespace, alloc.pod, alloc.pod_uid)
        if key in seen:
            continue
        seen.add(key)
        # Repeats are dropped by _link_gpus.
        links[key] = [gpu_ids[k] for k in alloc.gpu_keys if k in gpu_ids]
        row = existing.get(key)
        wanted = (node_ids.get(alloc.node_name), alloc.node_name, alloc.resource, alloc.gpus)
        if row is None:
            owner = owners.get((alloc.namespace, alloc.pod), _NO_OWNER)
            upserts.append((cluster_id, *key, *wanted, owner.workload_id, start, None, end))
            continue
        last_seen = row["last_seen_at"]
        newest = last_seen is None or end >= last_seen
        started = min(row["started_at"], start)
        # Closed after this window (a re-collected old window): stays closed.
        ended = row["ended_at"] if row["ended_at"] and row["ended_at"] >= end else None
        workload_id = (
            row["workload_id"] or owners.get((alloc.namespace, alloc.pod), _NO_OWNER).workload_id
        )
        current = (row["node_id"], row["node_name"], row["resource"], row["gpus"])
        if not newest:
            wanted = current
        unchanged = (
            wanted == current
            and started == row["started_at"]
            and ended == row["ended_at"]
            and workload_id == row["workload_id"]
        )
        if unchanged:
            if newest and last_seen != end:
                touch.append(row["id"])
            continue
        upserts.append(
            (
                cluster_id,
                *key,
                *wanted,
                workload_id,
                started,
                ended,
                end if newest else last_seen,
            )
        )

    ids: dict[AllocationKey, int] = {key: row["id"] for key, row in existing.items()}
    if upserts:
        returned = bulk.insert_rows(
            Allocation,
            _ALLOCATION_COLUMNS,
            upserts,
            unique_fields=["cluster", "namespace", "pod", "pod_uid"],
            returning=True,
            update_fields=[
                "node",
                "node_name",
                "resource",
                "gpus",
                "workload",
                "started_at",
                "ended_at",
                "last_seen_at",
                "updated_at",
            ],
        )
        missing_ids = False
        for upsert in upserts:
            allocation_id = returned.get(upsert[:4])
            if allocation_id is None:
                missing_ids = True
            else:
                ids[upsert[1:4]] = allocation_id
        if missing_ids:
            for key, stored in _existing_allocations(
                cluster, sorted({(ns, pod) for ns, pod, _ in seen})
            ).items():
                ids[key] = stored["id"]
    bulk.update_in(Allocation.objects.all(), "id", touch, c.LOOKUP_BATCH_SIZE, last_seen_at=end)
    _link_gpus(links, ids, existing)
    return seen


def _link_gpus(
    links: dict[AllocationKey, list[int]],
    ids: dict[AllocationKey, int],
    existing: dict[AllocationKey, dict],
) -> None:
    """Add the GPUs each pod was seen on; links are history and are never removed."""
    through = Allocation.gpu_devices.through
    known: set[tuple[int, int]] = set()
    old_ids = sorted(ids[key] for key in links if key in existing and links[key])
    for queryset in bulk.filter_in(
        through.objects.all(), "allocation_id", old_ids, c.LOOKUP_BATCH_SIZE
    ):
        known.update(bulk.fetch_rows(queryset, "allocation_id", "gpu_id"))
    # dict.fromkeys: without repeats, in a stable order.
    new = list(
        dict.fromkeys(
            (ids[key], gpu_id)
            for key, gpu_ids in links.items()
            if key in ids
            for gpu_id in gpu_ids
            if (ids[key], gpu_id) not in known
        )
    )
    bulk.insert_rows(
        through,
        ("allocation_id", "gpu_id"),
        new,
        unique_fields=["allocation", "gpu"],
    )


def close_missing_allocations(
    cluster: Cluster,
    window: Window,
    seen_keys: Iterable[AllocationKey],
) -> int:
    """End open allocations of ``cluster`` not seen in ``window``: ended_at = window.start.

    Only allocations last seen before this window are closed (or, for rows another source
    created without ``last_seen_at``, started before it), so re-collecting an old window never
    ends a pod that a newer window saw. Returns how many were closed.
    """
    seen = set(seen_keys)
    open_rows = Allocation.objects.filter(
        Q(last_seen_at__lte=window.start)
        | Q(last_seen_at__isnull=True, started_at__lt=window.start),
        cluster=cluster,
        ended_at__isnull=True,
    ).values_list("id", "namespace", "pod", "pod_uid")
    to_close = [pk for pk, namespace, pod, uid in open_rows if (namespace, pod, uid) not in seen]
    closed = bulk.update_in(
        Allocation.objects.filter(ended_at__isnull=True),
        "id",
        to_close,
        c.LOOKUP_BATCH_SIZE,
        ended_at=window.start,
        updated_at=timezone.now(),
    )
    if closed:
        logger.info("cluster %s window %s: %d allocations ended", cluster.name, window.end, closed)
    return closed
