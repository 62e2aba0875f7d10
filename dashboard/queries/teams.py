"""The team pages' reads: teams over the range, one team's queues and workloads, its charts' hours.

Figures over the range come from team-scope rollups (ClusterQueue-scope for the per-queue chart);
figures now from the synced Kueue objects (``dashboard.queries.now``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db.models import Case, Count, F, IntegerField, Q, QuerySet, Sum, Value, When

from core.ranges import TimeRange
from dashboard.queries.rollups import (
    ROLLUP_SUMS,
    RangeFigures,
    in_complete_hours,
    rollups_in_range,
)
from ledger.choices import RollupScope
from quotas.choices import HOLDING_STATES, WorkloadState
from quotas.models import ClusterQueue, Team, Workload

PENDING_STATES = (
    WorkloadState.PENDING,
    WorkloadState.EVICTED,
    WorkloadState.PREEMPTED,
    WorkloadState.REQUEUED,
)
WORKLOAD_FILTERS = ("all", "holding", "pending", "finished")


# --- Team list ----------------------------------------------------------------------------------


def range_figures_by_team(ids: list[int], time_range: TimeRange) -> dict[int, RangeFigures]:
    """Range figures of the given teams: one grouped query."""
    rows = (
        rollups_in_range(RollupScope.TEAM, time_range)
        .filter(team_id__in=ids)
        .order_by()
        .values("team_id")
        .annotate(**ROLLUP_SUMS)
    )
    return {row["team_id"]: RangeFigures.from_row(row) for row in rows}


def range_figures_all_teams(time_range: TimeRange) -> RangeFigures:
    """Range figures summed over every team: one aggregate."""
    return RangeFigures.from_row(
        rollups_in_range(RollupScope.TEAM, time_range)
        .filter(team__isnull=False)
        .aggregate(**ROLLUP_SUMS)
    )


# --- One team -----------------------------------------------------------------------------------


def team_range_figures(team: Team, time_range: TimeRange) -> RangeFigures:
    return RangeFigures.from_row(
        rollups_in_range(RollupScope.TEAM, time_range).filter(team=team).aggregate(**ROLLUP_SUMS)
    )


def team_queues(team: Team) -> list[ClusterQueue]:
    return list(
        ClusterQueue.objects.present()
        .filter(team=team)
        .select_related("cluster", "cohort")
        .order_by("cluster__name", "name")
    )


def team_pending(team: Team) -> dict[str, Any]:
    """``count`` and ``gpus`` of the team's pending workloads."""
    return (
        Workload.objects.pending()
        .filter(cluster_queue__team=team)
        .aggregate(count=Count("id"), gpus=Sum("requested_gpus"))
    )


def _state_order() -> Case:
    return Case(
        When(state__in=HOLDING_STATES, then=Value(0)),
        When(state__in=PENDING_STATES, then=Value(1)),
        default=Value(2),
        output_field=IntegerField(),
    )


def _state_filter(state: str) -> Q:
    if state == "holding":
        return Q(state__in=HOLDING_STATES)
    if state == "pending":
        return Q(state__in=PENDING_STATES)
    if state == "finished":
        return Q(state__in=[WorkloadState.SUCCEEDED, WorkloadState.FAILED, WorkloadState.INACTIVE])
    return Q()


def team_workloads(team: Team, time_range: TimeRange, state: str) -> QuerySet[Workload]:
    """The team's workloads alive in the range (one of ``WORKLOAD_FILTERS``), holding first."""
    return (
        Workload.objects.filter(cluster_queue__team=team)
        .filter(Q(deleted_at__isnull=True) | Q(deleted_at__gte=time_range.start))
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=time_range.start))
        .filter(_state_filter(state))
        .select_related("cluster_queue", "local_queue", "cluster")
        .annotate(state_order=_state_order())
        .order_by("state_order", "-admitted_at", "namespace", "name")
    )


# --- Charts -------------------------------------------------------------------------------------


def team_hours(team: Team, time_range: TimeRange) -> dict[datetime, dict[str, Any]]:
    """The team's allocated, nominal, active, telemetry and borrowed GPU-hours per hour."""
    return {
        row["hour"]: dict(row)
        for row in rollups_in_range(RollupScope.TEAM, time_range)
        .filter(in_complete_hours(time_range), team=team)
        .order_by()
        .values("hour")
        .annotate(
            allocated=Sum("allocated_gpu_hours"),
            nominal=Sum("nominal_gpu_hours"),
            active=Sum("active_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
            borrowed=Sum("borrowed_gpu_hours"),
        )
    }


def team_queue_hours(team: Team, time_range: TimeRange) -> list[Mapping[str, Any]]:
    """Allocated and nominal GPU-hours per hour, ClusterQueue (``queue``) and flavor."""
    return list(
        rollups_in_range(RollupScope.CLUSTER_QUEUE, time_range)
        .filter(in_complete_hours(time_range), cluster_queue__team=team)
        .order_by()
        .values("hour", "flavor", queue=F("cluster_queue__name"))
        .annotate(allocated=Sum("allocated_gpu_hours"), nominal=Sum("nominal_gpu_hours"))
    )
