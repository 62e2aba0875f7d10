"""The busy-but-not-working page: GPUs that run kernels but barely use their SMs."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.decorators import dashboard_page
from dashboard.frame import chart_url, stat
from dashboard.queries.busy import (
    BUSY_GPUS_LIMIT,
    BUSY_WORKLOADS_LIMIT,
    busy_by_team,
    busy_by_workload,
    busy_gpus_now,
    fleet_figures,
)
from dashboard.queries.now import busy_thresholds, latest_windows
from dashboard.templatetags.formatting import gpus, percent


@dashboard_page
def busy(request: HttpRequest, time_range: TimeRange) -> HttpResponse:
    util_min, sm_max = busy_thresholds()
    windows = latest_windows()
    allowed = allowed_team_ids(request)
    gpus_now, busy_now = busy_gpus_now(windows, allowed)
    span = time_range.covered_hours()
    teams = busy_by_team(span, allowed)
    workloads, hidden = busy_by_workload(span, allowed)
    fleet = fleet_figures(span)
    share = fleet.busy_share
    cards = [
        stat(
            "Busy but not working now",
            gpus(busy_now),
            unit="GPUs",
            note="allocated GPUs in the newest window",
            tone="bad" if busy_now else "good",
            testid="busy-now",
        ),
        stat(
            "In this range",
            f"{fleet.busy_not_working_gpu_hours:,.1f}",
            unit="GPU-hours",
            note="complete hours, from hourly rollups",
            tone="warn",
            testid="busy-hours",
        ),
        stat(
            "Share of allocated",
            percent(share),
            unit="%" if share is not None else "",
            note=f"of {fleet.allocated_gpu_hours:,.1f} allocated GPU-hours",
            tone="neutral",
            testid="busy-share",
        ),
    ]
    context = {
        "nav": "busy",
        "page_title": "Busy but not working",
        "cards": cards,
        "util_min": util_min,
        "sm_max_pct": sm_max * 100,
        "gpus_now": gpus_now,
        "gpus_limit": BUSY_GPUS_LIMIT,
        "teams": teams,
        "workloads": workloads,
        "workloads_limit": BUSY_WORKLOADS_LIMIT,
        "hidden_busy": hidden,
        "has_data": bool(windows) or fleet.capacity_gpu_hours > 0,
        "teams_chart_url": chart_url("dashboard:chart-busy-teams", request),
        "time_chart_url": chart_url("dashboard:chart-busy-time", request),
        "time_range": time_range,
    }
    return render(request, "dashboard/busy.html", context)
