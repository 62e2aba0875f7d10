"""The fleet overview's figures: capacity vs allocation vs real use, and the team rankings."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from core import plotting
from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.charts.parts import fleet_hours_figure, top_teams_figure
from dashboard.decorators import chart_view
from dashboard.queries.ranking import ranked_teams


@chart_view
def capacity_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    """Capacity vs allocated vs active GPUs per hour (fleet-scope rollups; GPU-hours/h = GPUs)."""
    return fleet_hours_figure(
        time_range,
        "Capacity, allocation and real use",
        [
            ("Capacity", "capacity_gpu_hours", "capacity", {"dash": "dot"}),
            ("Allocated", "allocated_gpu_hours", "allocated", {"fill": "tozeroy"}),
            (
                "Active (SM_ACTIVE-weighted)",
                "active_gpu_hours",
                "active",
                {"fill": "tozeroy"},
            ),
            ("Idle (allocated, SM_ACTIVE < threshold)", "idle_gpu_hours", "idle", {}),
        ],
    )


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
    return top_teams_figure(
        every,
        lambda team: getattr(team.figures, name),
        title,
        title.split(" by ")[0],
        color=color,
        empty_message="No team rollups in this range yet.",
        link_of=lambda team: team.url or "",
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
