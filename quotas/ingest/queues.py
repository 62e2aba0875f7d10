"""ResourceFlavors, Cohorts, ClusterQueues and LocalQueues -> rows, and the teams they make.

Cohorts only named by a ClusterQueue or as a parent are added as implicit ones.

Team of a ClusterQueue: the first of ``team_labels`` present on it, else the queue's name,
slugified (``Team.name`` is a slug). A LocalQueue's namespace goes to the team of its queue; when
LocalQueues of one namespace point at queues of different teams, the first by (namespace, name)
wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from django.utils.text import slugify

from quotas import constants as c
from quotas.ingest.fields import (
    Malformed,
    find_condition,
    read_conditions,
    read_dict,
    read_int,
    read_list,
    read_optional_int,
    read_optional_quantity,
    read_quantity,
    read_str,
    read_str_map,
)
from quotas.ingest.rows import (
    ClusterQueueRow,
    CohortRow,
    FlavorRow,
    LocalQueueRow,
    ObjectMeta,
    QueueUsageRow,
    QuotaRow,
    TeamRow,
)
from quotas.writeback.gitops import latest_quota_manager


def parse_flavor(item: dict, meta: ObjectMeta) -> FlavorRow:
    """A ResourceFlavor; its GPU model from the product in its nodeLabels."""
    spec = read_dict(item.get("spec"), "spec")
    node_labels = read_str_map(spec.get("nodeLabels"), "spec.nodeLabels")
    return FlavorRow(
        meta=meta,
        node_labels=node_labels,
        node_taints=read_list(spec.get("nodeTaints"), "spec.nodeTaints"),
        tolerations=read_list(spec.get("tolerations"), "spec.tolerations"),
        topology_name=read_str(spec.get("topologyName"), "spec.topologyName"),
        gpu_model=node_labels.get(c.LABEL_GPU_PRODUCT, ""),
    )


def _resource_groups(spec: dict) -> list[QuotaRow]:
    rows = []
    for group in read_list(spec.get("resourceGroups"), "spec.resourceGroups"):
        group = read_dict(group, "resourceGroup", required=True)
        for position, flavor in enumerate(read_list(group.get("flavors"), "resourceGroup.flavors")):
            flavor = read_dict(flavor, "flavorQuotas", required=True)
            flavor_name = read_str(flavor.get("name"), "flavorQuotas.name")
            if not flavor_name:
                raise Malformed("missing_name", "flavorQuotas.name")
            for quota in read_list(flavor.get("resources"), "flavorQuotas.resources"):
                quota = read_dict(quota, "resourceQuota", required=True)
                resource = read_str(quota.get("name"), "resourceQuota.name")
                if not resource:
                    raise Malformed("missing_name", "resourceQuota.name")
                what = f"{flavor_name}/{resource}"
                rows.append(
                    QuotaRow(
                        flavor_name=flavor_name,
                        resource=resource,
                        position=position,
                        nominal=read_quantity(
                            quota.get("nominalQuota", "0"), f"{what} nominalQuota"
                        ),
                        borrowing_limit=read_optional_quantity(
                            quota.get("borrowingLimit"), f"{what} borrowingLimit"
                        ),
                        lending_limit=read_optional_quantity(
                            quota.get("lendingLimit"), f"{what} lendingLimit"
                        ),
                    )
                )
    return rows


def _fair_sharing(item: dict) -> tuple[Decimal | None, int | None]:
    spec = read_dict(item.get("spec"), "spec")
    status = read_dict(item.get("status"), "status")
    weight = read_dict(spec.get("fairSharing"), "spec.fairSharing").get("weight")
    share = read_dict(status.get("fairSharing"), "status.fairSharing").get("weightedShare")
    return (
        read_optional_quantity(weight, "spec.fairSharing.weight"),
        read_optional_int(share, "status.fairSharing.weightedShare"),
    )


def parse_cohort(item: dict, meta: ObjectMeta) -> CohortRow:
    """An explicit Cohort (``spec.parent`` on v1alpha1, ``parentName`` after)."""
    spec = read_dict(item.get("spec"), "spec")
    parent_key = "parent" if item.get("apiVersion") == c.V1ALPHA1 else "parentName"
    fair_weight, weighted_share = _fair_sharing(item)
    return CohortRow(
        meta=meta,
        parent_name=read_str(spec.get(parent_key), f"spec.{parent_key}"),
        implicit=False,
        fair_weight=fair_weight,
        weighted_share=weighted_share,
        resource_groups=read_list(spec.get("resourceGroups"), "spec.resourceGroups"),
        quotas=_resource_groups(spec),
        quota_manager=latest_quota_manager(item),
        scheduler=scheduler_of(meta),
    )


def scheduler_of(meta: ObjectMeta) -> str:
    """The scheduler an object was read from: its ``LABEL_SCHEDULER``, else Kueue."""
    return meta.labels.get(c.LABEL_SCHEDULER) or c.DEFAULT_SCHEDULER


def _usage(entries: object, what: str) -> list[QueueUsageRow]:
    rows = []
    for flavor in read_list(entries, what):
        flavor = read_dict(flavor, what, required=True)
        flavor_name = read_str(flavor.get("name"), f"{what}.name")
        for resource in read_list(flavor.get("resources"), f"{what}.resources"):
            resource = read_dict(resource, f"{what}.resources", required=True)
            name = read_str(resource.get("name"), f"{what}.resources.name")
            rows.append(
                QueueUsageRow(
                    flavor_name=flavor_name,
                    resource=name,
                    total=read_quantity(resource.get("total", "0"), f"{what} {name} total"),
                    borrowed=read_quantity(
                        resource.get("borrowed", "0"), f"{what} {name} borrowed"
                    ),
                )
            )
    return rows


def _team_name(labels: Mapping[str, str], team_labels: Sequence[str]) -> str:
    """The team from the first of ``team_labels`` present, else ``""``."""
    for label in team_labels:
        value = slugify(labels.get(label, ""))[:100]
        if value:
            return value
    return ""


def parse_cluster_queue(
    item: dict, meta: ObjectMeta, team_labels: Sequence[str]
) -> ClusterQueueRow:
    """A ClusterQueue with its quotas, usage, reservation and team."""
    spec = read_dict(item.get("spec"), "spec")
    status = read_dict(item.get("status"), "status")
    preemption = read_dict(spec.get("preemption"), "spec.preemption")
    borrow = read_dict(preemption.get("borrowWithinCohort"), "spec.preemption.borrowWithinCohort")
    cohort_key = "cohort" if item.get("apiVersion") == c.V1BETA1 else "cohortName"
    fair_weight, weighted_share = _fair_sharing(item)
    active = find_condition(read_conditions(status), c.COND_ACTIVE)
    team_name = _team_name(meta.labels, team_labels)
    return ClusterQueueRow(
        meta=meta,
        cohort_name=read_str(spec.get(cohort_key), f"spec.{cohort_key}"),
        team_name=team_name or slugify(meta.name)[:100] or meta.name[:100],
        team_from_label=bool(team_name),
        namespace_selector=read_dict(spec.get("namespaceSelector"), "spec.namespaceSelector"),
        queueing_strategy=read_str(spec.get("queueingStrategy"), "spec.queueingStrategy"),
        stop_policy=read_str(spec.get("stopPolicy"), "spec.stopPolicy"),
        reclaim_within_cohort=read_str(
            preemption.get("reclaimWithinCohort"), "reclaimWithinCohort"
        ),
        within_cluster_queue=read_str(preemption.get("withinClusterQueue"), "withinClusterQueue"),
        borrow_within_cohort=read_str(borrow.get("policy"), "borrowWithinCohort.policy"),
        borrow_within_cohort_max_priority=read_optional_int(
            borrow.get("maxPriorityThreshold"), "borrowWithinCohort.maxPriorityThreshold"
        ),
        fair_weight=fair_weight,
        weighted_share=weighted_share,
        pending_workloads=read_int(status.get("pendingWorkloads"), "status.pendingWorkloads"),
        reserving_workloads=read_int(status.get("reservingWorkloads"), "status.reservingWorkloads"),
        admitted_workloads=read_int(status.get("admittedWorkloads"), "status.admittedWorkloads"),
        active=active is None or active.get("status") == "True",
        quotas=_resource_groups(spec),
        usage=_usage(status.get("flavorsUsage"), "status.flavorsUsage"),
        reservation=_usage(status.get("flavorsReservation"), "status.flavorsReservation"),
        quota_manager=latest_quota_manager(item),
        scheduler=scheduler_of(meta),
    )


def with_implicit_cohorts(
    explicit: list[CohortRow], cluster_queues: list[ClusterQueueRow], listed: set[tuple[str, ...]]
) -> list[CohortRow]:
    """Explicit Cohorts plus those only named by a ClusterQueue or as a parent.

    A Cohort that was listed but skipped as malformed is not made up as an implicit one.
    """
    known = {row.meta.name for row in explicit} | {key[-1] for key in listed}
    named = sorted(
        {cq.cohort_name for cq in cluster_queues if cq.cohort_name}
        | {row.parent_name for row in explicit if row.parent_name}
    )
    scheduler_of_cohort = {
        cq.cohort_name: cq.scheduler for cq in sorted(cluster_queues, key=lambda r: r.meta.name)
    }
    implicit = [
        CohortRow(
            meta=ObjectMeta(name=name),
            parent_name="",
            implicit=True,
            fair_weight=None,
            weighted_share=None,
            resource_groups=[],
            quotas=[],
            scheduler=scheduler_of_cohort.get(name, c.DEFAULT_SCHEDULER),
        )
        for name in named
        if name not in known
    ]
    return explicit + implicit


def parse_local_queue(item: dict, meta: ObjectMeta) -> LocalQueueRow:
    """A LocalQueue and the ClusterQueue it points at."""
    spec = read_dict(item.get("spec"), "spec")
    status = read_dict(item.get("status"), "status")
    usage_key = "flavorUsage" if item.get("apiVersion") == c.V1BETA1 else "flavorsUsage"
    cluster_queue = read_str(spec.get("clusterQueue"), "spec.clusterQueue")
    if not cluster_queue:
        raise Malformed("missing_field", "spec.clusterQueue")
    return LocalQueueRow(
        meta=meta,
        cluster_queue_name=cluster_queue,
        pending_workloads=read_int(status.get("pendingWorkloads"), "status.pendingWorkloads"),
        reserving_workloads=read_int(status.get("reservingWorkloads"), "status.reservingWorkloads"),
        admitted_workloads=read_int(status.get("admittedWorkloads"), "status.admittedWorkloads"),
        usage=_usage(status.get(usage_key), f"status.{usage_key}"),
    )


def build_teams(
    cluster_queues: list[ClusterQueueRow], local_queues: list[LocalQueueRow]
) -> list[TeamRow]:
    """One team per team name of the ClusterQueues, with its namespaces."""
    teams: dict[str, TeamRow] = {}
    team_of_queue = {}
    for cq in sorted(cluster_queues, key=lambda row: row.meta.name):
        team = teams.setdefault(cq.team_name, TeamRow(cq.team_name, [], []))
        team.cluster_queues.append(cq.meta.name)
        team_of_queue[cq.meta.name] = team
    claimed: set[str] = set()
    for lq in sorted(local_queues, key=lambda row: (row.meta.namespace, row.meta.name)):
        owner = team_of_queue.get(lq.cluster_queue_name)
        if owner is not None and lq.meta.namespace not in claimed:
            claimed.add(lq.meta.namespace)
            owner.namespaces.append(lq.meta.namespace)
    return sorted(teams.values(), key=lambda team: team.name)
