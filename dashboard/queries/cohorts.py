"""The cohort pages' reads: cohorts with their members' quota and usage now, who borrows, the
members' figures over the range and their hours for the charts.

A cohort has no usage of its own in Kueue: its figures are its member ClusterQueues' summed
(docs/architecture.md "Upstream facts"), plus the cohort's own shared pool from
``spec.resourceGroups``. A cohort's figures cover its whole subtree (``subtrees``): the
ClusterQueues of every cohort below it by ``parentName`` are its members too, and the pools of
those cohorts add to its own, so a Volcano or KAI parent queue (or a Kueue cohort with child
cohorts) shows what is below it (docs/architecture.md "Cohort subtrees"). Figures now (samples,
quotas, holdings, the eviction pace) are ``quotas.now``'s; figures over a range the read layer's
(ClusterQueue-scope rollups of the hours the range counts).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.db.models import Count, Max, Q, QuerySet, Sum

from core.mig import gpu_resource_q, gpu_share
from core.quantity import parse_quantity
from core.ranges import HourSpan
from dashboard.frame import bounded
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.range_figures import Figures
from quotas.models import ClusterQueue, ClusterQueueQuota, Cohort, Workload
from quotas.now import QueueNow, quota_gpus

logger = logging.getLogger(__name__)


def cohort_pool(cohort: Cohort) -> dict[str, float]:
    """The cohort's own GPU quota (``spec.resourceGroups``) per flavor, in GPUs (MIG quota at
    slices/7, ``core.mig.gpu_share``); bad entries skipped."""
    pool: dict[str, float] = {}
    groups = cohort.resource_groups if isinstance(cohort.resource_groups, list) else []
    for group in groups:
        if not isinstance(group, dict):
            continue
        for flavor in group.get("flavors") or []:
            if not isinstance(flavor, dict):
                continue
            for resource in flavor.get("resources") or []:
                if not isinstance(resource, dict):
                    continue
                share = gpu_share(str(resource.get("name", "")))
                if share is None:
                    continue  # not a GPU resource (whole GPUs and MIG at slices/7 count)
                try:
                    amount = share * float(parse_quantity(resource.get("nominalQuota", 0)))
                except ValueError:
                    logger.warning("cohort %s: bad nominalQuota %r", cohort.name, resource)
                    continue
                name = str(flavor.get("name", ""))
                pool[name] = pool.get(name, 0.0) + amount
    return pool


def subtrees(cohorts: Iterable[Cohort]) -> dict[int, list[Cohort]]:
    """cohort id → the present Cohort rows of its subtree: itself, then every cohort below it by
    ``parent``; one query over the cohorts of their clusters. A ``parentName`` cycle (Kueue's
    error) stops where it closes."""
    roots = list(cohorts)
    rows = Cohort.objects.filter(
        cluster_id__in={c.cluster_id for c in roots}, deleted_at__isnull=True
    ).order_by("name")
    children: dict[int, list[Cohort]] = defaultdict(list)
    for row in rows:
        if row.parent_id is not None:
            children[row.parent_id].append(row)
    found: dict[int, list[Cohort]] = {}
    for root in roots:
        tree, todo, seen = [], [root], set()
        while todo:
            node = todo.pop(0)
            if node.pk in seen:
                continue
            seen.add(node.pk)
            tree.append(node)
            todo.extend(children.get(node.pk, []))
        found[root.pk] = tree
    return found


def subtree_ids(cohort: Cohort) -> list[int]:
    """The ids of the cohort and every cohort below it (``subtrees``)."""
    return [node.pk for node in subtrees([cohort])[cohort.pk]]


def subtree_pool(tree: list[Cohort]) -> dict[str, float]:
    """The own GPU quota of every cohort of a subtree, per flavor (``cohort_pool``)."""
    pool: dict[str, float] = defaultdict(float)
    for node in tree:
        for flavor, amount in cohort_pool(node).items():
            pool[flavor] += amount
    return dict(pool)


def rolled_up(by_cohort: dict[int, float], tree: list[Cohort]) -> float:
    """A figure keyed by direct cohort id, summed over a subtree."""
    return sum(by_cohort.get(node.pk, 0.0) for node in tree)


# --- Cohort list --------------------------------------------------------------------------------


def cohorts_with_members() -> QuerySet[Cohort]:
    """Cohorts that exist, each with ``members``: its direct ClusterQueues that exist (the list
    rolls them up over subtrees)."""
    return (
        Cohort.objects.filter(deleted_at__isnull=True)
        .select_related("cluster")
        .annotate(
            members=Count("cluster_queues", filter=Q(cluster_queues__deleted_at__isnull=True))
        )
        .order_by("cluster__name", "name")
    )


def members_nominal(queue_filter: Q) -> dict[int, float]:
    """cohort id → its members' nominal GPU quota in GPUs (``quotas.now.quota_gpus``: MIG quota
    at slices/7): one query."""
    nominal: dict[int, float] = defaultdict(float)
    rows = (
        ClusterQueueQuota.objects.filter(queue_filter)
        .filter(gpu_resource_q())
        .values_list("cluster_queue__cohort_id", "resource", "nominal")
    )
    for cohort_id, resource, amount in rows:
        nominal[cohort_id] += quota_gpus(ClusterQueueQuota(resource=resource, nominal=amount))
    return dict(nominal)


def members_lending(samples: dict[int, QueueNow]) -> tuple[dict[int, float], dict[int, float]]:
    """(cohort id → GPUs borrowed now, cohort id → GPUs lent now) from members' samples."""
    cohort_of = dict(
        ClusterQueue.objects.filter(pk__in=list(samples)).values_list("pk", "cohort_id")
    )
    borrowed: dict[int, float] = defaultdict(float)
    lent: dict[int, float] = defaultdict(float)
    for queue_id, found in samples.items():
        borrowed[cohort_of[queue_id]] += found.borrowed
        lent[cohort_of[queue_id]] += found.lent
    return borrowed, lent


# --- One cohort ---------------------------------------------------------------------------------


def cohort_workloads(tree: list[int]) -> QuerySet[Workload, Any]:
    """The ids of the workloads of every queue that names a cohort of the subtree ``tree`` (a
    subquery over the queue ids, read first): the eviction pace then probes each one's
    transitions by index instead of joining every transition to its workload and queue (3 times
    slower at 190,000 transitions, bench/pages.py)."""
    queues = list(ClusterQueue.objects.filter(cohort_id__in=tree).values_list("pk", flat=True))
    return Workload.objects.filter(cluster_queue_id__in=queues).values("pk")


def cohort_members(tree: list[int]) -> list[ClusterQueue]:
    """The present ClusterQueues of the cohorts of the subtree ``tree``."""
    return list(
        ClusterQueue.objects.present()
        .filter(cohort_id__in=tree)
        .select_related("team", "cohort")
        .order_by("name")
    )


def member_counts(ids: Iterable[int]) -> dict[int, int]:
    """cohort id → its direct present ClusterQueues."""
    return dict(
        ClusterQueue.objects.present()
        .filter(cohort_id__in=list(ids))
        .order_by()
        .values("cohort_id")
        .annotate(n=Count("id"))
        .values_list("cohort_id", "n")
    )


def member_figures(members: list[ClusterQueue], span: HourSpan) -> dict[int, Figures]:
    """queue id → the member's figures over the span: one grouped query."""
    return (
        HourlyRollup.objects.for_scope(RollupScope.CLUSTER_QUEUE)
        .covering(span)
        .filter(cluster_queue_id__in=[queue.pk for queue in members])
        .figures(group_by=("cluster_queue_id",))
    )


def pending_by_queue(queue_filter: Q) -> dict[int, dict[str, Any]]:
    """queue id → ``count``, ``gpus`` and ``top`` priority of its pending workloads."""
    rows = (
        Workload.objects.pending()
        .filter(queue_filter)
        .order_by()
        .values("cluster_queue_id")
        .annotate(count=Count("id"), gpus=Sum("requested_gpus"), top=Max("priority"))
    )
    return {row["cluster_queue_id"]: dict(row) for row in rows}


def top_holding_priority(queue_filter: Q) -> dict[int, int]:
    """queue id → the highest priority among its holding workloads."""
    return dict(
        Workload.objects.holding()
        .filter(queue_filter)
        .order_by()
        .values("cluster_queue_id")
        .annotate(top=Max("priority"))
        .values_list("cluster_queue_id", "top")
    )


def borrowing_workloads(queue_filter: Q) -> tuple[list[Workload], bool]:
    """Holding workloads that borrow, lowest priority first (a bounded list)."""
    return bounded(
        Workload.objects.holding()
        .filter(queue_filter, borrowing=True)
        .select_related("cluster_queue")
        .order_by("priority", "-admitted_at")
    )


# --- Charts -------------------------------------------------------------------------------------


def member_teams(tree: list[int]) -> dict[str, int | None]:
    """ClusterQueue name → owning team id, of every queue that ever named a cohort of the
    subtree ``tree``."""
    return dict(ClusterQueue.objects.filter(cohort_id__in=tree).values_list("name", "team_id"))


def member_hours(
    tree: list[int], span: HourSpan, names: tuple[str, ...]
) -> dict[str, list[Figures | None]]:
    """Per member ClusterQueue (by name), one ``Figures`` (or None) per hour of the span, with
    the figures ``names`` a chart plots: a month of a 20-queue cohort is 14,000 group-hours,
    and summing and carrying all seventeen figures tripled the chart's time (bench/pages.py)."""
    return (
        HourlyRollup.objects.for_scope(RollupScope.CLUSTER_QUEUE)
        .filter(cluster_queue__cohort_id__in=tree)
        .series(span, ("cluster_queue__name",), names=names)
    )
