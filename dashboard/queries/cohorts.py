"""The cohort pages' reads: cohorts with their members' quota and usage now, who borrows, how fast
preemption has been reclaiming quota, and the members' hours for the charts.

A cohort has no usage of its own in Kueue: its figures are its member ClusterQueues' summed
(DESIGN "Upstream facts"), plus the cohort's own shared pool from ``spec.resourceGroups``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, F, Max, Q, QuerySet, Sum
from django.db.models.functions import TruncHour

from core.mig import GPU_RESOURCE
from core.quantity import parse_quantity
from core.ranges import TimeRange
from dashboard.frame import bounded
from dashboard.queries.now import QueueNow
from dashboard.queries.rollups import in_complete_hours, rollups_in_range
from ledger.choices import RollupScope
from quotas.choices import TransitionKind
from quotas.models import ClusterQueue, ClusterQueueQuota, Cohort, Workload, WorkloadTransition
from quotas.reclaim import median

logger = logging.getLogger(__name__)

# How far back the cohort page looks for preemptions to measure the eviction pace.
PACE_LOOKBACK = timedelta(days=30)
# Preemptions read to measure that pace (the newest ones).
PACE_SAMPLE = 500


def cohort_pool(cohort: Cohort) -> dict[str, float]:
    """The cohort's own GPU quota (``spec.resourceGroups``) per flavor; bad entries skipped."""
    pool: dict[str, float] = {}
    groups = cohort.resource_groups if isinstance(cohort.resource_groups, list) else []
    for group in groups:
        if not isinstance(group, dict):
            continue
        for flavor in group.get("flavors") or []:
            if not isinstance(flavor, dict):
                continue
            for resource in flavor.get("resources") or []:
                if not isinstance(resource, dict) or resource.get("name") != GPU_RESOURCE:
                    continue
                try:
                    amount = float(parse_quantity(resource.get("nominalQuota", 0)))
                except ValueError:
                    logger.warning("cohort %s: bad nominalQuota %r", cohort.name, resource)
                    continue
                name = str(flavor.get("name", ""))
                pool[name] = pool.get(name, 0.0) + amount
    return pool


# --- Cohort list --------------------------------------------------------------------------------


def cohorts_with_members() -> QuerySet[Cohort]:
    """Cohorts that exist, each with ``members``: its ClusterQueues that exist."""
    return (
        Cohort.objects.filter(deleted_at__isnull=True)
        .select_related("cluster")
        .annotate(
            members=Count("cluster_queues", filter=Q(cluster_queues__deleted_at__isnull=True))
        )
        .order_by("cluster__name", "name")
    )


def members_nominal(queue_filter: Q) -> dict[int, float]:
    """cohort id → its members' nominal GPU quota: one query."""
    return {
        row["cluster_queue__cohort_id"]: float(row["gpus"] or 0)
        for row in ClusterQueueQuota.objects.filter(queue_filter, resource=GPU_RESOURCE)
        .order_by()
        .values("cluster_queue__cohort_id")
        .annotate(gpus=Sum("nominal"))
    }


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


def cohort_members(cohort: Cohort) -> list[ClusterQueue]:
    return list(
        ClusterQueue.objects.present().filter(cohort=cohort).select_related("team").order_by("name")
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


def eviction_pace(queue_filter: Q, now: datetime) -> dict[str, Any]:
    """Observed preemption pace in these queues over ``PACE_LOOKBACK``: three queries.

    ``admission_seconds`` is the median time from a preemption to its preemptor's next admission;
    ``per_hour`` the mean evictions (evicted + preempted rows) per hour among hours that had one.
    """
    since = now - PACE_LOOKBACK
    preemptions = list(
        WorkloadTransition.objects.filter(
            queue_filter,
            kind=TransitionKind.PREEMPTED,
            at__gte=since,
            preemptor__isnull=False,
        )
        .order_by("-at")
        .values("at", "preemptor_id")[:PACE_SAMPLE]
    )
    admissions: dict[int, list[datetime]] = defaultdict(list)
    if preemptions:
        for row in (
            WorkloadTransition.objects.filter(
                workload_id__in={p["preemptor_id"] for p in preemptions},
                kind=TransitionKind.ADMITTED,
                at__gte=min(p["at"] for p in preemptions),
            )
            .order_by("at")
            .values("workload_id", "at")
        ):
            admissions[row["workload_id"]].append(row["at"])
    delays = []
    for preemption in preemptions:
        after = [at for at in admissions[preemption["preemptor_id"]] if at >= preemption["at"]]
        if after:
            delays.append((after[0] - preemption["at"]).total_seconds())
    hourly = list(
        WorkloadTransition.objects.filter(
            queue_filter,
            kind__in=[TransitionKind.EVICTED, TransitionKind.PREEMPTED],
            at__gte=since,
        )
        .annotate(bucket=TruncHour("at"))
        .order_by()
        .values("bucket")
        .annotate(count=Count("id"))
    )
    total = sum(row["count"] for row in hourly)
    return {
        "admission_seconds": median(delays),
        "admission_samples": len(delays),
        "per_hour": total / len(hourly) if hourly else None,
        "evictions": total,
        "active_hours": len(hourly),
        "lookback_days": PACE_LOOKBACK.days,
    }


# --- Charts -------------------------------------------------------------------------------------


def member_hours(cohort_id: int, time_range: TimeRange) -> list[dict[str, Any]]:
    """Allocated, nominal, borrowed and lent GPU-hours per hour and member (``queue``)."""
    return [
        dict(row)
        for row in rollups_in_range(RollupScope.CLUSTER_QUEUE, time_range)
        .filter(
            in_complete_hours(time_range),
            cluster_queue__cohort_id=cohort_id,
        )
        .order_by()
        .values("hour", queue=F("cluster_queue__name"))
        .annotate(
            allocated=Sum("allocated_gpu_hours"),
            nominal=Sum("nominal_gpu_hours"),
            borrowed=Sum("borrowed_gpu_hours"),
            lent=Sum("lent_gpu_hours"),
        )
    ]
