"""Writes a ``KueueBatch`` (quotas.ingest) into the database: one transaction, bulk upserts.

Every kind is upserted on its named unique constraint (STYLE rule 7) by ``core.bulk.upsert``
(``bulk_create(update_conflicts=True)``). Existing rows are read once per kind first, so only new
or changed rows are written: a re-run of the same snapshot writes nothing and ``WriteResult`` says
what changed. Foreign keys are resolved by name with one query per kind, never per row.

The big kinds (Workload, Node, Allocation, transitions) are read selectively, so a watch batch of
a hundred objects costs a hundred rows, not the cluster: only the batch's keys are read unless the
kind is checked for deletions. Rows are compared field by field, not by resourceVersion: a row
also depends on other objects (queues, priority classes, borrowing) and on this code's reading.
Transitions already stored are not re-inserted. Nodes are written by ``fleet.inventory`` and
pods' allocations by ``quotas.allocations``, which the DCGM windows share. ``mark_deleted`` marks
objects a WATCH saw deleted, by key.

History is never deleted: an object missing from a *complete* LIST gets ``deleted_at`` (a pod's
allocation gets ``ended_at``), and one that comes back has it cleared. Kinds outside ``complete``
(a failed or paginated-away LIST) are never marked deleted (DESIGN "Never read a failed or partial
LIST as everything was deleted"). Quota rows are configuration, not history: a ClusterQueue's quota
rows are replaced by what its spec says now.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import models, transaction
from django.db.models import Exists, OuterRef, Q, Subquery

from core import bulk
from core.timewindows import ensure_aware
from fleet.inventory import mark_nodes_deleted, sync_nodes
from fleet.models import Cluster
from quotas import constants as c
from quotas.allocations import end_pod_allocations, write_pod_allocations
from quotas.choices import TransitionKind
from quotas.ingest import KueueBatch, QueueSampleRow, TransitionRow
from quotas.models import (
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Team,
    TeamNamespace,
    Workload,
    WorkloadPriorityClass,
    WorkloadTransition,
)

logger = logging.getLogger(__name__)

# Kueue kinds ``mark_deleted`` handles, with their key fields (Nodes are fleet.inventory's).
_DELETABLE: dict[str, tuple[type[models.Model], tuple[str, ...]]] = {
    "ResourceFlavor": (ResourceFlavor, ("name",)),
    "Cohort": (Cohort, ("name",)),
    "ClusterQueue": (ClusterQueue, ("name",)),
    "LocalQueue": (LocalQueue, ("namespace", "name")),
    "WorkloadPriorityClass": (WorkloadPriorityClass, ("name",)),
    "Workload": (Workload, ("namespace", "name")),
}


@dataclass
class WriteResult:
    created: dict[str, int] = field(default_factory=dict)
    updated: dict[str, int] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)
    transitions_added: int = 0

    @property
    def rows_written(self) -> int:
        return (
            sum(self.created.values())
            + sum(self.updated.values())
            + sum(self.deleted.values())
            + self.transitions_added
        )


class _Writer:
    def __init__(self, cluster: Cluster, batch: KueueBatch, complete: frozenset[str]) -> None:
        self.cluster = cluster
        self.batch = batch
        self.now = batch.observed_at
        self.complete = frozenset(complete)
        # A kind with an object we could not identify is not trusted for deletions this round.
        self.deletable = self.complete - frozenset(batch.unidentified)
        self.result = WriteResult()
        self.marked_deleted: dict[str, list[int]] = {}

    # -- generic upsert -------------------------------------------------------------------------

    def sync(
        self,
        label: str,
        model: type[models.Model],
        scope: Q,
        key_fields: tuple[str, ...],
        rows: dict[tuple, dict[str, Any]],
        **options: Any,
    ) -> dict[tuple, int]:
        """Upsert ``rows`` (key -> field values) with ``core.bulk.upsert``; returns key -> id.

        ``options`` are ``upsert``'s: ``seen`` (only from :meth:`seen`, for a complete LIST),
        ``keep_existing``, ``soft_delete``, ``want_ids``, ``selective``, ``stamp``. What it did
        is recorded under ``label``.
        """
        written = bulk.upsert(
            model,
            scope,
            key_fields,
            rows,
            parent={"cluster": self.cluster},
            batch_size=c.WRITE_BATCH_SIZE,
            lookup_batch_size=c.LOOKUP_BATCH_SIZE,
            deleted_at=self.now,
            **options,
        )
        self.record(label, written)
        return written.ids

    def record(self, label: str, written: bulk.Upserted) -> None:
        self.marked_deleted[label] = written.deleted
        self.result.created[label] = written.created
        self.result.updated[label] = written.updated
        self.result.deleted[label] = len(written.deleted)

    def seen(self, kind: str, extra: Iterable[tuple] = ()) -> set[tuple] | None:
        if kind not in self.deletable:
            return None
        return set(self.batch.seen.get(kind, set())) | set(extra)

    def meta_fields(self, meta: Any) -> dict[str, Any]:
        return {
            "uid": meta.uid,
            "resource_version": meta.resource_version,
            "labels": meta.labels,
            "observed_at": meta.created_at,
            "deleted_at": None,
        }

    # -- kinds ----------------------------------------------------------------------------------

    def flavors(self) -> None:
        rows = {
            (row.meta.name,): {
                **self.meta_fields(row.meta),
                "node_labels": row.node_labels,
                "node_taints": row.node_taints,
                "tolerations": row.tolerations,
                "topology_name": row.topology_name,
                "gpu_model": row.gpu_model,
            }
            for row in self.batch.flavors
        }
        self.sync(
            "ResourceFlavor",
            ResourceFlavor,
            Q(cluster=self.cluster),
            ("name",),
            rows,
            seen=self.seen("ResourceFlavor"),
        )

    def cohorts(self) -> dict[str, int]:
        explicit = [row for row in self.batch.cohorts if not row.implicit]
        implicit = [row for row in self.batch.cohorts if row.implicit]
        scope = Q(cluster=self.cluster)
        rows = {(row.meta.name,): self.cohort_fields(row) for row in explicit}
        # An implicit row describes a cohort only when the Cohort LIST is known to lack it;
        # otherwise it just makes sure the name exists.
        trusted = "Cohort" in self.complete
        implicit_rows = {(row.meta.name,): self.cohort_fields(row) for row in implicit}
        seen = None
        if "Cohort" in self.deletable and "ClusterQueue" in self.deletable:
            seen = self.seen("Cohort", implicit_rows)
        if trusted:
            rows.update(implicit_rows)
        ids = self.sync("Cohort", Cohort, scope, ("name",), rows, seen=seen)
        if not trusted and implicit_rows:
            extra = self.sync(
                "Cohort (implicit)", Cohort, scope, ("name",), implicit_rows, keep_existing=True
            )
            ids.update(extra)
            self.result.created["Cohort"] += self.result.created.pop("Cohort (implicit)")
            self.result.updated.pop("Cohort (implicit)")
            self.result.deleted.pop("Cohort (implicit)")
        names = {key[0]: pk for key, pk in ids.items()}
        parents = dict(Cohort.objects.filter(scope).values_list("id", "parent_id"))
        changed = []
        for row in explicit + (implicit if trusted else []):
            pk = names[row.meta.name]
            parent_id = names.get(row.parent_name) if row.parent_name else None
            if parents.get(pk) != parent_id:
                changed.append(Cohort(pk=pk, parent_id=parent_id))
        if changed:
            Cohort.objects.bulk_update(changed, ["parent"], batch_size=c.WRITE_BATCH_SIZE)
        return names

    def cohort_fields(self, row: Any) -> dict[str, Any]:
        return {
            **self.meta_fields(row.meta),
            "parent_name": row.parent_name,
            "implicit": row.implicit,
            "fair_weight": row.fair_weight,
            "weighted_share": row.weighted_share,
            "resource_groups": row.resource_groups,
        }

    def teams(self) -> dict[str, int]:
        names = sorted({team.name for team in self.batch.teams})
        existing = dict(Team.objects.filter(name__in=names).values_list("name", "id"))
        missing = [Team(name=name) for name in names if name not in existing]
        if missing:
            Team.objects.bulk_create(missing, ignore_conflicts=True)
            existing = dict(Team.objects.filter(name__in=names).values_list("name", "id"))
        self.result.created["Team"] = len(missing)
        return existing

    def cluster_queues(self, cohorts: dict[str, int], teams: dict[str, int]) -> dict[str, int]:
        current_teams = dict(
            ClusterQueue.objects.filter(cluster=self.cluster).values_list("name", "team_id")
        )
        rows = {}
        for row in self.batch.cluster_queues:
            team_id = teams.get(row.team_name)
            if not row.team_from_label and current_teams.get(row.meta.name) is not None:
                # Named after the queue only: keep a team an admin chose.
                team_id = current_teams[row.meta.name]
            rows[(row.meta.name,)] = {
                **self.meta_fields(row.meta),
                "cohort_id": cohorts.get(row.cohort_name) if row.cohort_name else None,
                "cohort_name": row.cohort_name,
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
        ids = self.sync(
            "ClusterQueue",
            ClusterQueue,
            Q(cluster=self.cluster),
            ("name",),
            rows,
            seen=self.seen("ClusterQueue"),
        )
        return {key[0]: pk for key, pk in ids.items()}

    def quotas(self, queues: dict[str, int]) -> None:
        wanted: dict[tuple[int, str, str], dict[str, Any]] = {}
        for row in self.batch.cluster_queues:
            queue_id = queues[row.meta.name]
            for quota in row.quotas:
                wanted[(queue_id, quota.flavor_name, quota.resource)] = {
                    "position": quota.position,
                    "nominal": quota.nominal,
                    "borrowing_limit": quota.borrowing_limit,
                    "lending_limit": quota.lending_limit,
                }
        queue_ids = sorted({queues[row.meta.name] for row in self.batch.cluster_queues})
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
        self.result.created["ClusterQueueQuota"] = created
        self.result.updated["ClusterQueueQuota"] = updated
        self.result.deleted["ClusterQueueQuota"] = deleted

    def local_queues(self, queues: dict[str, int]) -> dict[tuple[str, str], tuple[int, int | None]]:
        """Upsert LocalQueues; return (namespace, name) -> (id, ClusterQueue id) for all of them."""
        rows = {
            (row.meta.namespace, row.meta.name): {
                **self.meta_fields(row.meta),
                "cluster_queue_id": queues.get(row.cluster_queue_name),
                "cluster_queue_name": row.cluster_queue_name,
                "pending_workloads": row.pending_workloads,
                "reserving_workloads": row.reserving_workloads,
                "admitted_workloads": row.admitted_workloads,
            }
            for row in self.batch.local_queues
        }
        self.sync(
            "LocalQueue",
            LocalQueue,
            Q(cluster=self.cluster),
            ("namespace", "name"),
            rows,
            seen=self.seen("LocalQueue"),
            want_ids=False,
        )
        # Read back with the queue, so a Workload whose LocalQueue was not listed this time
        # (a failed LIST) still finds its ClusterQueue.
        return {
            (namespace, name): (pk, queue_id)
            for namespace, name, pk, queue_id in LocalQueue.objects.filter(
                cluster=self.cluster
            ).values_list("namespace", "name", "id", "cluster_queue_id")
        }

    def team_namespaces(self, teams: dict[str, int]) -> None:
        wanted = {ns: teams[team.name] for team in self.batch.teams for ns in team.namespaces}
        existing = set(
            TeamNamespace.objects.filter(
                cluster=self.cluster, namespace__in=sorted(wanted)
            ).values_list("namespace", flat=True)
        )
        # Never re-point a namespace: the first mapping (or an admin's) stays.
        missing = [
            TeamNamespace(cluster=self.cluster, namespace=ns, team_id=team_id)
            for ns, team_id in sorted(wanted.items())
            if ns not in existing
        ]
        if missing:
            TeamNamespace.objects.bulk_create(missing, ignore_conflicts=True)
        self.result.created["TeamNamespace"] = len(missing)

    def priority_classes(self) -> None:
        rows = {
            (row.meta.name,): {
                **self.meta_fields(row.meta),
                "value": row.value,
                "description": row.description,
            }
            for row in self.batch.priority_classes
        }
        self.sync(
            "WorkloadPriorityClass",
            WorkloadPriorityClass,
            Q(cluster=self.cluster),
            ("name",),
            rows,
            seen=self.seen("WorkloadPriorityClass"),
        )

    def workloads(
        self, queues: dict[str, int], local_queues: dict[tuple[str, str], tuple[int, int | None]]
    ) -> dict[tuple[str, str], int]:
        rows = {}
        for row in self.batch.workloads:
            local_queue_id, lq_queue_id = local_queues.get(
                (row.meta.namespace, row.queue_name), (None, None)
            )
            if row.cluster_queue_name:
                queue_id = queues.get(row.cluster_queue_name)
            else:
                queue_id = lq_queue_id
            rows[row.key] = {
                **self.meta_fields(row.meta),
                "owner_kind": row.owner_kind,
                "owner_name": row.owner_name,
                "owner_uid": row.owner_uid,
                "job_uid": row.job_uid,
                "queue_name": row.queue_name,
                "local_queue_id": local_queue_id,
                "cluster_queue_id": queue_id,
                "priority": row.priority,
                "priority_class_name": row.priority_class_name,
                "active": row.active,
                "pod_sets": row.pod_sets,
                "requested_gpus": row.requested_gpus,
                "admitted_gpus": row.admitted_gpus,
                "flavors": row.flavors,
                "state": str(row.state),
                "state_reason": row.state_reason,
                "state_message": row.state_message,
                "quota_reserved_at": row.quota_reserved_at,
                "admitted_at": row.admitted_at,
                "finished_at": row.finished_at,
                "accumulated_execution_seconds": row.accumulated_execution_seconds,
                "requeue_count": row.requeue_count,
                "requeue_at": row.requeue_at,
                "borrowing": row.borrowing,
                "borrowed_gpus": row.borrowed_gpus,
            }
        scope = Q(cluster=self.cluster)
        ids = self.sync(
            "Workload",
            Workload,
            scope,
            ("namespace", "name"),
            rows,
            seen=self.seen("Workload"),
            selective=True,
        )
        _record_deletions(self.marked_deleted["Workload"], self.now)
        return ids

    def transitions(self, workloads: dict[tuple[str, str], int]) -> None:
        scope = Q(workload__cluster=self.cluster)
        wanted: dict[tuple[int, str, datetime], TransitionRow] = {}
        for row in self.batch.transitions:
            workload_id = workloads.get((row.workload_namespace, row.workload_name))
            if workload_id is not None:
                wanted.setdefault((workload_id, str(row.kind), row.at), row)
        # Kueue keeps the conditions, so every sync sees the same transitions again: insert
        # only those not stored yet.
        workload_ids = sorted({key[0] for key in wanted})
        stored: set[tuple[int, str, datetime]] = set()
        if len(workload_ids) > c.LOOKUP_BATCH_SIZE:
            stored.update(
                WorkloadTransition.objects.filter(scope).values_list("workload_id", "kind", "at")
            )
        else:
            for query in bulk.filter_in(
                WorkloadTransition.objects.all(), "workload_id", workload_ids, c.LOOKUP_BATCH_SIZE
            ):
                stored.update(query.values_list("workload_id", "kind", "at"))
        objs = [
            WorkloadTransition(
                workload_id=workload_id,
                **bulk.fit(
                    WorkloadTransition,
                    {
                        "kind": kind,
                        "reason": row.reason,
                        "message": row.message,
                        "preemptor_uid": row.preemptor_uid,
                        "preemptor_job_uid": row.preemptor_job_uid,
                        "preemptor_path": row.preemptor_path,
                    },
                ),
                at=at,
                requeue_at=row.requeue_at,
            )
            for (workload_id, kind, at), row in wanted.items()
            if (workload_id, kind, at) not in stored
        ]
        if objs:
            # ignore_conflicts only guards against a writer outside the cluster's claim.
            WorkloadTransition.objects.bulk_create(
                objs, batch_size=c.WRITE_BATCH_SIZE, ignore_conflicts=True
            )
        # Preemptors are matched by UID, also when the preemptor shows up in a later sync.
        preemptor = Workload.objects.filter(cluster=self.cluster, uid=OuterRef("preemptor_uid"))
        WorkloadTransition.objects.filter(scope, Exists(preemptor), preemptor__isnull=True).exclude(
            preemptor_uid=""
        ).update(preemptor=Subquery(preemptor.values("id")[:1]))
        self.result.transitions_added = len(objs)

    def nodes(self) -> dict[str, int]:
        listed = {
            row.meta.name: {
                "gpu_product": row.gpu_product,
                "node_pool": row.node_pool,
                "flavor": row.flavor,
                "gpu_capacity": row.gpu_capacity,
                "gpu_allocatable": row.gpu_allocatable,
                "mig_allocatable": row.mig_allocatable,
                "labels": row.meta.labels,
            }
            for row in self.batch.nodes
        }
        written = sync_nodes(self.cluster, listed, seen=self.seen("Node"), now=self.now)
        self.record("Node", written)
        return {key[0]: pk for key, pk in written.ids.items()}

    def allocations(self, nodes: dict[str, int], workloads: dict[tuple[str, str], int]) -> None:
        """Pods -> Allocation rows (``quotas.allocations``)."""
        listed = self.batch.seen.get("Pod", set()) if "Pod" in self.deletable else None
        written = write_pod_allocations(
            self.cluster,
            self.batch.pods,
            self.now,
            node_ids=nodes,
            workload_ids=workloads,
            listed=listed,
        )
        self.result.created["Allocation"] = written.created
        self.result.updated["Allocation"] = written.updated
        self.result.deleted["Allocation"] = written.ended


def _record_deletions(workload_ids: Sequence[int], at: datetime) -> None:
    """Kueue keeps no history: record when a Workload disappeared."""
    if workload_ids:
        WorkloadTransition.objects.bulk_create(
            [
                WorkloadTransition(workload_id=pk, kind=TransitionKind.DELETED, at=at)
                for pk in workload_ids
            ],
            batch_size=c.WRITE_BATCH_SIZE,
            ignore_conflicts=True,
        )


def mark_deleted(cluster: Cluster, kind: str, keys: Iterable[tuple[str, ...]], at: datetime) -> int:
    """Mark the objects of ``kind`` a WATCH saw deleted; returns the rows marked.

    ``keys`` are ingest's identities: ``(namespace, name)`` for namespaced kinds, ``(name,)``
    for the others, ``(namespace, name, uid)`` for a Pod (its open allocation is ended,
    ``quotas.allocations``). A Node is ``fleet.inventory``'s. Rows already marked are left
    alone; a deleted Workload gets its ``deleted`` transition. Call it inside the transaction of
    the batch's ``write_snapshot``.
    """
    at = ensure_aware(at)
    keys = list(keys)
    if kind == "Pod":
        return end_pod_allocations(cluster, keys, at)
    if kind == "Node":
        return mark_nodes_deleted(cluster, [key[0] for key in keys], at)
    model, key_fields = _DELETABLE[kind]
    present = model._default_manager.filter(cluster=cluster, deleted_at__isnull=True)
    found = bulk.read_keys(present, key_fields, keys, ("id",), c.LOOKUP_BATCH_SIZE)
    ids = [row["id"] for row in found.values()]
    bulk.update_in(model._default_manager.all(), "pk", ids, c.LOOKUP_BATCH_SIZE, deleted_at=at)
    if kind == "Workload":
        _record_deletions(ids, at)
    return len(ids)


def write_snapshot(cluster: Cluster, batch: KueueBatch, complete: frozenset[str]) -> WriteResult:
    """Write every row of ``batch`` for ``cluster`` in one transaction (module docstring)."""
    writer = _Writer(cluster, batch, complete)
    with transaction.atomic():
        writer.flavors()
        cohorts = writer.cohorts()
        teams = writer.teams()
        queues = writer.cluster_queues(cohorts, teams)
        writer.quotas(queues)
        local_queues = writer.local_queues(queues)
        writer.team_namespaces(teams)
        writer.priority_classes()
        workloads = writer.workloads(queues, local_queues)
        writer.transitions(workloads)
        nodes = writer.nodes()
        writer.allocations(nodes, workloads)
    result = writer.result
    logger.info(
        "Kueue sync %s: created %s, updated %s, deleted %s, %d transitions",
        cluster.name,
        {k: v for k, v in result.created.items() if v},
        {k: v for k, v in result.updated.items() if v},
        {k: v for k, v in result.deleted.items() if v},
        result.transitions_added,
    )
    return result


def write_queue_samples(
    cluster: Cluster,
    rows: list[QueueSampleRow],
    sampled_at: datetime,
    window_seconds: int,
) -> int:
    """Upsert one ClusterQueueSample per row for the window ending at ``sampled_at``.

    Rows whose ClusterQueue is not in the database are skipped (logged). Returns rows written.
    """
    sampled_at = ensure_aware(sampled_at)
    queues = dict(ClusterQueue.objects.filter(cluster=cluster).values_list("name", "id"))
    objs = []
    for row in rows:
        queue_id = queues.get(row.cluster_queue_name)
        if queue_id is None:
            logger.warning(
                "Queue sample for unknown ClusterQueue %s on %s skipped",
                row.cluster_queue_name,
                cluster.name,
            )
            continue
        objs.append(
            ClusterQueueSample(
                cluster_queue_id=queue_id,
                flavor_name=row.flavor_name,
                resource=row.resource,
                sampled_at=sampled_at,
                window_seconds=window_seconds,
                total=row.total,
                reserved=row.reserved,
                borrowed=row.borrowed,
                lent=row.lent,
                nominal=row.nominal,
                borrowing_limit=row.borrowing_limit,
                lending_limit=row.lending_limit,
                pending_demand=row.pending_demand,
                pending_workloads=row.pending_workloads,
                admitted_workloads=row.admitted_workloads,
            )
        )
    if objs:
        ClusterQueueSample.objects.bulk_create(
            objs,
            batch_size=c.WRITE_BATCH_SIZE,
            update_conflicts=True,
            unique_fields=["cluster_queue", "flavor_name", "resource", "sampled_at"],
            update_fields=[
                "window_seconds",
                "total",
                "reserved",
                "borrowed",
                "lent",
                "nominal",
                "borrowing_limit",
                "lending_limit",
                "pending_demand",
                "pending_workloads",
                "admitted_workloads",
            ],
        )
    return len(objs)
