"""The team page's figures: allocation vs quota vs real use, and allocation per queue."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from core import plotting
from core.ranges import TimeRange
from dashboard.access import get_team_for_user
from dashboard.charts.parts import (
    GPUS_AXIS,
    borrowing_figure,
    gpu_line,
    legend_room,
    per_hour,
    range_layout,
    real_use,
    rounded,
    stacked,
    x_axis,
)
from dashboard.decorators import chart_view
from dashboard.queries.teams import team_hours, team_queue_hours
from quotas.words import KUEUE, words_for


@chart_view
def team_allocation_chart(request: HttpRequest, time_range: TimeRange, name: str) -> dict[str, Any]:
    """Allocated vs nominal quota vs SM_ACTIVE-weighted use, borrowing periods shaded."""
    team = get_team_for_user(request, name)
    span = time_range.covered_hours()
    hours = span.starts()
    hourly = team_hours(team, span)
    borrowed = per_hour(hourly, "borrowed_gpu_hours")
    x = x_axis(hours)
    data = [
        gpu_line("Allocated", x, per_hour(hourly, "allocated_gpu_hours"), "allocated"),
        gpu_line("Nominal quota", x, per_hour(hourly, "nominal_gpu_hours"), "nominal", dash="dash"),
        gpu_line("Real use (SM_ACTIVE-weighted)", x, real_use(hourly), "active", fill="tozeroy"),
        gpu_line("Borrowed", x, borrowed, "borrowed"),
    ]
    return borrowing_figure(
        time_range,
        f"{team}: allocation vs quota vs real use",
        data,
        hours,
        borrowed,
        legend_per_row=5,
        empty_message="No rollups for this team in this range.",
    )


@chart_view
def team_queues_chart(request: HttpRequest, time_range: TimeRange, name: str) -> dict[str, Any]:
    """Allocated GPUs per ClusterQueue and flavor against that flavor's own nominal quota.

    Unstacked: each line reads against its own dotted nominal (stacked areas put one flavor's
    line on another's area, and read as if it were at its nominal). Hours a queue's flavor held
    more than its nominal quota (borrowing on that flavor) are drawn as a wide band on its line.
    """
    team = get_team_for_user(request, name)
    span = time_range.covered_hours()
    series_by_queue = team_queue_hours(team, span, ("allocated_gpu_hours", "nominal_gpu_hours"))

    clusters = {group[0] for group in series_by_queue}

    def label(group: tuple[str, str, str, str]) -> str:
        """``queue · flavor``; the cluster first when the team's queues span several (two
        clusters may each have a queue of the name). Another scheduler's queue names no node
        pool: one line per queue."""
        cluster, queue, scheduler, flavor = group
        named = f"{cluster}/{queue}" if len(clusters) > 1 else queue
        if words_for(scheduler) is not KUEUE:
            return named
        return f"{named} · {flavor or 'no flavor'}"

    names, allocated = stacked(series_by_queue, label, "allocated_gpu_hours")
    _, nominal = stacked(series_by_queue, label, "nominal_gpu_hours")
    x = x_axis(span.starts())
    data = []
    borrowing_series = 0
    for position, series in enumerate(names):
        color = plotting.SERIES[position % len(plotting.SERIES)]
        values = [rounded(v) for v in allocated[series]]
        trace = plotting.line(f"{series} allocated", x, values, color=color, unit="GPUs")
        trace["legendgroup"] = series
        data.append(trace)
        if series == "Other" or series not in nominal:
            continue
        quota = [rounded(v) for v in nominal[series]]
        trace = plotting.line(f"{series} nominal", x, quota, color=color, unit="GPUs", dash="dot")
        trace["legendgroup"] = series
        data.append(trace)
        above = [
            a if a is not None and q is not None and a > q else None
            for a, q in zip(values, quota, strict=True)
        ]
        if any(value is not None for value in above):
            borrowing_series += 1
            band = plotting.line(f"{series} borrowing", x, above, color=color, unit="GPUs")
            band["line"]["width"] = 9
            band["opacity"] = 0.3
            band["legendgroup"] = series
            band["showlegend"] = False
            data.append(band)
    layout = range_layout(
        time_range,
        "Allocated GPUs per queue and flavor (dotted: its nominal; wide: borrowing)",
        GPUS_AXIS,
    )
    legend_room(layout, sum(1 for trace in data if trace.get("showlegend", True)), per_row=3)
    return plotting.figure(
        data,
        layout,
        empty_message="No queue rollups in this range.",
        meta={"borrowing_series": borrowing_series},
    )
