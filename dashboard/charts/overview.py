"""The fleet overview's figures: capacity vs allocation vs real use, and the team rankings."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from core import plotting
from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.charts.parts import RANKING_SIZE, per_hour, team_ranking, x_axis
from dashboard.decorators import chart_view
from dashboard.queries.ranking import ranked_teams
from ledger.choices import RollupScope
from ledger.models import HourlyRollup


@chart_view
def capacity_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    """Capacity vs allocated vs active GPUs per hour (fleet-scope rollups; GPU-hours/h = GPUs)."""
    span = time_range.covered_hours()
    hourly = HourlyRollup.objects.for_scope(RollupScope.FLEET).hourly(
        span,
        names=("capacity_gpu_hours", "allocated_gpu_hours", "active_gpu_hours", "idle_gpu_hours"),
    )
    x = x_axis(span.starts())

    def series(name: str) -> list[float | None]:
        return per_hour(hourly, name, digits=2)

    data = [
        plotting.line(
            "Capacity",
            x,
            series("capacity_gpu_hours"),
            color=plotting.COLORS["capacity"],
            unit="GPUs",
            dash="dot",
        ),
        plotting.line(
            "Allocated",
            x,
            series("allocated_gpu_hours"),
            color=plotting.COLORS["allocated"],
            unit="GPUs",
            fill="tozeroy",
        ),
        plotting.line(
            "Active (SM_ACTIVE-weighted)",
            x,
            series("active_gpu_hours"),
            color=plotting.COLORS["active"],
            unit="GPUs",
            fill="tozeroy",
        ),
        plotting.line(
            "Idle (allocated, SM_ACTIVE < threshold)",
            x,
            series("idle_gpu_hours"),
            color=plotting.COLORS["idle"],
            unit="GPUs",
        ),
    ]
    layout = plotting.layout(
        "Capacity, allocation and real use",
        x_title="Hour (UTC)",
        y_title="GPUs (GPU-hours per hour)",
    )
    return plotting.figure(data, layout, empty_message="No hourly rollups in this range yet.")


def _ranking(
    request: HttpRequest, time_range: TimeRange, name: str, title: str, color: str
) -> dict[str, Any]:
    every = ranked_teams(
        time_range.covered_hours(),
        allowed_team_ids(request),
        by=name,
        names=(name,),
        only_positive=True,
    )
    ranked = every[:RANKING_SIZE]
    ranked.reverse()  # horizontal bars: biggest on top
    return team_ranking(
        title,
        title.split(" by ")[0],
        [team.name for team in ranked],
        [getattr(team.figures, name) for team in ranked],
        color=color,
        empty_message="No team rollups in this range yet.",
        links=[team.url or "" for team in ranked],
        total=len(every),
    )


@chart_view
def team_idle_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    return _ranking(
        request, time_range, "idle_gpu_hours", "Idle GPU-hours by team", plotting.COLORS["idle"]
    )


@chart_view
def team_active_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    return _ranking(
        request,
        time_range,
        "active_gpu_hours",
        "Effective (active) GPU-hours by team",
        plotting.COLORS["active"],
    )
