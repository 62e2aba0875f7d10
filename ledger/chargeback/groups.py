"""The groups that existed in a window: they get rows (with zeros) even without rollups."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from fleet.models import Cluster, Node
from ledger.chargeback.query import visible_namespaces
from ledger.rollup.groups import NO_COHORT
from quotas.models import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Team, Workload


@dataclass(frozen=True)
class KnownGroup:
    cluster_id: int | None
    key: str
    since: datetime | None
    until: datetime | None

    def existed(self, start: datetime, end: datetime) -> bool:
        return (self.since is None or self.since < end) and (
            self.until is None or self.until > start
        )


def known_groups(
    group_by: str,
    start: datetime,
    end: datetime,
    cluster: Cluster | None,
    team_ids: set[int] | None,
) -> list[KnownGroup]:
    def lifecycle(queryset: Any, *key_fields: str) -> list[KnownGroup]:
        if cluster is not None:
            queryset = queryset.filter(cluster=cluster)
        queryset = queryset.filter(Q(deleted_at__isnull=True) | Q(deleted_at__gt=start)).filter(
            Q(observed_at__isnull=True) | Q(observed_at__lt=end)
        )
        values = queryset.values_list("cluster_id", "observed_at", "deleted_at", *key_fields)
        return [
            KnownGroup(cluster_id, "/".join(parts), since, until)
            for cluster_id, since, until, *parts in values
        ]

    if group_by == "team":
        teams = Team.objects.all()
        if team_ids is not None:
            teams = teams.filter(id__in=team_ids)
        return [KnownGroup(None, name, None, None) for name in teams.values_list("name", flat=True)]
    if group_by == "cluster":
        clusters = Cluster.objects.all() if cluster is None else [cluster]
        return [KnownGroup(c.pk, c.name, None, None) for c in clusters]
    if group_by == "cluster_queue":
        queues = ClusterQueue.objects.all()
        if team_ids is not None:
            queues = queues.filter(team_id__in=team_ids)
        return lifecycle(queues, "name")
    if group_by == "local_queue":
        local = LocalQueue.objects.all()
        if team_ids is not None:
            local = local.filter(cluster_queue__team_id__in=team_ids)
        return lifecycle(local, "namespace", "name")
    if group_by == "cohort":
        # Standalone ClusterQueues make the "(no cohort)" group of their cluster.
        standalone = ClusterQueue.objects.filter(cohort__isnull=True, cohort_name="")
        alone = [
            KnownGroup(group.cluster_id, NO_COHORT, group.since, group.until)
            for group in lifecycle(standalone, "name")
        ]
        return lifecycle(Cohort.objects.all(), "name") + alone
    if group_by in ("workload", "namespace"):
        return waiting_or_holding(group_by, start, end, cluster, team_ids)
    if group_by == "node":
        return lifecycle(Node.objects.all(), "name")
    if group_by == "flavor":
        return lifecycle(ResourceFlavor.objects.all(), "name")
    return []


def waiting_or_holding(
    group_by: str,
    start: datetime,
    end: datetime,
    cluster: Cluster | None,
    team_ids: set[int] | None,
) -> list[KnownGroup]:
    """Workloads (or their namespaces) that lived in the window: each waited for quota or held
    it there, so each gets a row, with zeros where it held no GPUs (README "Chargeback API").

    A workload lives from its creation until it finished or was deleted; one never seen created
    (no ``observed_at``) counts from the start.
    """
    workloads = Workload.objects.filter(Q(observed_at__isnull=True) | Q(observed_at__lt=end))
    workloads = workloads.filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start)).filter(
        Q(deleted_at__isnull=True) | Q(deleted_at__gt=start)
    )
    if cluster is not None:
        workloads = workloads.filter(cluster=cluster)
    if group_by == "workload":
        if team_ids is not None:
            workloads = workloads.filter(cluster_queue__team_id__in=team_ids)
        values = workloads.values_list(
            "cluster_id", "namespace", "name", "observed_at", "finished_at", "deleted_at"
        )
        return [
            KnownGroup(
                cluster_id,
                f"{namespace}/{name}",
                since,
                min((t for t in (finished, deleted) if t is not None), default=None),
            )
            for cluster_id, namespace, name, since, finished, deleted in values
        ]
    spans: dict[tuple[int, str], tuple[datetime | None, datetime | None]] = {}
    visible = visible_namespaces(team_ids) if team_ids is not None else None
    for cluster_id, namespace, since, finished, deleted in workloads.values_list(
        "cluster_id", "namespace", "observed_at", "finished_at", "deleted_at"
    ):
        if visible is not None and (cluster_id, namespace) not in visible:
            continue
        until = min((t for t in (finished, deleted) if t is not None), default=None)
        known = spans.get((cluster_id, namespace))
        if known is not None:
            since = None if since is None or known[0] is None else min(since, known[0])
            until = None if until is None or known[1] is None else max(until, known[1])
        spans[(cluster_id, namespace)] = (since, until)
    return [
        KnownGroup(cluster_id, namespace, since, until)
        for (cluster_id, namespace), (since, until) in spans.items()
    ]
