"""The busy-but-not-working page's figures: teams ranked, and busy vs idle GPUs over time."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from core import plotting
from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.charts.parts import RANKING_SIZE, per_hour, team_ranking, x_axis
from dashboard.decorators import chart_view
from dashboard.queries.busy import BUSY, busy_by_team
from ledger.choices import RollupScope
from ledger.models import HourlyRollup


@chart_view
def busy_teams_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    every = busy_by_team(time_range.covered_hours(), allowed_team_ids(request), names=(BUSY,))
    teams = every[:RANKING_SIZE]
    teams.reverse()
    return team_ranking(
        "Busy-but-not-working GPU-hours by team",
        "Busy but not working",
        [team.name for team in teams],
        [team.figures.busy_not_working_gpu_hours for team in teams],
        color=plotting.COLORS["busy"],
        empty_message="No busy-but-not-working GPU-hours.",
        total=len(every),
    )


@chart_view
def busy_time_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    span = time_range.covered_hours()
    hourly = HourlyRollup.objects.for_scope(RollupScope.FLEET).hourly(
        span, names=(BUSY, "idle_gpu_hours")
    )
    x = x_axis(span.starts())
    data = [
        plotting.line(
            "Busy but not working",
            x,
            per_hour(hourly, BUSY, digits=2),
            color=plotting.COLORS["busy"],
            unit="GPUs",
            fill="tozeroy",
        ),
        plotting.line(
            "Idle",
            x,
            per_hour(hourly, "idle_gpu_hours", digits=2),
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
