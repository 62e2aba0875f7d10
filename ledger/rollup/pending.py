"""Pending GPU-hours of one cluster-hour from the Workloads' waiting intervals, at every scope.

``pending_gpu_hours`` = GPUs a Workload requests × the part of the hour it waited for quota
(``quotas.waiting``: its creation and condition history), so a backfilled hour is as right as a
live one and a Workload that only waited still has a row. The same GPU-hours go to its
workload, namespace, LocalQueue, ClusterQueue, cohort (``(no cohort)`` for a standalone queue),
team (the queue's, else the namespace's), flavor and fleet rows: every scope sums to the fleet.

A pending Workload has no flavor yet; its GPU-hours go under the flavor it waits for
(``waited_flavor``): the GPU flavor its Kueue pending message names (``quotas.now.waiting_flavor``,
as the overview's pending demand and ``quotas.pending`` read it), else the GPU flavor it was
admitted to after the wait, else the first GPU flavor of its ClusterQueue (where Kueue tries
first). A wait
still open is counted up to ``horizon`` (the last Kueue sync: what the database knows), never
past the hour's end.

Candidates are read with one query: Workloads alive in the hour that request GPUs, leaving out
those holding quota since before it (they did not wait in it); then one query for their
transitions.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from core.mig import GPU_RESOURCE, gpu_flavor
from fleet.choices import IngestSource
from fleet.models import Cluster, IngestRun
from ledger.choices import RollupScope
from ledger.rollup.groups import NO_COHORT, UNATTRIBUTED
from quotas.choices import HOLDING_STATES
from quotas.models import ClusterQueueQuota, TeamNamespace, Workload, WorkloadTransition
from quotas.now import waiting_flavor
from quotas.waiting import overlap_seconds, waiting_intervals

HOUR = timedelta(hours=1)


def sync_horizon(cluster_id: int) -> datetime | None:
    """When the newest successful Kueue sync of the cluster ended (what the database knows)."""
    return (
        IngestRun.objects.succeeded()
        .filter(cluster_id=cluster_id, source=IngestSource.KUEUE, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )


def waited_gpu_hours(
    cluster: Cluster, hour: datetime, horizon: datetime | None
) -> list[tuple[dict[str, Any], float]]:
    """(workload facts, pending GPU-hours) of every Workload that waited in the hour."""
    end = hour + HOUR
    until = end if horizon is None else min(end, max(horizon, hour))
    if until <= hour:
        return []
    candidates = (
        Workload.objects.filter(cluster_id=cluster.pk, requested_gpus__gt=0)
        .filter(Q(observed_at__isnull=True) | Q(observed_at__lt=end))
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=hour))
        .filter(Q(deleted_at__isnull=True) | Q(deleted_at__gt=hour))
        .exclude(state__in=HOLDING_STATES, quota_reserved_at__lte=hour)
        .values(
            "id",
            "namespace",
            "name",
            "observed_at",
            "state",
            "requested_gpus",
            "state_message",
            "flavors",
            "accumulated_execution_seconds",
            "finished_at",
            "deleted_at",
            "local_queue__name",
            "local_queue__cluster_queue__team_id",
            "local_queue__cluster_queue_id",
            "cluster_queue_id",
            "cluster_queue__name",
            "cluster_queue__team_id",
            "cluster_queue__team__name",
            "cluster_queue__cohort__name",
            "cluster_queue__cohort_name",
        )
    )
    workloads: dict[int, dict[str, Any]] = {row["id"]: dict(row) for row in candidates}
    if not workloads:
        return []
    history: dict[int, list[tuple[str, datetime]]] = defaultdict(list)
    # The whole history, not only up to the hour's end: a later eviction tells when an
    # admission we never saw ended (``quotas.waiting``).
    for workload_id, kind, at in WorkloadTransition.objects.filter(
        workload_id__in=list(workloads)
    ).values_list("workload_id", "kind", "at"):
        history[workload_id].append((kind, at))
    found = []
    for workload_id, row in workloads.items():
        intervals = waiting_intervals(
            row["observed_at"],
            history.get(workload_id, []),
            state=row["state"],
            accumulated_seconds=row["accumulated_execution_seconds"],
            finished_at=row["finished_at"],
            deleted_at=row["deleted_at"],
        )
        seconds = overlap_seconds(intervals, hour, until)
        if seconds > 0:
            found.append((row, row["requested_gpus"] * seconds / 3600.0))
    return found


def waited_flavor(row: dict[str, Any], first_flavor: str) -> str:
    """The GPU flavor a Workload waited for: the one its pending message names, else the one
    it was admitted to (``flavors``: whole GPUs first, then its first MIG resource), else
    ``first_flavor`` (its ClusterQueue's first GPU flavor, "" without a queue)."""
    named = waiting_flavor(row.get("state_message") or "")
    if named:
        return named
    admitted = gpu_flavor(row.get("flavors"))
    if admitted:
        return admitted
    return first_flavor


def pending_rows(
    cluster: Cluster, hour: datetime, horizon: datetime | None
) -> list[dict[str, Any]]:
    """The hour's pending GPU-hours as rollup rows: ``scope``, ``key``, ``flavor``,
    ``pending_gpu_hours`` and the foreign keys, summed per (scope, key, flavor)."""
    waited = waited_gpu_hours(cluster, hour, horizon)
    if not waited:
        return []
    queue_ids = {row["cluster_queue_id"] for row, _ in waited if row["cluster_queue_id"]}
    first_flavor: dict[int, str] = {}
    for queue_id, flavor in (
        ClusterQueueQuota.objects.filter(cluster_queue_id__in=queue_ids, resource=GPU_RESOURCE)
        .order_by("cluster_queue_id", "position", "flavor_name")
        .values_list("cluster_queue_id", "flavor_name")
    ):
        first_flavor.setdefault(queue_id, flavor)
    namespaces = {row["namespace"] for row, _ in waited}
    namespace_team = dict(
        TeamNamespace.objects.filter(cluster_id=cluster.pk, namespace__in=namespaces).values_list(
            "namespace", "team_id"
        )
    )
    team_names = dict(
        TeamNamespace.objects.filter(cluster_id=cluster.pk, namespace__in=namespaces).values_list(
            "namespace", "team__name"
        )
    )

    rows: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(scope: str, key: str, flavor: str, gpu_hours: float, **keys: int | None) -> None:
        target = rows.get((scope, key, flavor))
        if target is None:
            target = rows[(scope, key, flavor)] = {
                "scope": scope,
                "key": key,
                "flavor": flavor,
                "pending_gpu_hours": 0.0,
                "team_id": None,
                "cluster_queue_id": None,
                "workload_id": None,
            }
        target["pending_gpu_hours"] += gpu_hours
        for name, value in keys.items():
            if value is not None and target[name] is None:
                target[name] = value

    for row, gpu_hours in waited:
        queue_id = row["cluster_queue_id"]
        flavor = waited_flavor(row, first_flavor.get(queue_id, "") if queue_id else "")
        team_id = row["cluster_queue__team_id"] if queue_id else None
        team_name = row["cluster_queue__team__name"] if queue_id else None
        if team_id is None:
            team_id = namespace_team.get(row["namespace"])
            team_name = team_names.get(row["namespace"])
        namespace = row["namespace"] or UNATTRIBUTED
        add(
            RollupScope.WORKLOAD,
            f"{row['namespace']}/{row['name']}",
            flavor,
            gpu_hours,
            workload_id=row["id"],
            cluster_queue_id=queue_id,
            team_id=team_id,
        )
        add(RollupScope.NAMESPACE, namespace, flavor, gpu_hours)
        if row["local_queue__name"]:
            add(
                RollupScope.LOCAL_QUEUE,
                f"{row['namespace']}/{row['local_queue__name']}",
                flavor,
                gpu_hours,
                cluster_queue_id=row["local_queue__cluster_queue_id"],
                team_id=row["local_queue__cluster_queue__team_id"],
            )
        else:
            add(RollupScope.LOCAL_QUEUE, UNATTRIBUTED, flavor, gpu_hours)
        if queue_id:
            add(
                RollupScope.CLUSTER_QUEUE,
                row["cluster_queue__name"],
                flavor,
                gpu_hours,
                cluster_queue_id=queue_id,
                team_id=row["cluster_queue__team_id"],
            )
            cohort = row["cluster_queue__cohort__name"] or row["cluster_queue__cohort_name"]
            add(RollupScope.COHORT, cohort or NO_COHORT, flavor, gpu_hours)
        else:
            add(RollupScope.CLUSTER_QUEUE, UNATTRIBUTED, flavor, gpu_hours)
            add(RollupScope.COHORT, UNATTRIBUTED, flavor, gpu_hours)
        if team_id is not None and team_name:
            add(RollupScope.TEAM, team_name, flavor, gpu_hours, team_id=team_id)
        else:
            add(RollupScope.TEAM, UNATTRIBUTED, flavor, gpu_hours)
        add(RollupScope.FLAVOR, flavor or UNATTRIBUTED, flavor, gpu_hours)
        add(RollupScope.FLEET, cluster.name, flavor, gpu_hours)
    return list(rows.values())
