"""Kueue's queue configuration: ResourceFlavors, Cohorts, Teams, ClusterQueues and their quota
rows, LocalQueues, team namespaces and WorkloadPriorityClasses.

Each kind is upserted on its named unique constraint and soft-deleted when missing from a
complete LIST (``SnapshotWriter.sync``). Quota rows are configuration, not history: a
ClusterQueue's rows are replaced by what its spec says now. Teams and team namespaces are only
ever added: an admin's choice is never overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core import bulk
from quotas import constants as c
from quotas.models import (
    ClusterQueue,
    ClusterQueueQuota,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Team,
    TeamNamespace,
    WorkloadPriorityClass,
)
from quotas.store.writer import SnapshotWriter
from quotas.writeback.observe import record_observed, record_observed_cohorts


def write_flavors(w: SnapshotWriter) -> None:
    rows = {
        (row.meta.name,): {
            **w.meta_fields(row.meta),
            "node_labels": row.node_labels,
            "node_taints": row.node_taints,
            "tolerations": row.tolerations,
            "topology_name": row.topology_name,
            "gpu_model": row.gpu_model,
        }
        for row in w.batch.flavors
    }
    w.sync("ResourceFlavor", ResourceFlavor, ("name",), rows, seen=w.seen("ResourceFlavor"))


def write_cohorts(w: SnapshotWriter) -> dict[str, int]:
    """Upsert Cohorts and their parents; returns name -> id."""
    explicit = [row for row in w.batch.cohorts if not row.implicit]
    implicit = [row for row in w.batch.cohorts if row.implicit]
    pools_before = dict(
        Cohort.objects.filter(cluster=w.cluster, implicit=False).values_list(
            "name", "resource_groups"
        )
    )
    rows = {(row.meta.name,): _cohort_fields(w, row) for row in explicit}
    # An implicit row describes a cohort only when the Cohort LIST is known to lack it;
    # otherwise it just makes sure the name exists.
    trusted = "Cohort" in w.complete
    implicit_rows = {(row.meta.name,): _cohort_fields(w, row) for row in implicit}
    seen = None
    if "Cohort" in w.deletable and "ClusterQueue" in w.deletable:
        seen = w.seen("Cohort", implicit_rows)
    if trusted:
        rows.update(implicit_rows)
    ids = w.sync("Cohort", Cohort, ("name",), rows, seen=seen)
    if not trusted and implicit_rows:
        extra = w.upsert(Cohort, ("name",), implicit_rows, keep_existing=True)
        ids.update(extra.ids)
        w.result.created["Cohort"] += extra.created
    names = {key[0]: pk for key, pk in ids.items()}
    parents = dict(Cohort.objects.filter(cluster=w.cluster).values_list("id", "parent_id"))
    changed = []
    for row in explicit + (implicit if trusted else []):
        pk = names[row.meta.name]
        parent_id = names.get(row.parent_name) if row.parent_name else None
        if parents.get(pk) != parent_id:
            changed.append(Cohort(pk=pk, parent_id=parent_id))
    if changed:
        Cohort.objects.bulk_update(changed, ["parent"], batch_size=c.WRITE_BATCH_SIZE)
    record_observed_cohorts(w, names, pools_before)
    return names


def _cohort_fields(w: SnapshotWriter, row: Any) -> dict[str, Any]:
    return {
        **w.meta_fields(row.meta),
        "parent_name": row.parent_name,
        "implicit": row.implicit,
        "fair_weight": row.fair_weight,
        "weighted_share": row.weighted_share,
        "resource_groups": row.resource_groups,
        "scheduler": row.scheduler,
    }


def write_teams(w: SnapshotWriter) -> dict[str, int]:
    """Create the teams the batch names; returns name -> id."""
    names = sorted({team.name for team in w.batch.teams})
    existing = dict(Team.objects.filter(name__in=names).values_list("name", "id"))
    missing = [Team(name=name) for name in names if name not in existing]
    if missing:
        Team.objects.bulk_create(missing, ignore_conflicts=True)
        existing = dict(Team.objects.filter(name__in=names).values_list("name", "id"))
    w.result.created["Team"] = len(missing)
    return existing


def write_cluster_queues(
    w: SnapshotWriter, cohorts: dict[str, int], teams: dict[str, int]
) -> dict[str, int]:
    """Upsert ClusterQueues; returns name -> id."""
    current = list(
        ClusterQueue.objects.filter(cluster=w.cluster).values_list("name", "team_id", "stop_policy")
    )
    current_teams = {name: team_id for name, team_id, _stop in current}
    w.stop_policies_before = {name: stop for name, _team, stop in current}
    rows = {}
    for row in w.batch.cluster_queues:
        team_id = teams.get(row.team_name)
        if not row.team_from_label and current_teams.get(row.meta.name) is not None:
            # Named after the queue only: keep a team an admin chose.
            team_id = current_teams[row.meta.name]
        rows[(row.meta.name,)] = {
            **w.meta_fields(row.meta),
            "cohort_id": cohorts.get(row.cohort_name) if row.cohort_name else None,
            "cohort_name": row.cohort_name,
            "scheduler": row.scheduler,
            "team_id": team_id,
            "namespace_selector": row.namespace_selector,
            "queueing_strategy": row.queueing_strategy,
            "stop_policy": row.stop_policy,
            "reclaim_within_cohort": row.reclaim_within_cohort,
            "within_cluster_queue": row.within_cluster_queue,
            "borrow_within_cohort": row.borrow_within_cohort,
            "borrow_within_cohort_max_priority": row.borrow_within_cohort_max_priority,
            "fair_weight": row.fair_weight,
            "weighted_share": row.weighted_share,
            "pending_workloads": row.pending_workloads,
            "reserving_workloads": row.reserving_workloads,
            "admitted_workloads": row.admitted_workloads,
            "active": row.active,
        }
    ids = w.sync("ClusterQueue", ClusterQueue, ("name",), rows, seen=w.seen("ClusterQueue"))
    return {key[0]: pk for key, pk in ids.items()}


def write_quotas(w: SnapshotWriter, queues: dict[str, int]) -> None:
    """Replace the quota rows of the batch's ClusterQueues with what their specs say."""
    wanted: dict[tuple[int, str, str], dict[str, Any]] = {}
    for row in w.batch.cluster_queues:
        queue_id = queues[row.meta.name]
        for quota in row.quotas:
            wanted[(queue_id, quota.flavor_name, quota.resource)] = {
                "position": quota.position,
                "nominal": quota.nominal,
                "borrowing_limit": quota.borrowing_limit,
                "lending_limit": quota.lending_limit,
            }
    queue_ids = sorted({queues[row.meta.name] for row in w.batch.cluster_queues})
    # values() is typed as the model's TypedDict; fields are looked up by name below.
    existing: dict[tuple[int, str, str], Mapping[str, Any]] = {
        (row["cluster_queue_id"], row["flavor_name"], row["resource"]): row
        for row in ClusterQueueQuota.objects.filter(cluster_queue_id__in=queue_ids).values()
    }
    to_write = []
    created = updated = 0
    for key, values in wanted.items():
        current = existing.get(key)
        if current is None:
            created += 1
        elif bulk.unchanged(ClusterQueueQuota, current, values):
            continue
        else:
            updated += 1
        queue_id, flavor, resource = key
        to_write.append(
            ClusterQueueQuota(
                cluster_queue_id=queue_id,
                **bulk.fit(ClusterQueueQuota, {"flavor_name": flavor, "resource": resource}),
                **values,
            )
        )
    if to_write:
        ClusterQueueQuota.objects.bulk_create(
            to_write,
            batch_size=c.WRITE_BATCH_SIZE,
            update_conflicts=True,
            unique_fields=["cluster_queue", "flavor_name", "resource"],
            update_fields=["position", "nominal", "borrowing_limit", "lending_limit"],
        )
    removed = [row["id"] for key, row in existing.items() if key not in wanted]
    deleted = 0
    for query in bulk.filter_in(
        ClusterQueueQuota.objects.all(), "pk", removed, c.LOOKUP_BATCH_SIZE
    ):
        deleted += query.delete()[0]
    record_observed(w, queues, existing)
    w.result.created["ClusterQueueQuota"] = created
    w.result.updated["ClusterQueueQuota"] = updated
    w.result.deleted["ClusterQueueQuota"] = deleted


def write_local_queues(
    w: SnapshotWriter, queues: dict[str, int]
) -> dict[tuple[str, str], tuple[int, int | None]]:
    """Upsert LocalQueues; return (namespace, name) -> (id, ClusterQueue id) for all of them."""
    rows = {
        (row.meta.namespace, row.meta.name): {
            **w.meta_fields(row.meta),
            "cluster_queue_id": queues.get(row.cluster_queue_name),
            "cluster_queue_name": row.cluster_queue_name,
            "pending_workloads": row.pending_workloads,
            "reserving_workloads": row.reserving_workloads,
            "admitted_workloads": row.admitted_workloads,
        }
        for row in w.batch.local_queues
    }
    w.sync(
        "LocalQueue",
        LocalQueue,
        ("namespace", "name"),
        rows,
        seen=w.seen("LocalQueue"),
        want_ids=False,
    )
    # Read back with the queue, so a Workload whose LocalQueue was not listed this time
    # (a failed LIST) still finds its ClusterQueue.
    return {
        (namespace, name): (pk, queue_id)
        for namespace, name, pk, queue_id in LocalQueue.objects.filter(
            cluster=w.cluster
        ).values_list("namespace", "name", "id", "cluster_queue_id")
    }


def write_team_namespaces(w: SnapshotWriter, teams: dict[str, int]) -> None:
    wanted = {ns: teams[team.name] for team in w.batch.teams for ns in team.namespaces}
    existing = set(
        TeamNamespace.objects.filter(cluster=w.cluster, namespace__in=sorted(wanted)).values_list(
            "namespace", flat=True
        )
    )
    # Never re-point a namespace: the first mapping (or an admin's) stays.
    missing = [
        TeamNamespace(cluster=w.cluster, namespace=ns, team_id=team_id)
        for ns, team_id in sorted(wanted.items())
        if ns not in existing
    ]
    if missing:
        TeamNamespace.objects.bulk_create(missing, ignore_conflicts=True)
    w.result.created["TeamNamespace"] = len(missing)


def write_priority_classes(w: SnapshotWriter) -> None:
    rows = {
        (row.meta.name,): {
            **w.meta_fields(row.meta),
            "value": row.value,
            "description": row.description,
        }
        for row in w.batch.priority_classes
    }
    w.sync(
        "WorkloadPriorityClass",
        WorkloadPriorityClass,
        ("name",),
        rows,
        seen=w.seen("WorkloadPriorityClass"),
    )
