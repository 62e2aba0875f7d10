"""The Plotly figures of the team, cohort, ClusterQueue and workload pages, as small JSON views.

Each view checks access with the page's own ``_get_…_for_user`` helper, reads a bounded number of
grouped queries (independent of how many rows they cover) and returns ``core.plotting.figure``.
Time series are hourly: an hour's GPU-hours are that hour's mean GPUs (DESIGN "Figures"). Only
complete hours are plotted; an hour without a rollup row is a gap ("no data"), never 0.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Avg, Count, F, Max, Min, Q, Sum
from django.db.models.functions import TruncHour
from django.http import HttpRequest
from django.utils import timezone

from core import plotting
from core.ranges import CUSTOM, TimeRange
from core.timewindows import hour_floor
from dashboard.decorators import chart_view, choice_param
from dashboard.fleet_charts import live_series, promql_string
from dashboard.quota_views import (
    WORKLOAD_LIVE_SPAN,
    _get_cluster_queue_for_user,
    _get_cohort_for_user,
    _get_team_for_user,
    _get_workload_for_user,
    rollups_in_range,
)
from fleet.choices import PodLabelStyle
from fleet.constants import DCGM_METRICS
from fleet.models import Gpu
from ledger.choices import RollupScope
from ledger.models import GpuUsage
from quotas.choices import TransitionKind
from quotas.models import Allocation, Workload, WorkloadTransition

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
GPUS_AXIS = "GPUs (hourly mean)"
TIME_AXIS = "Time (UTC)"
# Series drawn one by one before the rest is summed into "Other": more lines than this are
# unreadable, and the payload stays small however many queues a team or cohort has.
MAX_SERIES = 10
# Per-GPU lines on the workload activity chart; bigger gangs get their mean and spread.
MAX_GPU_LINES = 8
MAX_LIVE_PODS = 64
# Ranges up to this long plot per-GPU activity per collection window; longer ones per hour.
RAW_WINDOW_RANGE = timedelta(hours=12)
# Transitions drawn on a workload's timeline (the newest ones).
MAX_TRANSITIONS = 500
ACTIVITY_METRICS = ("sm_active", "tensor")


def _x(hours: Iterable[datetime]) -> list[str]:
    return [plotting.iso(hour) for hour in hours]


def _range_layout(time_range: TimeRange, title: str, y_title: str, **extra: Any) -> dict:
    result = plotting.layout(title, x_title=TIME_AXIS, y_title=y_title, **extra)
    result["xaxis"]["type"] = "date"
    result["xaxis"]["range"] = [plotting.iso(time_range.start), plotting.iso(time_range.end)]
    return result


def legend_room(layout: dict[str, Any], entries: int, per_row: int = 4) -> dict[str, Any]:
    """Make the top margin fit a horizontal legend of ``entries`` items above the plot."""
    rows = max(1, -(-entries // per_row))
    layout["margin"] = {**layout.get("margin", {}), "t": 56 + 22 * rows}
    layout["height"] = layout.get("height", 360) + 22 * (rows - 1)
    return layout


def legend_right(layout: dict[str, Any]) -> dict[str, Any]:
    """A vertical legend right of the plot, for many short-lived series (one per GPU)."""
    layout["legend"] = {
        "orientation": "v",
        "x": 1.02,
        "xanchor": "left",
        "y": 1,
        "yanchor": "top",
        "font": {"size": 11},
    }
    layout["margin"] = {**layout.get("margin", {}), "r": 10, "t": 56}
    return layout


def _complete(time_range: TimeRange) -> Q:
    return Q(hour__gte=time_range.hour_start, hour__lt=hour_floor(time_range.end))


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def borrowing_shapes(hours: list[datetime], borrowed: list[float | None]) -> list[dict]:
    """One shaded rectangle per run of consecutive hours with borrowed GPUs > 0."""
    shapes = []
    start: datetime | None = None
    for index, hour in enumerate(hours):
        value = borrowed[index]
        if value is not None and value > 0:
            if start is None:
                start = hour
            end = hour + HOUR
        elif start is not None:
            shapes.append((start, end))
            start = None
    if start is not None:
        shapes.append((start, end))
    # Points sit on hour starts: a shaded run is centred on its points, half an hour each side.
    half = HOUR / 2
    return [
        {
            "type": "rect",
            "xref": "x",
            "yref": "paper",
            "x0": plotting.iso(x0 - half),
            "x1": plotting.iso(x1 - half),
            "y0": 0,
            "y1": 1,
            "fillcolor": plotting.COLORS["borrowed"],
            "opacity": 0.12,
            "line": {"width": 0},
            "layer": "below",
            "name": "borrowing",
        }
        for x0, x1 in shapes
    ]


def _legend_swatch(name: str, color: str) -> dict[str, Any]:
    """A legend entry for shaded areas (layout shapes have none of their own)."""
    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": [None],
        "y": [None],
        "marker": {"symbol": "square", "size": 14, "color": color, "opacity": 0.35},
        "hoverinfo": "skip",
    }


def _top_series(totals: dict[str, float], limit: int = MAX_SERIES) -> tuple[list[str], set[str]]:
    """The ``limit`` largest series by total, in name order, and the rest."""
    ranked = sorted(totals, key=lambda name: (-totals[name], name))
    kept = sorted(ranked[:limit])
    return kept, set(ranked[limit:])


def _stacked(
    rows: Sequence[Mapping[str, Any]],
    series_of: Any,
    value: str,
    hours: list[datetime],
) -> tuple[list[str], dict[str, list[float | None]]]:
    """Per-series hourly values (top series plus "Other"); hours without rows are gaps."""
    index = {hour: i for i, hour in enumerate(hours)}
    per_series: dict[str, list[float | None]] = {}
    totals: dict[str, float] = defaultdict(float)
    for row in rows:
        totals[series_of(row)] += float(row[value] or 0.0)
    kept, rest = _top_series(totals)
    names = kept + (["Other"] if rest else [])
    for name in names:
        per_series[name] = [None] * len(hours)
    for row in rows:
        position = index.get(row["hour"])
        if position is None:
            continue
        name = series_of(row)
        target = "Other" if name in rest else name
        current = per_series[target][position] or 0.0
        per_series[target][position] = current + float(row[value] or 0.0)
    return names, per_series


# --- Team ---------------------------------------------------------------------------------------


@chart_view
def team_allocation_chart(request: HttpRequest, name: str) -> dict[str, Any]:
    """Allocated vs nominal quota vs SM_ACTIVE-weighted use, borrowing periods shaded."""
    team = _get_team_for_user(request, name)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    hours = time_range.complete_hours()
    rows: dict[datetime, dict[str, Any]] = {
        row["hour"]: dict(row)
        for row in rollups_in_range(RollupScope.TEAM, time_range)
        .filter(_complete(time_range), team=team)
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

    def series(key: str) -> list[float | None]:
        return [_round(rows[h][key]) if h in rows else None for h in hours]

    active = [
        _round(rows[h]["active"]) if h in rows and (rows[h]["telemetry"] or 0) > 0 else None
        for h in hours
    ]
    borrowed = series("borrowed")
    x = _x(hours)
    data = [
        plotting.line(
            "Allocated", x, series("allocated"), color=plotting.COLORS["allocated"], unit="GPUs"
        ),
        plotting.line(
            "Nominal quota",
            x,
            series("nominal"),
            color=plotting.COLORS["nominal"],
            unit="GPUs",
            dash="dash",
        ),
        plotting.line(
            "Real use (SM_ACTIVE-weighted)",
            x,
            active,
            color=plotting.COLORS["active"],
            unit="GPUs",
            fill="tozeroy",
        ),
        plotting.line("Borrowed", x, borrowed, color=plotting.COLORS["borrowed"], unit="GPUs"),
    ]
    shapes = borrowing_shapes(hours, borrowed)
    if shapes:
        data.append(_legend_swatch("Borrowing period", plotting.COLORS["borrowed"]))
    layout = _range_layout(
        time_range,
        f"{team}: allocation vs quota vs real use",
        GPUS_AXIS,
        shapes=shapes,
    )
    legend_room(layout, len(data), per_row=5)
    return plotting.figure(
        data,
        layout,
        empty_message="No rollups for this team in this range.",
        meta={"borrowing_periods": len(shapes), "hours": len(hours)},
    )


@chart_view
def team_queues_chart(request: HttpRequest, name: str) -> dict[str, Any]:
    """Allocated GPUs per ClusterQueue and flavor (stacked) with each one's nominal quota."""
    team = _get_team_for_user(request, name)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    hours = time_range.complete_hours()
    rows = list(
        rollups_in_range(RollupScope.CLUSTER_QUEUE, time_range)
        .filter(_complete(time_range), cluster_queue__team=team)
        .order_by()
        .values("hour", "flavor", queue=F("cluster_queue__name"))
        .annotate(allocated=Sum("allocated_gpu_hours"), nominal=Sum("nominal_gpu_hours"))
    )

    def label(row: dict[str, Any]) -> str:
        return f"{row['queue']} · {row['flavor'] or 'no flavor'}"

    names, allocated = _stacked(rows, label, "allocated", hours)
    _, nominal = _stacked(rows, label, "nominal", hours)
    x = _x(hours)
    data = []
    for position, series in enumerate(names):
        color = plotting.SERIES[position % len(plotting.SERIES)]
        trace = plotting.line(
            f"{series} allocated",
            x,
            [_round(v) for v in allocated[series]],
            color=color,
            unit="GPUs",
            stackgroup="allocated",
        )
        trace["legendgroup"] = series
        data.append(trace)
    for position, series in enumerate(names):
        if series == "Other" or series not in nominal:
            continue
        color = plotting.SERIES[position % len(plotting.SERIES)]
        trace = plotting.line(
            f"{series} nominal",
            x,
            [_round(v) for v in nominal[series]],
            color=color,
            unit="GPUs",
            dash="dot",
        )
        trace["legendgroup"] = series
        data.append(trace)
    layout = _range_layout(
        time_range, "Allocated GPUs per ClusterQueue and flavor (dotted: nominal)", GPUS_AXIS
    )
    legend_room(layout, len(data), per_row=3)
    return plotting.figure(data, layout, empty_message="No queue rollups in this range.")


# --- Cohort -------------------------------------------------------------------------------------


def _member_rows(cohort_id: int, time_range: TimeRange) -> list[dict[str, Any]]:
    return [
        dict(row)
        for row in rollups_in_range(RollupScope.CLUSTER_QUEUE, time_range)
        .filter(
            _complete(time_range),
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


@chart_view
def cohort_usage_chart(request: HttpRequest, cluster: str, name: str) -> dict[str, Any]:
    """Allocated GPUs per member ClusterQueue, stacked, against the members' nominal sum."""
    cohort = _get_cohort_for_user(request, cluster, name)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    hours = time_range.complete_hours()
    rows = _member_rows(cohort.pk, time_range)
    names, allocated = _stacked(rows, lambda row: row["queue"], "allocated", hours)
    nominal_by_hour: dict[datetime, float] = defaultdict(float)
    for row in rows:
        nominal_by_hour[row["hour"]] += float(row["nominal"] or 0.0)
    x = _x(hours)
    data = [
        plotting.line(
            series,
            x,
            [_round(v) for v in allocated[series]],
            color=plotting.SERIES[i % len(plotting.SERIES)],
            unit="GPUs",
            stackgroup="usage",
        )
        for i, series in enumerate(names)
    ]
    data.append(
        plotting.line(
            "Nominal quota (members)",
            x,
            [_round(nominal_by_hour[h]) if h in nominal_by_hour else None for h in hours],
            color=plotting.COLORS["nominal"],
            unit="GPUs",
            dash="dash",
        )
    )
    layout = _range_layout(time_range, f"Cohort {cohort.name}: usage per member", GPUS_AXIS)
    legend_room(layout, len(data), per_row=4)
    return plotting.figure(data, layout, empty_message="No member rollups in this range.")


@chart_view
def cohort_borrowing_chart(request: HttpRequest, cluster: str, name: str) -> dict[str, Any]:
    """Borrowed (above zero) and lent (below zero) GPUs per member ClusterQueue, stacked."""
    cohort = _get_cohort_for_user(request, cluster, name)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    hours = time_range.complete_hours()
    rows = _member_rows(cohort.pk, time_range)
    borrowed_names, borrowed = _stacked(rows, lambda row: row["queue"], "borrowed", hours)
    lent_names, lent = _stacked(rows, lambda row: row["queue"], "lent", hours)
    colors = {
        name: plotting.SERIES[i % len(plotting.SERIES)]
        for i, name in enumerate(sorted(set(borrowed_names) | set(lent_names)))
    }
    x = _x(hours)
    data = []
    for series in borrowed_names:
        values = borrowed[series]
        if not any(values):
            continue
        trace = plotting.bar(
            f"{series} borrowed", x, [_round(v) for v in values], color=colors[series], unit="GPUs"
        )
        trace["legendgroup"] = series
        data.append(trace)
    for series in lent_names:
        values = lent[series]
        if not any(values):
            continue
        trace = plotting.bar(
            f"{series} lent",
            x,
            [None if v is None else -round(v, 3) for v in values],
            color=colors[series],
            unit="GPUs",
        )
        trace["marker"]["pattern"] = {"shape": "/"}
        trace["legendgroup"] = series
        data.append(trace)
    layout = _range_layout(
        time_range,
        "Borrowed (above 0) and lent (below 0) per member",
        "GPUs (hourly mean)",
        barmode="relative",
        bargap=0.05,
    )
    legend_room(layout, len(data), per_row=3)
    return plotting.figure(data, layout, empty_message="No borrowing or lending in this range.")


# --- ClusterQueue -------------------------------------------------------------------------------


@chart_view
def cluster_queue_usage_chart(request: HttpRequest, cluster: str, name: str) -> dict[str, Any]:
    """Allocated per flavor (stacked), nominal, borrowed, lent, real use and pending demand."""
    queue = _get_cluster_queue_for_user(request, cluster, name)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    hours = time_range.complete_hours()
    rows = list(
        rollups_in_range(RollupScope.CLUSTER_QUEUE, time_range)
        .filter(_complete(time_range), cluster_queue=queue)
        .order_by()
        .values("hour", "flavor")
        .annotate(
            allocated=Sum("allocated_gpu_hours"),
            nominal=Sum("nominal_gpu_hours"),
            borrowed=Sum("borrowed_gpu_hours"),
            lent=Sum("lent_gpu_hours"),
            active=Sum("active_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
            pending=Sum("pending_gpu_hours"),
        )
    )
    names, allocated = _stacked(rows, lambda row: row["flavor"] or "no flavor", "allocated", hours)
    totals: dict[datetime, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        for key in ("nominal", "borrowed", "lent", "active", "telemetry", "pending"):
            totals[row["hour"]][key] += float(row[key] or 0.0)

    def total(key: str) -> list[float | None]:
        return [_round(totals[h][key]) if h in totals else None for h in hours]

    active = [
        _round(totals[h]["active"]) if h in totals and totals[h]["telemetry"] > 0 else None
        for h in hours
    ]
    x = _x(hours)
    data = [
        plotting.line(
            f"Allocated {series}",
            x,
            [_round(v) for v in allocated[series]],
            color=plotting.SERIES[i % len(plotting.SERIES)],
            unit="GPUs",
            stackgroup="allocated",
        )
        for i, series in enumerate(names)
    ]
    borrowed = total("borrowed")
    data += [
        plotting.line(
            "Nominal quota",
            x,
            total("nominal"),
            color=plotting.COLORS["nominal"],
            unit="GPUs",
            dash="dash",
        ),
        plotting.line("Borrowed", x, borrowed, color=plotting.COLORS["borrowed"], unit="GPUs"),
        plotting.line("Lent", x, total("lent"), color=plotting.COLORS["lent"], unit="GPUs"),
        plotting.line(
            "Real use (SM_ACTIVE-weighted)", x, active, color=plotting.COLORS["active"], unit="GPUs"
        ),
        plotting.line(
            "Pending demand",
            x,
            total("pending"),
            color=plotting.COLORS["pending"],
            unit="GPUs",
            dash="dot",
        ),
    ]
    shapes = borrowing_shapes(hours, borrowed)
    if shapes:
        data.append(_legend_swatch("Borrowing period", plotting.COLORS["borrowed"]))
    layout = _range_layout(
        time_range, f"ClusterQueue {queue.name}: usage and borrowing", GPUS_AXIS, shapes=shapes
    )
    legend_room(layout, len(data), per_row=8)
    return plotting.figure(data, layout, empty_message="No rollups for this queue in this range.")


@chart_view
def cluster_queue_evictions_chart(request: HttpRequest, cluster: str, name: str) -> dict[str, Any]:
    """Evictions and preemptions of the queue's workloads per hour, by kind and reason."""
    queue = _get_cluster_queue_for_user(request, cluster, name)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    rows = list(
        WorkloadTransition.objects.filter(
            workload__cluster_queue=queue,
            kind__in=[TransitionKind.EVICTED, TransitionKind.PREEMPTED],
            at__gt=time_range.start,
            at__lte=time_range.end,
        )
        .annotate(bucket=TruncHour("at"))
        .order_by()
        .values("bucket", "kind", "reason")
        .annotate(count=Count("id"))
    )
    series: dict[str, dict[datetime, int]] = defaultdict(dict)
    for row in rows:
        label = f"{TransitionKind(row['kind']).label}: {row['reason'] or 'no reason'}"
        series[label][row["bucket"]] = row["count"]
    palette = [plotting.COLORS["idle"], plotting.COLORS["borrowed"], *plotting.SERIES]
    data = []
    for i, label in enumerate(sorted(series)):
        buckets = sorted(series[label])
        data.append(
            plotting.bar(
                label,
                _x(buckets),
                [series[label][b] for b in buckets],
                color=palette[i % len(palette)],
                unit="per hour",
            )
        )
    layout = _range_layout(
        time_range,
        "Evictions and preemptions per hour",
        "Evictions (count per hour)",
        barmode="stack",
    )
    legend_room(layout, len(data), per_row=3)
    return plotting.figure(data, layout, empty_message="No evictions or preemptions in this range.")


# --- Workload -----------------------------------------------------------------------------------

# Where each transition leaves the workload, as a row of the Gantt chart; None = an end point.
PHASES = {
    TransitionKind.CREATED: "Pending",
    TransitionKind.REQUEUED: "Pending",
    TransitionKind.QUOTA_RELEASED: "Pending",
    TransitionKind.QUOTA_RESERVED: "Quota reserved",
    TransitionKind.ADMITTED: "Admitted",
    TransitionKind.PODS_READY: "Running",
    TransitionKind.EVICTED: "Evicted",
    TransitionKind.PREEMPTED: "Evicted",
    TransitionKind.DEACTIVATED: "Deactivated",
    TransitionKind.FINISHED: None,
    TransitionKind.DELETED: None,
}
PHASE_ORDER = ["Pending", "Quota reserved", "Admitted", "Running", "Evicted", "Deactivated"]
PHASE_COLORS = {
    "Pending": plotting.COLORS["pending"],
    "Quota reserved": plotting.COLORS["nominal"],
    "Admitted": plotting.COLORS["allocated"],
    "Running": plotting.COLORS["active"],
    "Evicted": plotting.COLORS["idle"],
    "Deactivated": plotting.COLORS["no_data"],
}


def timeline_segments(
    transitions: Sequence[Mapping[str, Any]], end: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(phase segments, end points) from transitions in time order; the last phase runs to end."""
    segments: list[dict[str, Any]] = []
    points: list[dict[str, Any]] = []
    for index, transition in enumerate(transitions):
        phase = PHASES.get(transition["kind"])
        text = transition["reason"] or TransitionKind(transition["kind"]).label
        if transition["message"]:
            text = f"{text}: {transition['message'][:200]}"
        if phase is None:
            points.append({"at": transition["at"], "kind": transition["kind"], "text": text})
            continue
        following = transitions[index + 1]["at"] if index + 1 < len(transitions) else end
        segments.append(
            {
                "phase": phase,
                "start": transition["at"],
                "end": max(following, transition["at"]),
                "text": text,
                "kind": transition["kind"],
            }
        )
    return segments, points


@chart_view(uses_range=False)
def workload_timeline_chart(request: HttpRequest, pk: int) -> dict[str, Any]:
    """Gantt-style phases of the workload's life, one bar per transition, reasons on hover."""
    workload = _get_workload_for_user(request, pk)
    now = timezone.now()
    transitions = list(
        WorkloadTransition.objects.filter(workload=workload)
        .order_by("-at", "kind")
        .values("kind", "at", "reason", "message")[:MAX_TRANSITIONS]
    )
    transitions.reverse()
    recorded = len(transitions)
    created = workload.observed_at
    if created is not None and (not transitions or created < transitions[0]["at"]):
        # Kueue keeps no "created" condition: the wait before the first transition is a phase too.
        transitions.insert(
            0,
            {"kind": TransitionKind.CREATED, "at": created, "reason": "Created", "message": ""},
        )
    end = workload.finished_at or (workload.deleted_at or now)
    segments, points = timeline_segments(transitions, end)
    data = []
    for phase in PHASE_ORDER:
        rows = [s for s in segments if s["phase"] == phase]
        if not rows:
            continue
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": phase,
                "y": [phase] * len(rows),
                "base": [plotting.iso(s["start"]) for s in rows],
                "x": [max(1000.0, (s["end"] - s["start"]).total_seconds() * 1000) for s in rows],
                "customdata": [
                    [s["text"], plotting.iso(s["start"]), plotting.iso(s["end"])] for s in rows
                ],
                "hovertemplate": "%{customdata[1]|%Y-%m-%d %H:%M:%S} → "
                "%{customdata[2]|%Y-%m-%d %H:%M:%S}<br>%{customdata[0]}<extra>"
                f"{phase}</extra>",
                "marker": {"color": PHASE_COLORS[phase]},
            }
        )
    if points:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "Finished / deleted",
                "x": [plotting.iso(p["at"]) for p in points],
                "y": ["Running"] * len(points),
                "text": [p["text"] for p in points],
                "hovertemplate": "%{x}<br>%{text}<extra>end</extra>",
                "marker": {"symbol": "x", "size": 12, "color": "#111827"},
            }
        )
    layout = plotting.layout(
        "Timeline of state transitions",
        x_title=TIME_AXIS,
        y_title="Phase",
        height=300,
        barmode="overlay",
        hovermode="closest",
    )
    layout["xaxis"]["type"] = "date"
    layout["yaxis"] = plotting.axis(
        "Phase",
        categoryorder="array",
        categoryarray=list(reversed(PHASE_ORDER)),
        type="category",
    )
    return plotting.figure(
        data,
        layout,
        empty_message="No transitions recorded for this workload yet.",
        meta={"transitions": recorded},
    )


@chart_view
def workload_activity_chart(request: HttpRequest, pk: int) -> dict[str, Any]:
    """Per-GPU SM_ACTIVE (``metric=sm_active``) or tensor activity (``metric=tensor``), in %.

    Recent hours come from the stored collection windows (kept ``GPULEDGER_USAGE_RETENTION_DAYS``);
    hours before them from the workload's hourly rollups, as the workload mean.
    """
    workload = _get_workload_for_user(request, pk)
    metric = choice_param(request, "metric", ACTIVITY_METRICS, "sm_active")
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    field = "activity" if metric == "sm_active" else "pipe_tensor_active"
    usage = GpuUsage.objects.filter(
        workload=workload,
        allocated=True,
        window_end__gt=time_range.start,
        window_end__lte=time_range.end,
    )
    summary = usage.aggregate(
        first=Min("window_end"), gpus=Count("gpu_key", distinct=True), last=Max("window_end")
    )
    per_gpu = summary["gpus"] <= MAX_GPU_LINES
    raw = time_range.end - time_range.start <= RAW_WINDOW_RANGE
    bucket = F("window_end") if raw else TruncHour("window_end")
    data = []
    source = "stored"
    notice = ""
    live: dict[str, list[tuple[datetime, float | None]]] = {}
    live_start: datetime | None = None
    if per_gpu and workload.cluster.prometheus_url:
        live_start = max(time_range.start, time_range.end - WORKLOAD_LIVE_SPAN)
        try:
            live = live_workload_points(workload, metric, live_start, time_range)
            source = "live"
        except Exception as exc:  # PrometheusError, or a secret that cannot be read
            logger.warning("workload %s: Prometheus range query failed: %s", workload.pk, exc)
            notice = f"Prometheus could not be queried ({exc}); showing stored windows."
            live_start = None
    if per_gpu:
        stored = usage if live_start is None else usage.filter(window_end__lte=live_start)
        rows = list(
            stored.annotate(bucket=bucket)
            .order_by()
            .values("gpu_key", "bucket")
            .annotate(value=Avg(field))
        )
        by_gpu: dict[str, list[tuple[datetime, float | None]]] = defaultdict(list)
        for row in rows:
            by_gpu[row["gpu_key"] or "no telemetry"].append((row["bucket"], row["value"]))
        for key, points in live.items():
            by_gpu[key].extend(points)
        for i, key in enumerate(sorted(by_gpu)):
            points = sorted(by_gpu[key], key=lambda point: point[0])
            data.append(
                plotting.line(
                    _gpu_label(key),
                    _x(p[0] for p in points),
                    [plotting.percent(p[1]) for p in points],
                    color=plotting.SERIES[i % len(plotting.SERIES)],
                    unit="%",
                )
            )
    else:
        # A big gang: its mean, and the lowest and highest GPU (per window, or within the hour).
        spread = sorted(
            usage.annotate(bucket=bucket)
            .order_by()
            .values("bucket")
            .annotate(value=Avg(field), low=Min(field), high=Max(field)),
            key=lambda row: row["bucket"],
        )
        x = _x(row["bucket"] for row in spread)
        color = plotting.COLORS["active" if metric == "sm_active" else "tensor"]
        low = plotting.line(
            "Lowest GPU", x, [plotting.percent(r["low"]) for r in spread], color=color, unit="%"
        )
        low["line"]["width"] = 0
        high = plotting.line(
            "Highest GPU",
            x,
            [plotting.percent(r["high"]) for r in spread],
            color=color,
            unit="%",
            fill="tonexty",
        )
        high["line"]["width"] = 0
        high["fillcolor"] = "rgba(100, 116, 139, 0.2)"
        data += [
            low,
            high,
            plotting.line(
                f"Mean of {summary['gpus']} GPUs",
                x,
                [plotting.percent(r["value"]) for r in spread],
                color=color,
                unit="%",
            ),
        ]
    # Hours before the first stored window: the workload mean from hourly rollups.
    older_than = hour_floor(summary["first"]) if summary["first"] else time_range.end
    numerator, denominator = (
        ("active_gpu_hours", "telemetry_gpu_hours")
        if metric == "sm_active"
        else ("tensor_active_gpu_hours", "tensor_covered_gpu_hours")
    )
    rollups = list(
        rollups_in_range(RollupScope.WORKLOAD, time_range)
        .filter(workload=workload, hour__lt=older_than)
        .order_by()
        .values("hour")
        .annotate(part=Sum(numerator), whole=Sum(denominator))
        .order_by("hour")
    )
    if rollups:
        data.append(
            plotting.line(
                "Workload mean (hourly rollup)",
                _x(row["hour"] + HOUR / 2 for row in rollups),
                [
                    plotting.percent(row["part"] / row["whole"]) if row["whole"] else None
                    for row in rollups
                ],
                color=plotting.COLORS["nominal"],
                unit="%",
                dash="dot",
            )
        )
        # Markers, so a lone hour is visible too.
        data[-1]["mode"] = "lines+markers"
        data[-1]["marker"] = {"size": 5}
    title = "SM_ACTIVE per GPU" if metric == "sm_active" else "Tensor pipe activity per GPU"
    if not per_gpu:
        title = title.replace("per GPU", "of the gang: mean and GPU range")
    layout = _range_layout(
        time_range,
        title,
        "SM_ACTIVE (%)" if metric == "sm_active" else "PIPE_TENSOR_ACTIVE (%)",
    )
    layout["yaxis"]["range"] = [0, 100]
    layout["yaxis"].pop("rangemode", None)
    if per_gpu:
        legend_right(layout)
    else:
        legend_room(layout, len(data), per_row=4)
    return plotting.figure(
        data,
        layout,
        empty_message="No telemetry for this workload in this range.",
        meta={
            "metric": metric,
            "gpus": summary["gpus"],
            "per_gpu": per_gpu,
            "resolution": "window" if raw else "hour",
            "rollup_hours": len(rollups),
            "source": source,
            "live_start": plotting.iso(live_start) if live_start else None,
            "notice": notice,
            "retention_days": settings.GPULEDGER_USAGE_RETENTION_DAYS,
        },
    )


def _pod_selectors(workload: Workload, style: str) -> list[str]:
    """Label selectors for the workload's pods on DCGM series, per the cluster's label style."""
    pods = sorted(
        set(
            Allocation.objects.filter(workload=workload)
            .values_list("pod", flat=True)
            .order_by()[:MAX_LIVE_PODS]
        )
    )
    if not pods:
        return []
    namespace = promql_string(workload.namespace)
    pattern = "|".join(promql_string(re.escape(pod)) for pod in pods)
    selectors = []
    if style in (PodLabelStyle.AUTO, PodLabelStyle.EXPORTED):
        selectors.append(f'exported_namespace="{namespace}",exported_pod=~"{pattern}"')
    if style in (PodLabelStyle.AUTO, PodLabelStyle.PLAIN):
        selectors.append(f'namespace="{namespace}",pod=~"{pattern}"')
    return selectors


def live_workload_points(
    workload: Workload, metric: str, start: datetime, time_range: TimeRange
) -> dict[str, list[tuple[datetime, float | None]]]:
    """Per-GPU values of the workload's pods from its cluster's Prometheus over (start, end].

    Keyed like stored rows (``host/UUID/GI``) where the GPU is known, so live points continue the
    stored lines. SM_ACTIVE falls back to GR_ENGINE_ACTIVE per series, as collection does.
    Raises ``fleet.prometheus.PrometheusError`` when Prometheus cannot answer.
    """
    selectors = _pod_selectors(workload, workload.cluster.pod_label_style)
    if not selectors:
        return {}
    names = (
        [DCGM_METRICS["sm_active"], DCGM_METRICS["gr_engine_active"]]
        if metric == "sm_active"
        else [DCGM_METRICS["pipe_tensor_active"]]
    )
    promql = " or ".join(
        f"max by (UUID, GPU_I_ID) ({' or '.join(f'{name}{{{sel}}}' for sel in selectors)})"
        for name in names
    )
    window = TimeRange(start, time_range.end, CUSTOM)
    series = live_series(workload.cluster, promql, window, ("UUID", "GPU_I_ID"), 1.0)
    known = {
        (gpu.uuid, gpu.gi_id): gpu.key
        for gpu in Gpu.objects.filter(
            cluster=workload.cluster, uuid__in={uuid for uuid, _ in series}
        )
    }
    return {
        known.get((uuid, gi_id), f"?/{uuid}/{gi_id}"): list(zip(found.x, found.y, strict=True))
        for (uuid, gi_id), found in series.items()
    }


def _gpu_label(key: str) -> str:
    """``host gpu <uuid prefix>`` from ``host/UUID/GI``; GPUs without telemetry keep the name."""
    parts = key.split("/")
    if len(parts) != 3:
        return key
    host, uuid, gi_id = parts
    label = f"{host} {uuid[:12]}"
    return f"{label} GI {gi_id}" if gi_id else label
