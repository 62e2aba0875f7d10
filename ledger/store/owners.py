"""Who a window's pods are charged to: Workload, LocalQueue, ClusterQueue and Team.

A pod resolves through, in order: the workload of a stored Allocation of the same pod (the same
uid first, else the newest); for a pod no stored allocation links (one gone before any sync saw
it), its owner chain from kube-state-metrics (``kube_pod_owner``, ``kube_job_owner``, the pod
group label, the Volcano / KAI PodGroup annotation) to the Workload that owns that job or stands
for that PodGroup; the Kueue pod labels kube-state-metrics exposes
(ClusterQueue, then LocalQueue), the namespace's only live LocalQueue, and finally the
namespace's TeamNamespace. So a workload preempted and admitted again keeps the hours of its
first pods too.
A few set-based queries serve the whole window.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from core import bulk
from core.timewindows import Window
from fleet import constants as c
from fleet.ingest import PodOwner, WindowBatch
from fleet.models import Cluster
from quotas.allocations import AllocationKey, PodKey
from quotas.models import ClusterQueue, LocalQueue, TeamNamespace, Workload


@dataclass(frozen=True)
class Owner:
    """Who a pod's GPUs are charged to."""

    workload_id: int | None = None
    local_queue_id: int | None = None
    cluster_queue_id: int | None = None
    team_id: int | None = None


def resolve_owners(
    cluster: Cluster,
    batch: WindowBatch,
    existing: Mapping[AllocationKey, Mapping[str, Any]],
) -> dict[PodKey, Owner]:
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

    # Pods no stored allocation links (gone before any sync saw them): their owner chain.
    unlinked = {
        pod_key: owner
        for pod_key, owner in batch.owners.items()
        if pod_key in queue_names and pod_key not in by_workload
    }
    by_owner = _workloads_by_owner(cluster, batch, unlinked)

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

    owners: dict[PodKey, Owner] = {}
    for (namespace, pod), (cq_name, lq_name) in queue_names.items():
        workload = by_workload.get((namespace, pod)) or by_owner.get((namespace, pod))
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
        owners[(namespace, pod)] = Owner(workload_id, lq_id, cq_id, team_id)
    return owners


_WORKLOAD_FIELDS = (
    "id",
    "namespace",
    "name",
    "owner_kind",
    "owner_name",
    "owner_uid",
    "job_uid",
    "observed_at",
    "finished_at",
    "deleted_at",
    "local_queue_id",
    "cluster_queue_id",
    "cluster_queue__team_id",
)


def _workloads_by_owner(
    cluster: Cluster, batch: WindowBatch, owners: Mapping[PodKey, PodOwner]
) -> dict[PodKey, Mapping[str, Any]]:
    """The Workload of each pod through its owner chain, in the shape of a stored allocation.

    A pod joins the Workload whose ``job-uid`` (or controller uid) is the pod's own uid (a plain
    pod), else the Workload owned by the top of its chain (Job, a JobSet child Job's JobSet,
    RayCluster, ...), else the Workload named by its pod group (Kueue's, or the Volcano / KAI
    PodGroup the Workload was translated from, ``_pod_group_names``). Several Workloads of one
    owner (a Job recreated under the same name): the one alive in the window, else the newest.
    """
    if not owners:
        return {}
    uids = sorted({owner.uid for owner in owners.values() if owner.uid})
    names = sorted({owner.top_name for owner in owners.values() if owner.top_name})
    groups = sorted({owner.pod_group for owner in owners.values() if owner.pod_group})
    query = Q(job_uid__in=uids) | Q(owner_uid__in=uids) | Q(owner_name__in=names)
    query |= Q(name__in=_workload_names(groups))
    by_uid: dict[str, list[Mapping[str, Any]]] = {}
    by_owner: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    by_name: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in Workload.objects.filter(cluster=cluster).filter(query).values(*_WORKLOAD_FIELDS):
        for uid in {row["job_uid"], row["owner_uid"]} - {""}:
            by_uid.setdefault(uid, []).append(row)
        key = (row["namespace"], row["owner_kind"], row["owner_name"])
        by_owner.setdefault(key, []).append(row)
        for name in _pod_group_names(row["name"], row["owner_uid"]):
            by_name.setdefault((row["namespace"], name), []).append(row)
    window = batch.window
    found: dict[PodKey, Mapping[str, Any]] = {}
    for (namespace, pod), owner in owners.items():
        candidates = (
            [r for r in by_uid.get(owner.uid, []) if r["namespace"] == namespace]
            or by_owner.get((namespace, owner.top_kind, owner.top_name), [])
            or by_name.get((namespace, owner.pod_group), [])
        )
        if candidates:
            found[(namespace, pod)] = _as_allocation(_alive_in(candidates, window))
    return found


# A PodGroup a job controller made: ``<job>-<job uid>`` (Volcano), ``pg-<top owner>-<owner uid>``
# (KAI), the Workload named ``<job>`` / ``<top owner>`` with that owner uid (quotas/sources).
_UID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_JOB_POD_GROUP = re.compile(rf"(.+)-{_UID}")
_KAI_PREFIX = "pg-"


def _workload_names(groups: Iterable[str]) -> list[str]:
    """The Workload names pod groups may stand for: the group's own, and a job PodGroup's job
    (``by_name`` then checks the owner uid)."""
    names = set(groups)
    for group in list(names):
        matched = _JOB_POD_GROUP.fullmatch(group)
        if matched:
            names.add(matched[1])
            names.add(matched[1].removeprefix(_KAI_PREFIX))
    return sorted(names)


def _pod_group_names(name: str, owner_uid: str) -> list[str]:
    """The pod group names that stand for a Workload: its own name, and the names Volcano and
    KAI give the PodGroup of a job (quotas/sources/volcano.py, kai.py ``workload_name``)."""
    if not owner_uid:
        return [name]
    return [name, f"{name}-{owner_uid}", f"{_KAI_PREFIX}{name}-{owner_uid}"]


def _alive_in(rows: list[Mapping[str, Any]], window: Window) -> Mapping[str, Any]:
    def alive(row: Mapping[str, Any]) -> bool:
        ends = [t for t in (row["finished_at"], row["deleted_at"]) if t is not None]
        started = row["observed_at"] is None or row["observed_at"] < window.end
        return started and (not ends or min(ends) > window.start)

    return max(
        rows, key=lambda r: (alive(r), r["observed_at"] is not None, r["observed_at"] or 0, r["id"])
    )


def _as_allocation(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "workload_id": row["id"],
        "workload__local_queue_id": row["local_queue_id"],
        "workload__cluster_queue_id": row["cluster_queue_id"],
        "workload__cluster_queue__team_id": row["cluster_queue__team_id"],
    }
