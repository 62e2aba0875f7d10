"""Kueue Workloads and their state transitions.

Workloads are upserted on ``quotas_workload`` identity and read selectively, so a WATCH batch of
a hundred objects costs a hundred rows, not the cluster. Transitions are history Kueue does not
keep: the conditions of every sync are compared with what is stored and only new ones inserted;
a Workload that disappears gets a ``deleted`` transition. Preemptors are matched by UID, also
when the preemptor shows up in a later sync.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db.models import Exists, OuterRef, Q, Subquery

from core import bulk
from quotas import constants as c
from quotas.choices import TransitionKind
from quotas.ingest import TransitionRow
from quotas.models import Workload, WorkloadTransition
from quotas.store.writer import SnapshotWriter


def write_workloads(
    w: SnapshotWriter,
    queues: dict[str, int],
    local_queues: dict[tuple[str, str], tuple[int, int | None]],
) -> dict[tuple[str, str], int]:
    """Upsert the batch's Workloads; returns (namespace, name) -> id for them."""
    rows = {}
    for row in w.batch.workloads:
        local_queue_id, lq_queue_id = local_queues.get(
            (row.meta.namespace, row.queue_name), (None, None)
        )
        if row.cluster_queue_name:
            queue_id = queues.get(row.cluster_queue_name)
        else:
            queue_id = lq_queue_id
        rows[row.key] = {
            **w.meta_fields(row.meta),
            "scheduler": row.scheduler,
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
            "gpu_pods": Workload.count_gpu_pods(row.pod_sets),
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
    revived = _marked_deleted(w, rows)
    ids = w.sync(
        "Workload",
        Workload,
        ("namespace", "name"),
        rows,
        seen=w.seen("Workload"),
        selective=True,
    )
    forget_false_deletions(revived)
    record_deletions(w.marked_deleted["Workload"], w.now)
    return ids


def _marked_deleted(w: SnapshotWriter, rows: dict[tuple[str, str], dict]) -> dict[int, datetime]:
    """Workloads of the batch stored as deleted with the same UID: id -> when marked deleted.

    Such a Workload was never gone (a UID is never reused): its deletion was read from a LIST
    or WATCH that lied, so the upsert revives it and its ``deleted`` transition is false.
    """
    gone = Workload.objects.filter(cluster=w.cluster, deleted_at__isnull=False)
    found = bulk.read_keys(
        gone, ("namespace", "name"), list(rows), ("id", "uid", "deleted_at"), c.LOOKUP_BATCH_SIZE
    )
    return {
        row["id"]: row["deleted_at"]
        for key, row in found.items()
        if row["uid"] and row["uid"] == rows[key]["uid"]
    }


def forget_false_deletions(revived: dict[int, datetime]) -> None:
    """Remove the ``deleted`` transitions of Workloads that re-appeared with their own UID.

    One false deletion marks many Workloads at one moment: one DELETE per moment.
    """
    by_moment: dict[datetime, list[int]] = {}
    for pk, deleted_at in revived.items():
        by_moment.setdefault(deleted_at, []).append(pk)
    for deleted_at, ids in by_moment.items():
        false = WorkloadTransition.objects.filter(kind=TransitionKind.DELETED, at__gte=deleted_at)
        for query in bulk.filter_in(false, "workload_id", ids, c.LOOKUP_BATCH_SIZE):
            query.delete()


def write_transitions(w: SnapshotWriter, workloads: dict[tuple[str, str], int]) -> None:
    """Insert the transitions not stored yet; link preemptors found by UID."""
    scope = Q(workload__cluster=w.cluster)
    wanted: dict[tuple[int, str, datetime], TransitionRow] = {}
    for row in w.batch.transitions:
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
    preemptor = Workload.objects.filter(cluster=w.cluster, uid=OuterRef("preemptor_uid"))
    WorkloadTransition.objects.filter(scope, Exists(preemptor), preemptor__isnull=True).exclude(
        preemptor_uid=""
    ).update(preemptor=Subquery(preemptor.values("id")[:1]))
    w.result.transitions_added = len(objs)


def record_deletions(workload_ids: Sequence[int], at: datetime) -> None:
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
