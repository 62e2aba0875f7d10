"""The workload page's figures: the timeline of its state transitions, and per-GPU activity
(live from Prometheus for the last hours when it can, stored windows before, hourly rollups
for the hours without stored windows, ``ledger.window_detail``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, QuerySet
from django.db.models.expressions import Combinable
from django.db.models.functions import TruncHour
from django.http import HttpRequest
from django.utils import timezone

from core import plotting
from core.ranges import TimeRange
from dashboard.access import allowed_team_ids, get_workload_for_user, sees_team
from dashboard.charts.parts import (
    HOUR,
    TIME_AXIS,
    legend_right,
    legend_room,
    range_layout,
    x_axis,
)
from dashboard.decorators import chart_view, choice_param
from dashboard.live import WORKLOAD_LIVE_SPAN, live_workload_points, read_live, unavailable_notice
from dashboard.queries import workloads as queries
from dashboard.templatetags.formatting import figure
from ledger.models import GpuUsage
from ledger.window_detail import window_detail
from quotas.access import hide_queue_path
from quotas.choices import TransitionKind
from quotas.models import Workload

# Per-GPU lines on the workload activity chart; bigger gangs get their mean and spread.
MAX_GPU_LINES = 8
# Ranges up to this long plot per-GPU activity per collection window; longer ones per hour.
RAW_WINDOW_RANGE = timedelta(hours=12)
# Transitions drawn on a workload's timeline (the newest ones).
MAX_TRANSITIONS = 500
ACTIVITY_METRICS = ("sm_active", "tensor")

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
        text = plotting.plain(text)  # a condition message is upstream text, never markup
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
    workload = get_workload_for_user(request, pk)
    now = timezone.now()
    transitions = queries.timeline_transitions(workload, MAX_TRANSITIONS)
    allowed = allowed_team_ids(request)
    for transition in transitions:
        # As on the page: a preemptor the user may not see leaves no queue name in the message.
        if not sees_team(allowed, transition["preemptor_team_id"]):
            transition["message"] = hide_queue_path(
                transition["message"], transition["preemptor_path"]
            )
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


def gpu_line_label(key: str) -> str:
    """``host gpu <uuid prefix>`` from ``host/UUID/GI``; GPUs without telemetry keep the name."""
    parts = key.split("/")
    if len(parts) != 3:
        return key
    host, uuid, gi_id = parts
    label = f"{host} {uuid[:12]}"
    return f"{label} GI {gi_id}" if gi_id else label


def _live_activity(
    workload: Workload, metric: str, time_range: TimeRange
) -> tuple[dict[str, list[tuple[datetime, float | None]]], datetime | None, str]:
    """Per-GPU points from Prometheus for the newest ``WORKLOAD_LIVE_SPAN`` of the range, and
    where they start; or none and a notice when Prometheus does not answer."""
    start = max(time_range.start, time_range.end - WORKLOAD_LIVE_SPAN)
    points, error = read_live(
        f"workload {workload.pk}",
        lambda: live_workload_points(workload, metric, start, time_range),
    )
    if points is None:
        return {}, None, unavailable_notice(error, "stored windows")
    return points, start, ""


def _per_gpu_lines(
    stored: QuerySet[GpuUsage],
    live: dict[str, list[tuple[datetime, float | None]]],
    bucket: Combinable,
    field: str,
) -> list[dict[str, Any]]:
    """One line per GPU: the stored windows, then the live points after them."""
    by_gpu = queries.gpu_points(stored, bucket, field)
    for key, found in live.items():
        by_gpu[key].extend(found)
    data = []
    for i, key in enumerate(sorted(by_gpu)):
        line = sorted(by_gpu[key], key=lambda point: point[0])
        data.append(
            plotting.line(
                gpu_line_label(key),
                x_axis(p[0] for p in line),
                [plotting.percent(p[1]) for p in line],
                color=plotting.SERIES[i % len(plotting.SERIES)],
                unit="%",
            )
        )
    return data


def _gang_lines(
    usage: QuerySet[GpuUsage], bucket: Combinable, field: str, metric: str, at_once: float
) -> list[dict[str, Any]]:
    """A big gang: its mean, and the lowest and highest GPU (per window, or within the hour)."""
    spread = queries.gang_spread(usage, bucket, field)
    x = x_axis(row["bucket"] for row in spread)
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
    mean = plotting.line(
        f"Mean of {figure(at_once)} GPUs",
        x,
        [plotting.percent(r["value"]) for r in spread],
        color=color,
        unit="%",
    )
    return [low, high, mean]


def _rollup_line(rollups: list[tuple[datetime, float | None]]) -> dict[str, Any]:
    """The workload mean of the hours before the first stored window, from hourly rollups."""
    line = plotting.line(
        "Workload mean (hourly rollup)",
        x_axis(hour + HOUR / 2 for hour, _ in rollups),
        [plotting.percent(value) for _, value in rollups],
        color=plotting.COLORS["nominal"],
        unit="%",
        dash="dot",
    )
    # Markers, so a lone hour is visible too.
    line["mode"] = "lines+markers"
    line["marker"] = {"size": 5}
    return line


def _activity_layout(
    time_range: TimeRange, metric: str, per_gpu: bool, traces: int
) -> dict[str, Any]:
    title = "SM_ACTIVE per GPU" if metric == "sm_active" else "Tensor pipe activity per GPU"
    if not per_gpu:
        title = title.replace("per GPU", "of the gang: mean and GPU range")
    layout = range_layout(
        time_range,
        title,
        "SM_ACTIVE (%)" if metric == "sm_active" else "PIPE_TENSOR_ACTIVE (%)",
    )
    layout["yaxis"]["range"] = [0, 100]
    layout["yaxis"].pop("rangemode", None)
    if per_gpu:
        legend_right(layout)
    else:
        legend_room(layout, traces, per_row=4)
    return layout


@chart_view
def workload_activity_chart(request: HttpRequest, time_range: TimeRange, pk: int) -> dict[str, Any]:
    """Per-GPU SM_ACTIVE (``metric=sm_active``) or tensor activity (``metric=tensor``), in %.

    Recent hours come from the stored collection windows (kept ``GPULEDGER_USAGE_RETENTION_DAYS``);
    hours before them (``ledger.window_detail``) from the workload's hourly rollups, as the
    workload mean, and the figure's notice says so.
    """
    workload = get_workload_for_user(request, pk)
    metric = choice_param(request, "metric", ACTIVITY_METRICS, "sm_active")
    field = "activity" if metric == "sm_active" else "pipe_tensor_active"
    detail = window_detail(workload.cluster_id, time_range.start, time_range.end)
    usage = queries.activity_usage(workload, time_range, detail.window_start)
    summary = queries.activity_summary(usage)
    per_gpu = summary["gpus"] <= MAX_GPU_LINES
    raw = time_range.end - time_range.start <= RAW_WINDOW_RANGE
    bucket = F("window_end") if raw else TruncHour("window_end")
    live: dict[str, list[tuple[datetime, float | None]]] = {}
    live_start: datetime | None = None
    notice = ""
    if per_gpu and workload.cluster.prometheus_url:
        live, live_start, notice = _live_activity(workload, metric, time_range)
    if per_gpu:
        stored = usage if live_start is None else usage.filter(window_end__lte=live_start)
        data = _per_gpu_lines(stored, live, bucket, field)
    else:
        data = _gang_lines(usage, bucket, field, metric, summary["at_once"])
    rollups = queries.rollup_activity(workload, detail.hourly_span(), metric)
    if rollups:
        data.append(_rollup_line(rollups))
    older = detail.note(
        "the workload's hourly mean (dotted)", "no per-GPU lines: rollups keep none"
    )
    notice = " ".join(part for part in (notice, older) if part)
    return plotting.figure(
        data,
        _activity_layout(time_range, metric, per_gpu, len(data)),
        empty_message="No telemetry for this workload in this range.",
        meta={
            "metric": metric,
            "gpus": summary["gpus"],
            "gpus_at_once": summary["at_once"],
            "per_gpu": per_gpu,
            "resolution": "window" if raw else "hour",
            "rollup_hours": len(rollups),
            "per_window_since": plotting.iso(detail.window_start),
            "source": "stored" if live_start is None else "live",
            "live_start": plotting.iso(live_start) if live_start else None,
            "notice": notice,
            "retention_days": settings.GPULEDGER_USAGE_RETENTION_DAYS,
        },
    )
