"""The cohort page's figures: usage per member against the members' quota, and who borrows and
who lends over time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest

from core import plotting
from core.ranges import TimeRange
from dashboard.access import allowed_team_ids, get_cohort_for_user, sees_team
from dashboard.charts.parts import (
    GPUS_AXIS,
    added_up,
    gpu_line,
    legend_room,
    per_hour,
    range_layout,
    rounded,
    stacked,
    stacked_lines,
    x_axis,
)
from dashboard.decorators import chart_view
from dashboard.queries.cohorts import member_hours, member_teams, subtree_ids
from ledger.range_figures import Figures
from quotas.access import other_members_label
from quotas.words import words_for


def member_label(
    request: HttpRequest, tree: list[int], members: dict[str, list[Figures | None]]
) -> Callable[[str], str]:
    """A member's series label: its name, or, for the members of teams the user may not see,
    one "Other members (N)" label that ``stacked`` sums them under (quotas.access)."""
    allowed = allowed_team_ids(request)
    if allowed is None:
        return str
    teams = member_teams(tree)
    hidden = {name for name in members if not sees_team(allowed, teams.get(name))}
    others = other_members_label(len(hidden))
    return lambda name: others if name in hidden else name


@chart_view
def cohort_usage_chart(
    request: HttpRequest, time_range: TimeRange, cluster: str, name: str
) -> dict[str, Any]:
    """Allocated GPUs per member ClusterQueue, stacked, against the members' nominal sum."""
    cohort = get_cohort_for_user(request, cluster, name)
    span = time_range.covered_hours()
    hours = span.starts()
    tree = subtree_ids(cohort)
    members = member_hours(tree, span, ("allocated_gpu_hours", "nominal_gpu_hours"))
    names, allocated = stacked(members, member_label(request, tree, members), "allocated_gpu_hours")
    x = x_axis(hours)
    nominal = added_up(members, len(hours), ("nominal_gpu_hours",))
    data = stacked_lines(x, names, allocated, "usage")
    data.append(
        gpu_line(
            "Nominal quota (members)",
            x,
            per_hour(nominal, "nominal_gpu_hours"),
            "nominal",
            dash="dash",
        )
    )
    title = f"{words_for(cohort.scheduler).cohort_title} {cohort.name}: usage per member"
    layout = range_layout(time_range, title, GPUS_AXIS)
    legend_room(layout, len(data), per_row=4)
    return plotting.figure(data, layout, empty_message="No member rollups in this range.")


@chart_view
def cohort_borrowing_chart(
    request: HttpRequest, time_range: TimeRange, cluster: str, name: str
) -> dict[str, Any]:
    """Borrowed (above zero) and lent (below zero) GPUs per member ClusterQueue, stacked."""
    cohort = get_cohort_for_user(request, cluster, name)
    span = time_range.covered_hours()
    tree = subtree_ids(cohort)
    members = member_hours(tree, span, ("borrowed_gpu_hours", "lent_gpu_hours"))
    label = member_label(request, tree, members)
    borrowed_names, borrowed = stacked(members, label, "borrowed_gpu_hours")
    lent_names, lent = stacked(members, label, "lent_gpu_hours")
    colors = {
        name: plotting.SERIES[i % len(plotting.SERIES)]
        for i, name in enumerate(sorted(set(borrowed_names) | set(lent_names)))
    }
    x = x_axis(span.starts())
    data = []
    for series in borrowed_names:
        values = borrowed[series]
        if not any(values):
            continue
        trace = plotting.bar(
            f"{series} borrowed", x, [rounded(v) for v in values], color=colors[series], unit="GPUs"
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
    layout = range_layout(
        time_range,
        "Borrowed (above 0) and lent (below 0) per member",
        GPUS_AXIS,
        barmode="relative",
        bargap=0.05,
    )
    legend_room(layout, len(data), per_row=3)
    return plotting.figure(data, layout, empty_message="No borrowing or lending in this range.")
