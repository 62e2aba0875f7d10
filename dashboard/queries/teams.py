"""The team pages' reads: teams over the range, one team's queues and workloads, its charts' hours.

Figures over the range come from the read layer (``HourlyRollup.objects…figures``, over the hours
the range counts): team-scope rollups, workload-scope for the workload table, ClusterQueue-scope
for the per-queue chart; figures now from the synced Kueue objects (``quotas.now``).
"""

from __future__ import annotations

from django.db.models import Case, IntegerField, Q, QuerySet, Value, When

from core.ranges import HourSpan, TimeRange
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.range_figures import Figures
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


def figures_by_team(ids: list[int], span: HourSpan) -> dict[int, Figures]:
    """The given teams' figures over the span: one grouped query."""
    return (
        HourlyRollup.objects.for_scope(RollupScope.TEAM)
        .covering(span)
        .filter(team_id__in=ids)
        .figures(group_by=("team_id",))
    )


def schedulers_by_team(ids: list[int] | None = None) -> dict[int, list[str]]:
    """The schedulers of the given teams' queues, of every team's without ``ids`` (one query),
    to word their quota figures."""
    queues = ClusterQueue.objects.filter(team__isnull=False, deleted_at__isnull=True)
    if ids is not None:
        queues = queues.filter(team_id__in=ids)
    found: dict[int, list[str]] = {}
    for team_id, scheduler in queues.order_by().values_list("team_id", "scheduler").distinct():
        found.setdefault(team_id, []).append(scheduler)
    return found


def all_teams_figures(span: HourSpan) -> Figures:
    """Every team's figures over the span together: one aggregate."""
    return (
        HourlyRollup.objects.for_scope(RollupScope.TEAM)
        .covering(span)
        .filter(team__isnull=False)
        .total()
    )


def other_teams_figures(shown: set[int], span: HourSpan) -> Figures:
    """The figures of every team outside ``shown`` together: one aggregate."""
    return (
        HourlyRollup.objects.for_scope(RollupScope.TEAM)
        .covering(span)
        .filter(team__isnull=False)
        .exclude(team_id__in=shown)
        .total()
    )


# --- One team -----------------------------------------------------------------------------------


def team_total(team: Team, span: HourSpan) -> Figures:
    """One team's figures over the span: one aggregate."""
    return HourlyRollup.objects.for_scope(RollupScope.TEAM).filter(team=team).covering(span).total()


def workload_figures(ids: list[int], span: HourSpan) -> dict[int, Figures]:
    """The given workloads' figures over the span (workload-scope rollups): one query."""
    if not ids:
        return {}
    return (
        HourlyRollup.objects.for_scope(RollupScope.WORKLOAD)
        .covering(span)
        .filter(workload_id__in=ids)
        .figures(group_by=("workload_id",))
    )


def team_queues(team: Team) -> list[ClusterQueue]:
    return list(
        ClusterQueue.objects.present()
        .filter(team=team)
        .select_related("cluster", "cohort")
        .order_by("cluster__name", "name")
    )


def _state_order() -> Case:
    return Case(
        When(state__in=HOLDING_STATES, then=Value(0)),
        When(state__in=PENDING_STATES, then=Value(1)),
        default=Value(2),
        output_field=IntegerField(),
    )


def state_filter(state: str) -> Q:
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
        .filter(state_filter(state))
        .select_related("cluster_queue", "local_queue", "cluster")
        # The table shows neither (JSON): not read for a page of rows. ``state_message`` is:
        # a pending row says why it waits.
        .defer("labels", "pod_sets")
        .annotate(state_order=_state_order())
        .order_by("state_order", "-admitted_at", "namespace", "name")
    )


# --- Charts -------------------------------------------------------------------------------------


# What the team's allocation chart plots (dashboard.charts.teams): reading only these keeps the
# per-hour series cheap over 30 days.
TEAM_CHART_FIGURES = (
    "allocated_gpu_hours",
    "nominal_gpu_hours",
    "borrowed_gpu_hours",
    "active_gpu_hours",
    "telemetry_gpu_hours",
)


def team_hours(team: Team, span: HourSpan) -> list[Figures | None]:
    """The team's figures per hour the span counts (None: no rollup that hour)."""
    return (
        HourlyRollup.objects.for_scope(RollupScope.TEAM)
        .filter(team=team)
        .hourly(span, names=TEAM_CHART_FIGURES)
    )


def team_queue_hours(
    team: Team, span: HourSpan, names: tuple[str, ...]
) -> dict[tuple[str, str, str, str], list[Figures | None]]:
    """Per (cluster, ClusterQueue name, its scheduler, flavor) of the team: a ``Figures`` or None
    per hour of the span, with the figures ``names`` the chart plots (see
    ``cohorts.member_hours``)."""
    return (
        HourlyRollup.objects.for_scope(RollupScope.CLUSTER_QUEUE)
        .filter(cluster_queue__team=team)
        .series(
            span,
            (
                "cluster_queue__cluster__name",
                "cluster_queue__name",
                "cluster_queue__scheduler",
                "flavor",
            ),
            names=names,
        )
    )
