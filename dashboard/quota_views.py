"""Team, cohort, ClusterQueue and workload pages (issue 5): numbers first, then charts, then tables.

Every page is a plain function (STYLE rule 15): ``@dashboard_page`` (login, GET, time range,
freshness), a ``_get_…_for_user`` helper for access (quotas/access.py: staff and finance see
everything, a team lead the detail of their teams and 403 elsewhere), an explicit context dict and
``render``. Figures follow DESIGN "Figures"; figures over the range come from ``HourlyRollup``,
figures "now" from the synced Kueue objects and the newest ``ClusterQueueSample`` of each queue.
The Plotly figures come from the JSON views in ``quotas/charts.py``. Queries per page are bounded:
lists are paginated and every per-row figure is one grouped query over the page's ids.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import (
    Case,
    Count,
    IntegerField,
    Max,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import TruncHour
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from core.figures import ratio
from core.mig import GPU_RESOURCE
from core.quantity import parse_quantity
from core.ranges import TimeRange
from core.timewindows import floor_time
from dashboard.decorators import choice_param, dashboard_page, int_param
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from quotas.access import can_view_cluster_queue, can_view_team, visible_team_ids
from quotas.choices import HOLDING_STATES, TransitionKind, WorkloadState
from quotas.models import (
    Allocation,
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    Team,
    Workload,
    WorkloadTransition,
)
from quotas.reclaim import (
    Borrower,
    ReclaimEstimate,
    ReclaimInputs,
    ReclaimStatus,
    estimate_reclaim,
    median,
    termination_grace_seconds,
)

logger = logging.getLogger(__name__)

PAGE_SIZE = 50
# The recent part of a workload's activity chart is read live from Prometheus when configured.
WORKLOAD_LIVE_SPAN = timedelta(hours=6)
# Rows a page shows of a bounded-but-unpaginated list (a queue's holding workloads, a workload's
# pods and transitions); the page says when there are more.
LIST_LIMIT = 100
# How far back the cohort page looks for preemptions to measure the eviction pace.
PACE_LOOKBACK = timedelta(days=30)
# Preemptions read to measure that pace (the newest ones).
PACE_SAMPLE = 500
PENDING_STATES = (
    WorkloadState.PENDING,
    WorkloadState.EVICTED,
    WorkloadState.PREEMPTED,
    WorkloadState.REQUEUED,
)
WORKLOAD_FILTERS = ("all", "holding", "pending", "finished")


# --- Access -------------------------------------------------------------------------------------


def _allowed(request: HttpRequest) -> set[int] | None:
    """The team ids whose detail the user sees (None = all), computed once per request."""
    cached = getattr(request, "_gpuledger_team_ids", False)
    if cached is False:
        cached = visible_team_ids(request.user)
        request._gpuledger_team_ids = cached  # type: ignore[attr-defined]
    return cached  # type: ignore[return-value]


def sees_team(allowed: set[int] | None, team_id: int | None) -> bool:
    return allowed is None or (team_id is not None and team_id in allowed)


def _get_team_for_user(request: HttpRequest, name: str) -> Team:
    team = get_object_or_404(Team, name=name)
    if not can_view_team(request.user, team):
        raise PermissionDenied("Only this team's leads (and staff) see its detail.")
    return team


def _get_cluster_queue_for_user(request: HttpRequest, cluster: str, name: str) -> ClusterQueue:
    cluster_queue = get_object_or_404(
        ClusterQueue.objects.select_related("cluster", "cohort", "team"),
        cluster__name=cluster,
        name=name,
    )
    if not can_view_cluster_queue(request.user, cluster_queue):
        raise PermissionDenied("Only the owning team's leads (and staff) see this queue.")
    return cluster_queue


def _get_cohort_for_user(request: HttpRequest, cluster: str, name: str) -> Cohort:
    # A cohort is shared by several teams: every signed-in user sees its aggregates; workload
    # names of teams the user does not lead are hidden on the page.
    return get_object_or_404(
        Cohort.objects.select_related("cluster"), cluster__name=cluster, name=name
    )


def _get_workload_for_user(request: HttpRequest, pk: int) -> Workload:
    workload = get_object_or_404(
        Workload.objects.select_related(
            "cluster", "cluster_queue", "cluster_queue__team", "local_queue"
        ),
        pk=pk,
    )
    team_id = workload.cluster_queue.team_id if workload.cluster_queue else None
    if not sees_team(_allowed(request), team_id):
        raise PermissionDenied("Only the owning team's leads (and staff) see this workload.")
    return workload


# --- Formatting ---------------------------------------------------------------------------------


def fmt(value: float | Decimal | None, digits: int = 1) -> str:
    """A figure for a table cell or stat card: whole numbers plain, others rounded; None is "—"."""
    if value is None:
        return "—"
    number = float(value)
    if abs(number - round(number)) < 1e-9:
        return f"{round(number):,}"
    return f"{number:,.{digits}f}"


def fmt_percent(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio * 100:.1f}"


def fmt_duration(seconds: float | None) -> str:
    """``1 d 4 h``, ``3 h 12 min``, ``45 s``; None is "—"."""
    if seconds is None:
        return "—"
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.0f} min"
    hours = int(minutes // 60)
    if hours < 24:
        return f"{hours} h {int(minutes % 60)} min"
    return f"{hours // 24} d {hours % 24} h"


def fmt_quantity(resource: str, value: Decimal | None) -> str:
    """A quota in its resource's unit: null is "unlimited", 0 is 0, memory in GiB."""
    if value is None:
        return "unlimited"
    if resource in ("memory", "ephemeral-storage") or resource.endswith("/memory"):
        gib = Decimal(value) / Decimal(2**30)
        return f"{fmt(gib)} GiB"
    return fmt(value, digits=3)


def _paginate(request: HttpRequest, queryset: QuerySet[Any]) -> tuple[Page, str]:
    number = int_param(request, "page", 1)
    page = Paginator(queryset, PAGE_SIZE).get_page(number)
    query = request.GET.copy()
    query.pop("page", None)
    return page, query.urlencode()


def range_query(request: HttpRequest) -> str:
    """``range=7d`` (or ``start=…&end=…``): appended to chart URLs so charts follow the picker."""
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    query = request.GET.copy()
    for key in list(query):
        if key not in ("range", "start", "end"):
            query.pop(key)
    for key, value in time_range.query().items():
        query[key] = value
    return query.urlencode()


# --- Shared figures -----------------------------------------------------------------------------

ROLLUP_SUMS = {
    "allocated": Sum("allocated_gpu_hours"),
    "nominal": Sum("nominal_gpu_hours"),
    "active": Sum("active_gpu_hours"),
    "telemetry": Sum("telemetry_gpu_hours"),
    "idle": Sum("idle_gpu_hours"),
    "borrowed": Sum("borrowed_gpu_hours"),
    "lent": Sum("lent_gpu_hours"),
    "tensor": Sum("tensor_active_gpu_hours"),
    "tensor_covered": Sum("tensor_covered_gpu_hours"),
    "pending": Sum("pending_gpu_hours"),
}


def rollups_in_range(scope: str, time_range: TimeRange) -> QuerySet[HourlyRollup]:
    return HourlyRollup.objects.filter(
        scope=scope, hour__gte=time_range.hour_start, hour__lt=time_range.end
    )


@dataclass
class RangeFigures:
    """GPU-hour sums of one group over the range (DESIGN "Figures")."""

    allocated: float = 0.0
    nominal: float = 0.0
    active: float = 0.0
    telemetry: float = 0.0
    idle: float = 0.0
    borrowed: float = 0.0
    lent: float = 0.0
    tensor: float = 0.0
    tensor_covered: float = 0.0
    pending: float = 0.0

    @classmethod
    def from_row(cls, row: Mapping[str, Any] | None) -> RangeFigures:
        row = row or {}
        return cls(**{name: float(row.get(name) or 0.0) for name in ROLLUP_SUMS})

    @property
    def utilization(self) -> float | None:
        return ratio(self.active, self.telemetry)

    @property
    def tensor_activity(self) -> float | None:
        return ratio(self.tensor, self.tensor_covered)

    @property
    def coverage(self) -> float | None:
        return ratio(self.telemetry, self.allocated)


def sample_freshness() -> timedelta:
    """How old the newest queue sample may be and still describe "now"."""
    return timedelta(seconds=max(900, 5 * settings.GPULEDGER_COLLECT_SECONDS))


@dataclass
class QueueNow:
    """A ClusterQueue's GPU usage now, per flavor, from its newest samples."""

    total: float = 0.0
    borrowed: float = 0.0
    lent: float = 0.0
    nominal: float = 0.0
    pending: float = 0.0
    sampled_at: datetime | None = None
    flavors: dict[str, dict[str, float]] = field(default_factory=dict)


def latest_samples(queue_filter: Q, now: datetime) -> dict[int, QueueNow]:
    """The newest GPU sample of each (queue, flavor) within ``sample_freshness()``: one query.

    PostgreSQL keeps only the newest row per (queue, flavor) with DISTINCT ON, walking the
    ``quotas_cqsample_window`` unique index; elsewhere the older rows are skipped here.
    """
    samples = ClusterQueueSample.objects.filter(
        queue_filter,
        resource=GPU_RESOURCE,
        sampled_at__gt=now - sample_freshness(),
        sampled_at__lte=now,
    ).order_by("cluster_queue_id", "flavor_name", "-sampled_at")
    if connection.features.can_distinct_on_fields:
        samples = samples.distinct("cluster_queue_id", "flavor_name")
    rows = samples.values(
        "cluster_queue_id",
        "flavor_name",
        "sampled_at",
        "total",
        "borrowed",
        "lent",
        "nominal",
        "pending_demand",
    )
    result: dict[int, QueueNow] = {}
    for row in rows:
        queue = result.setdefault(row["cluster_queue_id"], QueueNow())
        if row["flavor_name"] in queue.flavors:
            continue
        values = {
            "total": float(row["total"]),
            "borrowed": float(row["borrowed"]),
            "lent": float(row["lent"]),
            "nominal": float(row["nominal"]),
            "pending": float(row["pending_demand"]),
        }
        queue.flavors[row["flavor_name"]] = values
        queue.total += values["total"]
        queue.borrowed += values["borrowed"]
        queue.lent += values["lent"]
        queue.nominal += values["nominal"]
        queue.pending += values["pending"]
        if queue.sampled_at is None or row["sampled_at"] > queue.sampled_at:
            queue.sampled_at = row["sampled_at"]
    return result


def gpu_quotas(queue_filter: Q) -> dict[int, list[ClusterQueueQuota]]:
    """GPU quotas per queue, in flavor order: one query."""
    result: dict[int, list[ClusterQueueQuota]] = defaultdict(list)
    for quota in ClusterQueueQuota.objects.filter(queue_filter, resource=GPU_RESOURCE).order_by(
        "cluster_queue_id", "position", "flavor_name"
    ):
        result[quota.cluster_queue_id].append(quota)
    return result


def holding_gpus(queue_filter: Q, group_by: str) -> dict[Any, float]:
    """GPUs admitted to holding workloads, grouped by a ``cluster_queue__…`` field: one query."""
    rows = (
        Workload.objects.holding()
        .filter(queue_filter)
        .order_by()
        .values(group_by)
        .annotate(gpus=Sum("admitted_gpus"))
    )
    return {row[group_by]: float(row["gpus"] or 0.0) for row in rows}


def _workload_row(
    workload: Workload,
    figures: dict[int, RangeFigures],
    allowed: set[int] | None,
    now: datetime,
) -> dict[str, Any]:
    found = figures.get(workload.pk, RangeFigures())
    gpus = workload.admitted_gpus or workload.requested_gpus
    cluster_queue = workload.cluster_queue
    idle_hours = found.idle / gpus if gpus else None
    return {
        "workload": workload,
        "visible": sees_team(allowed, cluster_queue.team_id if cluster_queue else None),
        "gpus": fmt(gpus),
        "flavor": (workload.flavors or {}).get(GPU_RESOURCE, ""),
        "sm_active": fmt_percent(found.utilization),
        "tensor": fmt_percent(found.tensor_activity),
        "idle_hours": fmt(idle_hours) if found.allocated else "—",
        "age": fmt_duration((now - workload.observed_at).total_seconds())
        if workload.observed_at
        else "—",
        "holding": workload.state in HOLDING_STATES,
    }


def workload_figures(ids: list[int], time_range: TimeRange) -> dict[int, RangeFigures]:
    """Range figures of the given workloads from workload-scope rollups: one query."""
    if not ids:
        return {}
    rows = (
        rollups_in_range(RollupScope.WORKLOAD, time_range)
        .filter(workload_id__in=ids)
        .order_by()
        .values("workload_id")
        .annotate(**ROLLUP_SUMS)
    )
    return {row["workload_id"]: RangeFigures.from_row(row) for row in rows}


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


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def stat(label: str, value: str, unit: str = "", note: str = "", **extra: Any) -> dict[str, Any]:
    return {"label": label, "value": value, "unit": unit, "note": note, **extra}


# --- Teams --------------------------------------------------------------------------------------


@dashboard_page
def team_list(request: HttpRequest) -> HttpResponse:
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    allowed = _allowed(request)
    page, page_query = _paginate(request, Team.objects.order_by("name"))
    ids = [team.pk for team in page.object_list]
    rows = (
        rollups_in_range(RollupScope.TEAM, time_range)
        .filter(team_id__in=ids)
        .order_by()
        .values("team_id")
        .annotate(**ROLLUP_SUMS)
    )
    figures = {row["team_id"]: RangeFigures.from_row(row) for row in rows}
    totals = RangeFigures.from_row(
        rollups_in_range(RollupScope.TEAM, time_range)
        .filter(team__isnull=False)
        .aggregate(**ROLLUP_SUMS)
    )
    now_gpus = holding_gpus(Q(cluster_queue__team_id__in=ids), "cluster_queue__team_id")
    table = []
    for team in page.object_list:
        found = figures.get(team.pk, RangeFigures())
        table.append(
            {
                "team": team,
                "visible": sees_team(allowed, team.pk),
                "led": allowed is not None and team.pk in allowed,
                "allocated": fmt(found.allocated),
                "nominal": fmt(found.nominal),
                "active": fmt(found.active),
                "utilization": fmt_percent(found.utilization),
                "idle": fmt(found.idle),
                "borrowed": fmt(found.borrowed),
                "now": fmt(now_gpus.get(team.pk, 0.0)),
                "idle_share": round(100 * (ratio(found.idle, found.allocated) or 0), 1),
            }
        )
    stats = [
        stat(
            "Allocated", fmt(totals.allocated), "GPU-h", time_range.label, testid="stat-allocated"
        ),
        stat("Nominal quota", fmt(totals.nominal), "GPU-h", "Kueue nominal, summed"),
        stat("Real use", fmt(totals.active), "GPU-h", "SM_ACTIVE-weighted", testid="stat-active"),
        stat(
            "Utilization",
            fmt_percent(totals.utilization),
            "%",
            "active / allocated with telemetry",
            tone=_utilization_tone(totals.utilization),
        ),
        stat(
            "Idle",
            fmt(totals.idle),
            "GPU-h",
            "allocated, SM_ACTIVE < idle threshold",
            tone="warn" if totals.idle > 0 else None,
            testid="stat-idle",
        ),
    ]
    context = {
        "nav": "teams",
        "page_title": "Teams",
        "stats": stats,
        "rows": table,
        "page_obj": page,
        "page_query": page_query,
        "sees_all": allowed is None,
        "time_range": time_range,
    }
    return render(request, "quotas/team_list.html", context)


def _utilization_tone(value: float | None) -> str | None:
    if value is None:
        return "neutral"
    if value >= 0.5:
        return "good"
    if value >= 0.2:
        return "warn"
    return "bad"


@dashboard_page
def team_detail(request: HttpRequest, name: str) -> HttpResponse:
    team = _get_team_for_user(request, name)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    allowed = _allowed(request)
    now = timezone.now()
    state = choice_param(request, "state", WORKLOAD_FILTERS, "all")

    figures = RangeFigures.from_row(
        rollups_in_range(RollupScope.TEAM, time_range).filter(team=team).aggregate(**ROLLUP_SUMS)
    )
    queues = list(
        ClusterQueue.objects.present()
        .filter(team=team)
        .select_related("cluster", "cohort")
        .order_by("cluster__name", "name")
    )
    queue_filter = Q(cluster_queue__team=team, cluster_queue__deleted_at__isnull=True)
    quotas = gpu_quotas(queue_filter)
    samples = latest_samples(queue_filter, now)
    holding = holding_gpus(Q(cluster_queue__team=team), "cluster_queue_id")
    pending = (
        Workload.objects.pending()
        .filter(cluster_queue__team=team)
        .aggregate(count=Count("id"), gpus=Sum("requested_gpus"))
    )
    nominal_now = sum(float(q.nominal) for rows in quotas.values() for q in rows)
    allocated_now = sum(holding.values())
    borrowed_now = sum(s.borrowed for s in samples.values()) if samples else None

    queue_rows = []
    for queue in queues:
        now_figures = samples.get(queue.pk)
        queue_rows.append(
            {
                "queue": queue,
                "quotas": quotas.get(queue.pk, []),
                "nominal": fmt(sum(float(q.nominal) for q in quotas.get(queue.pk, []))),
                "usage": fmt(holding.get(queue.pk, 0.0)),
                "borrowed": fmt(now_figures.borrowed) if now_figures else "—",
                "lent": fmt(now_figures.lent) if now_figures else "—",
            }
        )

    workloads = (
        Workload.objects.filter(cluster_queue__team=team)
        .filter(Q(deleted_at__isnull=True) | Q(deleted_at__gte=time_range.start))
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=time_range.start))
        .filter(_state_filter(state))
        .select_related("cluster_queue", "local_queue", "cluster")
        .annotate(state_order=_state_order())
        .order_by("state_order", "-admitted_at", "namespace", "name")
    )
    page, page_query = _paginate(request, workloads)
    per_workload = workload_figures([w.pk for w in page.object_list], time_range)
    workload_rows = [_workload_row(w, per_workload, allowed, now) for w in page.object_list]

    stats = [
        stat(
            "Allocated now",
            fmt(allocated_now),
            "GPUs",
            "admitted to running workloads",
            testid="stat-allocated-now",
        ),
        stat(
            "Nominal quota",
            fmt(nominal_now),
            "GPUs",
            f"{len(queues)} ClusterQueues",
            testid="stat-nominal",
        ),
        stat(
            "Utilization",
            fmt_percent(figures.utilization),
            "%",
            f"SM_ACTIVE-weighted, {time_range.label.lower()}",
            tone=_utilization_tone(figures.utilization),
            testid="stat-utilization",
        ),
        stat(
            "Idle",
            fmt(figures.idle),
            "GPU-h",
            "allocated but SM_ACTIVE below threshold",
            tone="warn" if figures.idle > 0 else "good",
            testid="stat-idle",
        ),
        stat(
            "Borrowed now",
            fmt(borrowed_now),
            "GPUs",
            "above nominal, from the cohort",
            tone="warn" if borrowed_now else None,
            testid="stat-borrowed",
        ),
        stat(
            "Pending demand",
            fmt(pending["gpus"] or 0),
            "GPUs",
            f"{plural(pending['count'], 'workload')} waiting",
            testid="stat-pending",
        ),
    ]
    context = {
        "nav": "teams",
        "page_title": str(team),
        "team": team,
        "stats": stats,
        "figures": figures,
        "allocated_hours": fmt(figures.allocated),
        "active_hours": fmt(figures.active),
        "coverage": fmt_percent(figures.coverage),
        "queue_rows": queue_rows,
        "workload_rows": workload_rows,
        "page_obj": page,
        "page_query": page_query,
        "state": state,
        "state_choices": WORKLOAD_FILTERS,
        "chart_query": range_query(request),
    }
    return render(request, "quotas/team_detail.html", context)


# --- Cohorts ------------------------------------------------------------------------------------


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


@dashboard_page(uses_range=False)
def cohort_list(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    cohorts = (
        Cohort.objects.filter(deleted_at__isnull=True)
        .select_related("cluster")
        .annotate(
            members=Count("cluster_queues", filter=Q(cluster_queues__deleted_at__isnull=True))
        )
        .order_by("cluster__name", "name")
    )
    page, page_query = _paginate(request, cohorts)
    ids = [cohort.pk for cohort in page.object_list]
    queue_filter = Q(cluster_queue__cohort_id__in=ids, cluster_queue__deleted_at__isnull=True)
    nominal = {
        row["cluster_queue__cohort_id"]: float(row["gpus"] or 0)
        for row in ClusterQueueQuota.objects.filter(queue_filter, resource=GPU_RESOURCE)
        .order_by()
        .values("cluster_queue__cohort_id")
        .annotate(gpus=Sum("nominal"))
    }
    usage = holding_gpus(Q(cluster_queue__cohort_id__in=ids), "cluster_queue__cohort_id")
    samples = latest_samples(queue_filter, now)
    cohort_of = dict(
        ClusterQueue.objects.filter(pk__in=list(samples)).values_list("pk", "cohort_id")
    )
    borrowed: dict[int, float] = defaultdict(float)
    lent: dict[int, float] = defaultdict(float)
    for queue_id, found in samples.items():
        borrowed[cohort_of[queue_id]] += found.borrowed
        lent[cohort_of[queue_id]] += found.lent
    rows = []
    for cohort in page.object_list:
        pool = sum(cohort_pool(cohort).values())
        total = nominal.get(cohort.pk, 0.0) + pool
        used = usage.get(cohort.pk, 0.0)
        rows.append(
            {
                "cohort": cohort,
                "nominal": fmt(total),
                "pool": fmt(pool) if pool else "",
                "usage": fmt(used),
                "usage_share": round(100 * min(1.0, ratio(used, total) or 0.0), 1),
                "borrowed": fmt(borrowed.get(cohort.pk)) if samples else "—",
                "lent": fmt(lent.get(cohort.pk)) if samples else "—",
            }
        )
    context = {
        "nav": "cohorts",
        "page_title": "Cohorts",
        "rows": rows,
        "page_obj": page,
        "page_query": page_query,
    }
    return render(request, "quotas/cohort_list.html", context)


@dataclass
class LenderEstimate:
    queue: ClusterQueue
    flavor: str
    lent: float
    policy: str
    pending_count: int
    pending_gpus: float
    pending_priority: int | None
    reference_priority: int | None
    borrowers: list[Borrower]
    estimate: ReclaimEstimate

    @property
    def duration(self) -> str:
        return fmt_duration(self.estimate.seconds)

    @property
    def status_label(self) -> str:
        return {
            ReclaimStatus.FULL: "Fully reclaimable",
            ReclaimStatus.PARTIAL: "Partly reclaimable",
            ReclaimStatus.CANNOT: "Never preempts",
            ReclaimStatus.UNATTRIBUTED: "Borrowers unknown",
            ReclaimStatus.NOTHING_LENT: "Nothing lent",
        }.get(self.estimate.status, self.estimate.status)


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


@dashboard_page
def cohort_detail(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    cohort = _get_cohort_for_user(request, cluster, name)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    allowed = _allowed(request)
    now = timezone.now()
    members = list(
        ClusterQueue.objects.present().filter(cohort=cohort).select_related("team").order_by("name")
    )
    queue_filter = Q(cluster_queue__cohort=cohort, cluster_queue__deleted_at__isnull=True)
    quotas = gpu_quotas(queue_filter)
    samples = latest_samples(queue_filter, now)
    holding = holding_gpus(queue_filter, "cluster_queue_id")
    pool = cohort_pool(cohort)

    pending_rows = (
        Workload.objects.pending()
        .filter(queue_filter)
        .order_by()
        .values("cluster_queue_id")
        .annotate(count=Count("id"), gpus=Sum("requested_gpus"), top=Max("priority"))
    )
    pending: dict[int, dict[str, Any]] = {
        row["cluster_queue_id"]: dict(row) for row in pending_rows
    }
    top_holding = dict(
        Workload.objects.holding()
        .filter(queue_filter)
        .order_by()
        .values("cluster_queue_id")
        .annotate(top=Max("priority"))
        .values_list("cluster_queue_id", "top")
    )
    borrowing = list(
        Workload.objects.holding()
        .filter(queue_filter, borrowing=True)
        .select_related("cluster_queue")
        .order_by("priority", "-admitted_at")[: LIST_LIMIT + 1]
    )
    borrowing_more = len(borrowing) > LIST_LIMIT
    borrowing = borrowing[:LIST_LIMIT]
    pace = eviction_pace(Q(workload__cluster_queue__cohort=cohort), now)

    member_rows = []
    for queue in members:
        found = samples.get(queue.pk)
        queue_pending = pending.get(queue.pk, {})
        member_rows.append(
            {
                "queue": queue,
                "visible": sees_team(allowed, queue.team_id),
                "nominal": fmt(sum(float(q.nominal) for q in quotas.get(queue.pk, []))),
                "usage": fmt(holding.get(queue.pk, 0.0)),
                "borrowed": fmt(found.borrowed) if found else "—",
                "lent": fmt(found.lent) if found else "—",
                "pending": fmt(queue_pending.get("gpus") or 0),
                "policy": queue.reclaim_within_cohort or "Never",
                "weighted_share": queue.weighted_share,
            }
        )

    borrower_rows = []
    for workload in borrowing:
        borrower_queue = workload.cluster_queue
        borrower_rows.append(
            {
                "workload": workload,
                "visible": sees_team(allowed, borrower_queue.team_id if borrower_queue else None),
                "flavor": (workload.flavors or {}).get(GPU_RESOURCE, ""),
                "grace": fmt_duration(termination_grace_seconds(workload.pod_sets)),
                "age": fmt_duration((now - workload.admitted_at).total_seconds())
                if workload.admitted_at
                else "—",
            }
        )

    lenders = []
    queue_by_id = {queue.pk: queue for queue in members}
    for queue_id, found in samples.items():
        lender = queue_by_id.get(queue_id)
        if lender is None:
            continue
        for flavor, values in sorted(found.flavors.items()):
            if values["lent"] <= 0:
                continue
            candidates = [
                Borrower(
                    name=f"{w.namespace}/{w.name}"
                    if sees_team(allowed, w.cluster_queue.team_id if w.cluster_queue else None)
                    else f"hidden workload in {w.cluster_queue}",
                    priority=w.priority,
                    gpus=w.admitted_gpus,
                    grace_seconds=termination_grace_seconds(w.pod_sets),
                    admitted_at=w.admitted_at,
                )
                for w in borrowing
                if w.cluster_queue_id != queue_id
                and (w.flavors or {}).get(GPU_RESOURCE, "") == flavor
            ]
            queue_pending = pending.get(queue_id, {})
            pending_priority = queue_pending.get("top")
            reference = top_holding.get(queue_id)
            inputs = ReclaimInputs(
                lent_gpus=values["lent"],
                policy=lender.reclaim_within_cohort,
                borrowers=candidates,
                pending_priorities=[pending_priority] if pending_priority is not None else [],
                reference_priority=reference,
                preemption_to_admission_seconds=pace["admission_seconds"],
                evictions_per_hour=pace["per_hour"],
            )
            lenders.append(
                LenderEstimate(
                    queue=lender,
                    flavor=flavor,
                    lent=values["lent"],
                    policy=lender.reclaim_within_cohort or "Never",
                    pending_count=queue_pending.get("count", 0),
                    pending_gpus=float(queue_pending.get("gpus") or 0.0),
                    pending_priority=pending_priority,
                    reference_priority=reference,
                    borrowers=candidates,
                    estimate=estimate_reclaim(inputs),
                )
            )

    nominal_total = sum(float(q.nominal) for rows in quotas.values() for q in rows)
    stats = [
        stat(
            "Members",
            str(len(members)),
            "ClusterQueues",
            cohort.parent_name and f"parent cohort {cohort.parent_name}" or "",
        ),
        stat(
            "Nominal quota",
            fmt(nominal_total + sum(pool.values())),
            "GPUs",
            f"incl. shared pool {fmt(sum(pool.values()))}" if pool else "sum of members",
            testid="stat-nominal",
        ),
        stat(
            "In use now",
            fmt(sum(holding.values())),
            "GPUs",
            "admitted workloads",
            testid="stat-usage",
        ),
        stat(
            "Borrowed now",
            fmt(sum(s.borrowed for s in samples.values())) if samples else "—",
            "GPUs",
            "above members' nominal",
            tone="warn" if any(s.borrowed for s in samples.values()) else None,
            testid="stat-borrowed",
        ),
        stat(
            "Lent now",
            fmt(sum(s.lent for s in samples.values())) if samples else "—",
            "GPUs",
            "members' unused quota in use by others",
            testid="stat-lent",
        ),
        stat(
            "Pending demand",
            fmt(sum(float(r.get("gpus") or 0) for r in pending.values())),
            "GPUs",
            f"{plural(sum(r.get('count', 0) for r in pending.values()), 'workload')} waiting",
        ),
    ]
    context = {
        "nav": "cohorts",
        "page_title": f"Cohort {cohort.name}",
        "cohort": cohort,
        "stats": stats,
        "pool": pool,
        "member_rows": member_rows,
        "borrower_rows": borrower_rows,
        "borrowing_more": borrowing_more,
        "lenders": lenders,
        "pace": pace,
        "pace_admission": fmt_duration(pace["admission_seconds"]),
        "pace_per_hour": fmt(pace["per_hour"]) if pace["per_hour"] is not None else "—",
        "statuses": ReclaimStatus,
        "samples_seen": bool(samples),
        "chart_query": range_query(request),
        "time_range": time_range,
    }
    return render(request, "quotas/cohort_detail.html", context)


# --- ClusterQueues ------------------------------------------------------------------------------


@dashboard_page(uses_range=False)
def cluster_queue_list(request: HttpRequest) -> HttpResponse:
    allowed = _allowed(request)
    now = timezone.now()
    search = request.GET.get("q", "").strip()[:253]
    queues = ClusterQueue.objects.present().select_related("cluster", "cohort", "team")
    if search:
        queues = queues.filter(Q(name__icontains=search) | Q(cohort_name__icontains=search))
    page, page_query = _paginate(request, queues.order_by("cluster__name", "name"))
    ids = [queue.pk for queue in page.object_list]
    queue_filter = Q(cluster_queue_id__in=ids)
    quotas = gpu_quotas(queue_filter)
    samples = latest_samples(queue_filter, now)
    holding = holding_gpus(queue_filter, "cluster_queue_id")
    rows = []
    for queue in page.object_list:
        found = samples.get(queue.pk)
        nominal = sum(float(q.nominal) for q in quotas.get(queue.pk, []))
        used = holding.get(queue.pk, 0.0)
        rows.append(
            {
                "queue": queue,
                "visible": sees_team(allowed, queue.team_id),
                "quotas": [
                    {
                        "flavor": q.flavor_name,
                        "nominal": fmt(q.nominal),
                        "borrowing_limit": fmt_quantity(q.resource, q.borrowing_limit),
                    }
                    for q in quotas.get(queue.pk, [])
                ],
                "nominal": fmt(nominal),
                "usage": fmt(used),
                "usage_share": round(100 * min(1.0, ratio(used, nominal) or 0.0), 1),
                "borrowed": fmt(found.borrowed) if found else "—",
                "borrowing": bool(found and found.borrowed > 0),
            }
        )
    context = {
        "nav": "queues",
        "page_title": "ClusterQueues",
        "rows": rows,
        "page_obj": page,
        "page_query": page_query,
        "search": search,
    }
    return render(request, "quotas/cluster_queue_list.html", context)


@dashboard_page
def cluster_queue_detail(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    queue = _get_cluster_queue_for_user(request, cluster, name)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    allowed = _allowed(request)
    now = timezone.now()
    queue_filter = Q(cluster_queue=queue)

    quotas = list(queue.quotas.order_by("resource", "position", "flavor_name"))
    quota_rows = [
        {
            "flavor": q.flavor_name,
            "resource": q.resource,
            "nominal": fmt_quantity(q.resource, q.nominal),
            "borrowing_limit": fmt_quantity(q.resource, q.borrowing_limit),
            "lending_limit": fmt_quantity(q.resource, q.lending_limit),
        }
        for q in quotas
    ]
    found = latest_samples(queue_filter, now).get(queue.pk)
    figures = RangeFigures.from_row(
        rollups_in_range(RollupScope.CLUSTER_QUEUE, time_range)
        .filter(cluster_queue=queue)
        .aggregate(**ROLLUP_SUMS)
    )
    holding = list(
        Workload.objects.holding()
        .filter(cluster_queue=queue)
        .select_related("local_queue")
        .order_by("-priority", "admitted_at")[: LIST_LIMIT + 1]
    )
    holding_more = len(holding) > LIST_LIMIT
    holding = holding[:LIST_LIMIT]
    holding_total = (
        Workload.objects.holding()
        .filter(cluster_queue=queue)
        .aggregate(count=Count("id"), gpus=Sum("admitted_gpus"))
    )
    pending_qs = (
        Workload.objects.pending()
        .filter(cluster_queue=queue)
        .select_related("local_queue")
        .annotate(
            position_missing=Case(
                When(pending_position__isnull=True, then=Value(1)),
                default=Value(0),
                output_field=IntegerField(),
            )
        )
        .order_by("position_missing", "pending_position", "-priority", "observed_at", "name")
    )
    pending_total = (
        Workload.objects.pending()
        .filter(cluster_queue=queue)
        .aggregate(count=Count("id"), gpus=Sum("requested_gpus"))
    )
    page, page_query = _paginate(request, pending_qs)
    page_ids = [w.pk for w in page.object_list]
    requeued = dict(
        WorkloadTransition.objects.filter(
            workload_id__in=page_ids,
            kind__in=[TransitionKind.REQUEUED, TransitionKind.QUOTA_RELEASED],
        )
        .order_by()
        .values("workload_id")
        .annotate(last=Max("at"))
        .values_list("workload_id", "last")
    )
    pending_rows = []
    for workload in page.object_list:
        since = max(
            [moment for moment in (workload.observed_at, requeued.get(workload.pk)) if moment],
            default=None,
        )
        pending_rows.append(
            {
                "workload": workload,
                "wait": fmt_duration((now - since).total_seconds()) if since else "—",
                "waiting_since": since,
                "requeued": workload.pk in requeued,
            }
        )
    evictions = (
        WorkloadTransition.objects.filter(
            workload__cluster_queue=queue,
            kind__in=[TransitionKind.EVICTED, TransitionKind.PREEMPTED],
            at__gt=time_range.start,
            at__lte=time_range.end,
        )
        .order_by()
        .values("kind")
        .annotate(count=Count("id"))
    )
    eviction_counts = {row["kind"]: row["count"] for row in evictions}
    nominal_gpus = sum(float(q.nominal) for q in quotas if q.resource == GPU_RESOURCE)
    stats = [
        stat(
            "Nominal quota",
            fmt(nominal_gpus),
            "GPUs",
            ", ".join(
                f"{q.flavor_name} {fmt(q.nominal)}" for q in quotas if q.resource == GPU_RESOURCE
            ),
            testid="stat-nominal",
        ),
        stat(
            "In use now",
            fmt(holding_total["gpus"] or 0),
            "GPUs",
            f"{plural(holding_total['count'], 'admitted workload')}",
            testid="stat-usage",
        ),
        stat(
            "Borrowed now",
            fmt(found.borrowed) if found else "—",
            "GPUs",
            "from the cohort",
            tone="warn" if found and found.borrowed else None,
            testid="stat-borrowed",
        ),
        stat(
            "Lent now",
            fmt(found.lent) if found else "—",
            "GPUs",
            "in use by other members",
            testid="stat-lent",
        ),
        stat(
            "Pending",
            fmt(pending_total["gpus"] or 0),
            "GPUs",
            f"{plural(pending_total['count'], 'workload')} waiting",
            testid="stat-pending",
        ),
        stat(
            "Utilization",
            fmt_percent(figures.utilization),
            "%",
            time_range.label,
            tone=_utilization_tone(figures.utilization),
        ),
        stat(
            "Evictions",
            str(sum(eviction_counts.values())),
            "",
            f"{eviction_counts.get(TransitionKind.PREEMPTED, 0)} preemptions, "
            f"{time_range.label.lower()}",
            testid="stat-evictions",
        ),
    ]
    context = {
        "nav": "queues",
        "page_title": f"ClusterQueue {queue.name}",
        "queue": queue,
        "cohort_visible": queue.cohort is not None,
        "stats": stats,
        "quota_rows": quota_rows,
        "holding": holding,
        "holding_more": holding_more,
        "pending_rows": pending_rows,
        "page_obj": page,
        "page_query": page_query,
        "chart_query": range_query(request),
        "visible_all": allowed is None,
    }
    return render(request, "quotas/cluster_queue_detail.html", context)


# --- Workloads ----------------------------------------------------------------------------------


@dashboard_page
def workload_detail(request: HttpRequest, pk: int) -> HttpResponse:
    workload = _get_workload_for_user(request, pk)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    allowed = _allowed(request)
    now = timezone.now()
    figures = workload_figures([workload.pk], time_range).get(workload.pk, RangeFigures())
    transitions = list(
        workload.transitions.select_related("preemptor", "preemptor__cluster_queue").order_by(
            "-at", "kind"
        )[:LIST_LIMIT]
    )
    transitions.reverse()
    transition_rows = []
    for transition in transitions:
        preemptor = transition.preemptor
        transition_rows.append(
            {
                "transition": transition,
                "preemptor": preemptor,
                "preemptor_visible": preemptor is not None
                and sees_team(
                    allowed,
                    preemptor.cluster_queue.team_id if preemptor.cluster_queue else None,
                ),
            }
        )
    caused = list(
        workload.preemptions_caused.select_related("workload").order_by("-at")[:LIST_LIMIT]
    )
    allocations = list(
        Allocation.objects.filter(workload=workload)
        .select_related("node")
        .prefetch_related("gpu_devices")
        .order_by("-started_at", "pod")[:LIST_LIMIT]
    )
    pods_running = sum(1 for a in allocations if a.ended_at is None)
    gpus = workload.admitted_gpus or workload.requested_gpus
    end = workload.finished_at or now
    stats = [
        stat(
            "State",
            workload.get_state_display(),
            "",
            workload.state_reason,
            tone="good" if workload.state == WorkloadState.ADMITTED else None,
            testid="stat-state",
        ),
        stat(
            "GPUs held",
            fmt(workload.admitted_gpus),
            "GPUs",
            f"requested {fmt(workload.requested_gpus)}"
            + (
                f", {workload.flavors.get(GPU_RESOURCE)}"
                if workload.flavors.get(GPU_RESOURCE)
                else ""
            ),
            testid="stat-gpus",
        ),
        stat(
            "SM activity",
            fmt_percent(figures.utilization),
            "%",
            f"mean, {time_range.label.lower()}",
            tone=_utilization_tone(figures.utilization),
            testid="stat-sm",
        ),
        stat(
            "Tensor activity",
            fmt_percent(figures.tensor_activity),
            "%",
            "PIPE_TENSOR_ACTIVE",
            testid="stat-tensor",
        ),
        stat(
            "Idle",
            fmt(figures.idle / gpus) if gpus and figures.allocated else "—",
            "h",
            f"{fmt(figures.idle)} idle GPU-hours",
            tone="warn" if figures.idle else None,
            testid="stat-idle",
        ),
        stat(
            "Age",
            fmt_duration((end - workload.observed_at).total_seconds())
            if workload.observed_at
            else "—",
            "",
            f"ran {fmt_duration(workload.accumulated_execution_seconds)} before its last eviction"
            if workload.accumulated_execution_seconds
            else "",
            testid="stat-age",
        ),
        stat("Pods", str(pods_running), "running", f"{len(allocations)} seen"),
    ]
    life_query = ""
    if workload.observed_at and workload.observed_at < end:
        life_start = floor_time(workload.observed_at, 60)
        life_end = floor_time(end, 60) + timedelta(minutes=1)
        if (life_end - life_start).days < settings.GPULEDGER_ROLLUP_RETENTION_DAYS:
            life_query = urlencode(
                {
                    "start": life_start.strftime("%Y-%m-%dT%H:%M"),
                    "end": life_end.strftime("%Y-%m-%dT%H:%M"),
                }
            )
    context = {
        "nav": "teams",
        "page_title": f"{workload.namespace}/{workload.name}",
        "life_query": life_query,
        "workload": workload,
        "stats": stats,
        "transition_rows": transition_rows,
        "caused": caused,
        "allocations": allocations,
        "chart_query": range_query(request),
        "retention_days": settings.GPULEDGER_USAGE_RETENTION_DAYS,
        "has_prometheus": bool(workload.cluster.prometheus_url),
        "live_hours": int(WORKLOAD_LIVE_SPAN.total_seconds() // 3600),
        "flavor": workload.flavors.get(GPU_RESOURCE, "") if workload.flavors else "",
        "pod_sets": workload.pod_sets if isinstance(workload.pod_sets, list) else [],
    }
    return render(request, "quotas/workload_detail.html", context)
