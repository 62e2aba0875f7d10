"""The busy-but-not-working page's figures: teams ranked, and busy vs idle GPUs over time."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from core import plotting
from core.ranges import TimeRange
from dashboard.charts.parts import RANKING_SIZE, at_hours, team_ranking, x_axis
from dashboard.decorators import chart_view
from dashboard.queries.busy import busy_by_team
from dashboard.queries.rollups import fleet_hours


@chart_view
def busy_teams_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    teams = busy_by_team(time_range)[:RANKING_SIZE]
    teams.reverse()
    return team_ranking(
        "Busy-but-not-working GPU-hours by team",
        "Busy but not working",
        [team["name"] for team in teams],
        [team["busy"] for team in teams],
        color=plotting.COLORS["busy"],
        empty_message="No busy-but-not-working GPU-hours.",
    )


@chart_view
def busy_time_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    rows = fleet_hours(time_range)
    hours = time_range.complete_hours()
    x = x_axis(hours)
    data = [
        plotting.line(
            "Busy but not working",
            x,
            at_hours(rows, hours, "busy", digits=2),
            color=plotting.COLORS["busy"],
            unit="GPUs",
            fill="tozeroy",
        ),
        plotting.line(
            "Idle",
            x,
            at_hours(rows, hours, "idle", digits=2),
            color=plotting.COLORS["idle"],
            unit="GPUs",
            dash="dot",
        ),
    ]
    layout = plotting.layout(
        "Busy-but-not-working and idle GPUs over time",
        x_title="Hour (UTC)",
        y_title="GPUs (GPU-hours per hour)",
    )
    return plotting.figure(data, layout, empty_message="No hourly rollups in this range yet.")
