"""The Allocation lifecycle: when a pod's hold on GPUs opens, is extended, ends and re-opens.

An Allocation is one pod holding GPUs, keyed ``(cluster, namespace, pod, pod_uid)``: a pod
recreated under the same name is a new allocation. Rows are history and are never deleted; the
GPUs a pod was seen on (``gpu_devices``) are added and never removed. Two sources write them,
both through this module, and observe different things, so each has its own rules:

**kube-state-metrics windows** (``ledger.store.write_window`` → :func:`write_window_allocations`
and :func:`close_missing_allocations`). A window ``(start, end]`` lists the Running pods with GPU
requests. Catch-up and backfill re-collect old windows, so no rule lets an older window undo
what a newer one saw.

* Open: a pod seen for the first time gets ``started_at = start``, ``last_seen_at = end``, and
  the workload its owner resolves to.
* Extend: seen again, ``last_seen_at`` moves to the newest window end seen and ``started_at`` to
  the earliest window start. Node, resource and GPUs follow the newest window seen (re-collecting
  that window replaces them: late data); an older window changes none of them. A workload once
  known is kept.
* End: an open allocation not seen in a window that starts at or after its ``last_seen_at``
  ends at that window's ``start``. A row the API server wrote (no ``last_seen_at``) ends the same
  way once it started before the window.
* Re-open: seen in a window that ends after ``ended_at``, ``ended_at`` is cleared; a
  re-collected window ending on or before it leaves the allocation ended.

**API server pods** (``quotas.store.write_snapshot`` → :func:`write_pod_allocations`; a WATCH
DELETE → :func:`end_pod_allocations`). A LIST or WATCH batch says what each pod is *now*.

* Open: a pod Running on a node is open, ``started_at`` = its startTime (else the stored one,
  else now). A pending pod holds nothing and is not written. A pod that ran and finished between
  two syncs (Succeeded/Failed on a node, with a startTime) is written already ended: it held GPUs.
* Extend: node, resource, GPUs and workload follow the pod. ``last_seen_at`` belongs to the
  windows and is not written here.
* End: a listed pod no longer Running ends at its finishedAt, else now; a stored end is kept. An
  open allocation whose pod is missing from a complete Pod LIST (or listed with another uid)
  ends now; a pod deleted under a WATCH ends at the event's time.
* Re-open: a pod Running again is open again.

Both sources end allocations through :func:`_end`, which touches open allocations only: a later
end never moves an earlier one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from core import bulk
from core.timewindows import Window
from fleet.ingest import PodAllocationRow
from fleet.inventory import read_nodes
from fleet.models import Cluster
from quotas import constants as c
from quotas.ingest import PodRow
from quotas.models import Allocation, Workload

logger = logging.getLogger(__name__)

PodKey = tuple[str, str]
AllocationKey = tuple[str, str, str]
KEY_FIELDS = ("namespace", "pod", "pod_uid")

# An allocation's own columns, as the window writer sends them and the readers read them.
LIFECYCLE_FIELDS = (
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
# What read_pod_allocations returns per row: the lifecycle fields and the workload's queues.
STORED_FIELDS = (
    "id",
    *LIFECYCLE_FIELDS,
    "workload__local_queue_id",
    "workload__cluster_queue_id",
    "workload__cluster_queue__team_id",
)


def read_pod_allocations(
    cluster: Cluster, pods: Sequence[PodKey]
) -> dict[AllocationKey, dict[str, Any]]:
    """Stored allocations of these pods (any uid, open or ended), with their workload's queues."""
    wanted = set(pods)
    names = sorted({pod for _, pod in pods})
    found: dict[AllocationKey, dict[str, Any]] = {}
    scope = Allocation.objects.filter(cluster=cluster)
    for queryset in bulk.filter_in(scope, "pod", names, c.LOOKUP_BATCH_SIZE):
        # fetch_rows + zip: QuerySet.values() costs several times more per row.
        for values in bulk.fetch_rows(queryset, *STORED_FIELDS):
            if (values[1], values[2]) in wanted:
                found[(values[1], values[2], values[3])] = dict(
                    zip(STORED_FIELDS, values, strict=True)
                )
    return found


def _end(ids: Sequence[int], at: datetime) -> int:
    """End the open allocations among ``ids`` at ``at``; returns how many were ended."""
    return bulk.update_in(
        Allocation.objects.filter(ended_at__isnull=True),
        "id",
        ids,
        c.LOOKUP_BATCH_SIZE,
        ended_at=at,
        updated_at=timezone.now(),
    )


# --- kube-state-metrics windows ------------------------------------------------------------------

_WINDOW_COLUMNS = ("cluster_id", *LIFECYCLE_FIELDS)


def write_window_allocations(
    cluster: Cluster,
    window: Window,
    observed: Sequence[PodAllocationRow],
    *,
    gpu_ids: Mapping[str, int],
    node_ids: Mapping[str, int],
    workload_ids: Mapping[PodKey, int | None],
    stored: Mapping[AllocationKey, Mapping[str, Any]],
) -> set[AllocationKey]:
    """Open or extend the allocations of the pods seen in ``window``; returns their keys.

    ``gpu_ids``: GPU key -> id; ``node_ids``: node name -> id; ``workload_ids``: the workload
    each pod resolves to; ``stored``: :func:`read_pod_allocations` of the window's pods. Only
    new and changed allocations are upserted, the others get ``last_seen_at`` in one UPDATE.
    """
    start, end = window.start, window.end
    cluster_id = cluster.pk
    upserts: list[tuple] = []
    touch: list[int] = []
    links: dict[AllocationKey, list[int]] = {}
    seen: set[AllocationKey] = set()
    for alloc in observed:
        key = (alloc.namespace, alloc.pod, alloc.pod_uid)
        if key in seen:
            continue
        seen.add(key)
        # Repeats are dropped by _link_gpus.
        links[key] = [gpu_ids[k] for k in alloc.gpu_keys if k in gpu_ids]
        row = stored.get(key)
        wanted = (node_ids.get(alloc.node_name), alloc.node_name, alloc.resource, alloc.gpus)
        if row is None:
            workload_id = workload_ids.get((alloc.namespace, alloc.pod))
            upserts.append((cluster_id, *key, *wanted, workload_id, start, None, end))
            continue
        last_seen = row["last_seen_at"]
        newest = last_seen is None or end >= last_seen
        started = min(row["started_at"], start)
        # Closed after this window (a re-collected old window): stays closed.
        ended = row["ended_at"] if row["ended_at"] and row["ended_at"] >= end else None
        workload_id = row["workload_id"] or workload_ids.get((alloc.namespace, alloc.pod))
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

    ids: dict[AllocationKey, int] = {key: row["id"] for key, row in stored.items()}
    if upserts:
        returned = bulk.insert_rows(
            Allocation,
            _WINDOW_COLUMNS,
            upserts,
            unique_fields=["cluster", *KEY_FIELDS],
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
            pods = sorted({(ns, pod) for ns, pod, _ in seen})
            for key, row in read_pod_allocations(cluster, pods).items():
                ids[key] = row["id"]
    bulk.update_in(Allocation.objects.all(), "id", touch, c.LOOKUP_BATCH_SIZE, last_seen_at=end)
    _link_gpus(links, ids, stored)
    return seen


def _link_gpus(
    links: Mapping[AllocationKey, list[int]],
    ids: Mapping[AllocationKey, int],
    stored: Mapping[AllocationKey, Any],
) -> None:
    """Add the GPUs each pod was seen on; links are history and are never removed."""
    through = Allocation.gpu_devices.through
    known: set[tuple[int, int]] = set()
    old_ids = sorted(ids[key] for key in links if key in stored and links[key])
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
    bulk.insert_rows(through, ("allocation_id", "gpu_id"), new, unique_fields=["allocation", "gpu"])


def close_missing_allocations(
    cluster: Cluster,
    window: Window,
    seen_keys: Iterable[AllocationKey],
) -> int:
    """End open allocations of ``cluster`` not seen in ``window``: ended_at = window.start.

    Only allocations last seen before this window are closed (or, for rows the API server
    created without ``last_seen_at``, started before it), so re-collecting an old window never
    ends a pod that a newer window saw. Returns how many were closed.
    """
    seen = set(seen_keys)
    open_rows = Allocation.objects.filter(
        Q(last_seen_at__lte=window.start)
        | Q(last_seen_at__isnull=True, started_at__lt=window.start),
        cluster=cluster,
        ended_at__isnull=True,
    ).values_list("id", *KEY_FIELDS)
    to_close = [pk for pk, namespace, pod, uid in open_rows if (namespace, pod, uid) not in seen]
    closed = _end(to_close, window.start)
    if closed:
        logger.info("cluster %s window %s: %d allocations ended", cluster.name, window.end, closed)
    return closed


# --- API server pods -----------------------------------------------------------------------------


@dataclass
class PodAllocationsWritten:
    """What :func:`write_pod_allocations` did; ``ended`` counts every allocation it ended."""

    created: int
    updated: int
    ended: int


def write_pod_allocations(
    cluster: Cluster,
    pods: Sequence[PodRow],
    now: datetime,
    *,
    node_ids: Mapping[str, int],
    workload_ids: Mapping[tuple[str, str], int],
    listed: set[tuple[str, ...]] | None,
) -> PodAllocationsWritten:
    """Open, update or end the allocations of the pods of an API server batch observed at ``now``.

    ``node_ids`` and ``workload_ids`` (by ``(namespace, name)``) are those the batch wrote; pods
    on other nodes or of other Workloads (a WATCH batch) are looked up. ``listed``: the
    ``(namespace, name)`` of every pod of a complete Pod LIST, whose missing pods end; None when
    the Pod LIST was not complete.
    """
    finished = {id(pod) for pod in pods if pod.phase in ("Succeeded", "Failed") and pod.node_name}
    # Open allocations, plus ended ones recent enough to belong to a finished pod listed now.
    window = Q(ended_at__isnull=True)
    starts = [pod.started_at for pod in pods if id(pod) in finished and pod.started_at]
    if starts:
        window |= Q(ended_at__gte=min(starts))
    scope = Q(cluster=cluster) & window
    if listed is not None:
        existing = {
            (row["namespace"], row["pod"], row["pod_uid"]): row
            for row in Allocation.objects.filter(scope).values(
                "id", *KEY_FIELDS, "started_at", "ended_at"
            )
        }
    else:
        existing = bulk.read_keys(
            Allocation.objects.filter(scope),
            KEY_FIELDS,
            [(pod.meta.namespace, pod.meta.name, pod.meta.uid) for pod in pods],
            ("id", "started_at", "ended_at"),
            c.LOOKUP_BATCH_SIZE,
        )
    node_ids = _with_missing_nodes(cluster, pods, node_ids)
    workload_ids = _with_missing_workloads(cluster, pods, workload_ids)
    rows: dict[tuple, dict[str, Any]] = {}
    ended = 0
    for pod in pods:
        key = (pod.meta.namespace, pod.meta.name, pod.meta.uid)
        current = existing.get(key)
        if pod.running:
            ended_at = None
        elif current is not None and current["ended_at"] is not None:
            ended_at = current["ended_at"]
        elif current is not None:
            ended_at = pod.finished_at or now
            ended += 1
        elif id(pod) in finished and pod.started_at is not None:
            # It ran and ended between two syncs: keep it, it held GPUs.
            ended_at = pod.finished_at or now
        else:
            continue  # pending, never ran: holds nothing
        started_at = pod.started_at or (current["started_at"] if current else now)
        rows[key] = {
            "node_id": node_ids.get(pod.node_name),
            "node_name": pod.node_name,
            "resource": pod.resource,
            "gpus": pod.gpus,
            "workload_id": workload_ids.get((pod.meta.namespace, pod.workload_name)),
            "started_at": started_at,
            "ended_at": ended_at,
        }
    written = bulk.upsert(
        Allocation,
        scope,
        KEY_FIELDS,
        rows,
        parent={"cluster": cluster},
        batch_size=c.WRITE_BATCH_SIZE,
        lookup_batch_size=c.LOOKUP_BATCH_SIZE,
        soft_delete=False,
        want_ids=False,
        selective=True,
    )
    if listed is not None:
        uids = {(pod.meta.namespace, pod.meta.name): pod.meta.uid for pod in pods}
        vanished = [
            row["id"]
            for key, row in existing.items()
            if row["ended_at"] is None
            and key not in rows
            and ((key[0], key[1]) not in listed or uids.get(key[:2], key[2]) != key[2])
        ]
        ended += _end(vanished, now)
    return PodAllocationsWritten(created=written.created, updated=written.updated, ended=ended)


def _with_missing_nodes(
    cluster: Cluster, pods: Sequence[PodRow], node_ids: Mapping[str, int]
) -> dict[str, int]:
    missing = sorted({pod.node_name for pod in pods if pod.node_name} - set(node_ids))
    found = {name: node.id for name, node in read_nodes(cluster, missing).items()}
    return {**found, **node_ids}


def _with_missing_workloads(
    cluster: Cluster, pods: Sequence[PodRow], workload_ids: Mapping[tuple[str, str], int]
) -> dict[tuple[str, str], int]:
    missing = {
        (pod.meta.namespace, pod.workload_name)
        for pod in pods
        if pod.workload_name and (pod.meta.namespace, pod.workload_name) not in workload_ids
    }
    found = bulk.read_keys(
        Workload.objects.filter(cluster=cluster),
        ("namespace", "name"),
        missing,
        ("id",),
        c.LOOKUP_BATCH_SIZE,
    )
    return {**{key: row["id"] for key, row in found.items()}, **workload_ids}


def end_pod_allocations(cluster: Cluster, keys: Iterable[tuple[str, ...]], at: datetime) -> int:
    """End the open allocations of pods a WATCH saw deleted, ``(namespace, name, uid)`` each."""
    open_rows = Allocation.objects.filter(cluster=cluster, ended_at__isnull=True)
    found = bulk.read_keys(open_rows, KEY_FIELDS, keys, ("id",), c.LOOKUP_BATCH_SIZE)
    return _end([row["id"] for row in found.values()], at)
