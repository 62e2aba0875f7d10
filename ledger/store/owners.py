"""Who a window's pods are charged to: Workload, LocalQueue, ClusterQueue and Team.

A pod resolves through, in order: the workload of a stored Allocation of the same pod (the same
uid first, else the newest), the Kueue pod labels kube-state-metrics exposes (ClusterQueue, then
LocalQueue), the namespace's only live LocalQueue, and finally the namespace's TeamNamespace.
A few set-based queries serve the whole window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core import bulk
from fleet import constants as c
from fleet.ingest import WindowBatch
from fleet.models import Cluster
from quotas.allocations import AllocationKey, PodKey
from quotas.models import ClusterQueue, LocalQueue, TeamNamespace


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
        owners[(namespace, pod)] = Owner(workload_id, lq_id, cq_id, team_id)
    return owners
