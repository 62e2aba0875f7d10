"""The busy-but-not-working page's figures: teams ranked, and busy vs idle GPUs over time."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from core import plotting
from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.charts.parts import fleet_hours_figure, top_teams_figure
from dashboard.decorators import chart_view
from dashboard.queries.busy import BUSY, busy_by_team


@chart_view
def busy_teams_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    every = busy_by_team(time_range.covered_hours(), allowed_team_ids(request), names=(BUSY,))
    return top_teams_figure(
        every,
        lambda team: team.figures.busy_not_working_gpu_hours,
        "Busy-but-not-working GPU-hours by team",
        "Busy but not working",
        color=plotting.COLORS["busy"],
        empty_message="No busy-but-not-working GPU-hours.",
    )


@chart_view
def busy_time_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    return fleet_hours_figure(
        time_range,
        "Busy-but-not-working and idle GPUs over time",
        [
            ("Busy but not working", BUSY, "busy", {"fill": "tozeroy"}),
            ("Idle", "idle_gpu_hours", "idle", {"dash": "dot"}),
        ],
    )
