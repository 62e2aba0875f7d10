"""The fleet overview: the fleet now, its trend over the range, and teams and flavors."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.decorators import dashboard_page
from dashboard.frame import chart_url, stat
from dashboard.queries.now import latest_windows
from dashboard.queries.overview import flavor_figures, fleet_now, pending_while_free
from dashboard.queries.ranking import ranked_teams
from dashboard.templatetags.formatting import gpus, percent


@dashboard_page
def overview(request: HttpRequest, time_range: TimeRange) -> HttpResponse:
    windows = latest_windows()
    now = fleet_now(windows)
    span = time_range.covered_hours()
    teams = ranked_teams(span, allowed_team_ids(request))
    flavors = flavor_figures(span)
    waits = pending_while_free(now)
    quota_bound = sum(wait.quota_bound for wait in waits)
    utilization = now.utilization
    cards = [
        stat(
            "Capacity",
            gpus(now.capacity),
            unit="GPUs",
            note="physical GPUs, MIG by slices",
            tone="neutral",
            testid="capacity",
        ),
        stat(
            "Allocated",
            gpus(now.allocated),
            unit="GPUs",
            note=f"{percent(now.allocation_rate)} % of capacity",
            testid="allocated",
        ),
        stat(
            "Real utilization",
            percent(utilization),
            unit="%" if utilization is not None else "",
            note=(
                f"SM_ACTIVE-weighted over {gpus(now.telemetry)} allocated GPUs with telemetry"
                + (f"; {gpus(now.fallback)} from GR_ENGINE_ACTIVE" if now.fallback else "")
            ),
            tone="good" if utilization is not None and utilization >= 0.5 else "warn",
            testid="utilization",
        ),
        stat(
            "Idle but allocated",
            gpus(now.idle),
            unit="GPUs",
            note=f"SM_ACTIVE below {settings.GPULEDGER_IDLE_THRESHOLD * 100:g} %",
            tone="bad" if now.idle else "good",
            testid="idle",
        ),
        stat(
            "No telemetry",
            gpus(now.no_telemetry),
            unit="GPUs",
            note=f"{gpus(now.no_telemetry_allocated)} allocated · "
            f"{gpus(now.no_telemetry_free)} free; never counted as idle",
            tone="warn" if now.no_telemetry_allocated else "neutral",
            testid="no-telemetry",
        ),
        stat(
            "Pending demand",
            gpus(now.pending_gpus),
            unit="GPUs",
            note=f"{now.pending_workloads} pending workloads"
            + (
                f"; {gpus(quota_bound)} GPUs of it wait while GPUs of their flavor sit free"
                if quota_bound
                else ""
            ),
            tone="warn" if quota_bound else "neutral",
            testid="pending",
        ),
    ]
    context = {
        "nav": "overview",
        "page_title": "Fleet overview",
        "now": now,
        "cards": cards,
        "has_data": bool(windows or teams or flavors),
        "teams": teams,
        "flavors": flavors,
        "waits": waits,
        "quota_bound": quota_bound,
        "capacity_chart_url": chart_url("dashboard:chart-capacity", request),
        "team_idle_chart_url": chart_url("dashboard:chart-team-idle", request),
        "team_active_chart_url": chart_url("dashboard:chart-team-active", request),
        "idle_threshold_pct": settings.GPULEDGER_IDLE_THRESHOLD * 100,
        "time_range": time_range,
    }
    return render(request, "dashboard/overview.html", context)
