"""Queue service-level figures: p50/p95 waits over the range, evictions and preemptions by
reason (the Queue levels page; the wait chart also on the ClusterQueue and team pages).

Each period is an hour (ranges up to two days) or a UTC day; a period without admissions is a
gap in the wait lines, never 0. Waits are in minutes, or in hours when the longest plotted
p95 passes three hours (an axis of 1,080 minutes reads badly).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.http import HttpRequest

from core import plotting
from core.ranges import TimeRange
from dashboard.access import allowed_team_ids, get_cluster_queue_for_user, get_team_for_user
from dashboard.charts.parts import MAX_SERIES, legend_room, range_layout, x_axis
from dashboard.decorators import chart_view, choice_param
from dashboard.queries import queue_levels as queries
from quotas.words import words_for
from servicelevels.figures import GROUP_BY, LevelRow

WAIT_AXIS = "Wait for quota ({unit})"
# Past this p95 (in seconds) the waits are plotted in hours.
HOURS_FROM_SECONDS = 3 * 3600
# Plotted unit: (axis word, hover unit, seconds in one).
MINUTES = ("minutes", "min", 60.0)
HOURS = ("hours", "h", 3600.0)


def _in(value: float | None, seconds: float) -> float | None:
    return None if value is None else round(value / seconds, 2)


def wait_unit(rows: list[LevelRow]) -> tuple[str, str, float]:
    """Minutes, or hours when some plotted p95 wait passes ``HOURS_FROM_SECONDS``."""
    longest = max((r.wait_seconds_p95 or 0.0 for r in rows), default=0.0)
    return HOURS if longest > HOURS_FROM_SECONDS else MINUTES


def _label(cluster: str, group: str, clusters: int) -> str:
    name = group or "(none)"
    return f"{cluster}/{name}" if clusters > 1 else name


def waits_figure(
    time_range: TimeRange,
    series: dict[tuple[str, str], list[LevelRow]],
    title: str,
    *,
    empty_message: str = "No admission in this range.",
) -> dict[str, Any]:
    """p95 (solid) and p50 (dashed) per group, the groups with the most admissions first."""
    ranked = sorted(
        series.items(), key=lambda item: (-sum(r.admissions for r in item[1]), item[0])
    )[:MAX_SERIES]
    clusters = len({cluster for cluster, _group in series})
    axis, unit, seconds = wait_unit([row for _key, rows in ranked for row in rows])
    data = []
    metrics = False
    for index, ((cluster, group), rows) in enumerate(ranked):
        color = plotting.SERIES[index % len(plotting.SERIES)]
        x = x_axis(row.period_start for row in rows)
        name = _label(cluster, group, clusters)
        metrics = metrics or any(row.source == queries.METRICS for row in rows)
        data.append(
            plotting.line(
                f"{name} p95",
                x,
                [_in(row.wait_seconds_p95, seconds) for row in rows],
                color=color,
                unit=unit,
            )
        )
        data.append(
            plotting.line(
                f"{name} p50",
                x,
                [_in(row.wait_seconds_p50, seconds) for row in rows],
                color=color,
                unit=unit,
                dash="dash",
            )
        )
    for trace in data:
        trace["mode"] = "lines+markers"
    layout = range_layout(time_range, title, WAIT_AXIS.format(unit=axis))
    _day_ticks(layout, queries.step_for(time_range))
    legend_room(layout, len(data), per_row=8)  # full width, as the other wide charts
    meta = {"step": queries.step_for(time_range), "groups": len(series)}
    if metrics:
        meta["source"] = queries.METRICS_NOTE
    return plotting.figure(data, layout, empty_message=empty_message, meta=meta)


def _day_ticks(layout: dict[str, Any], step: str) -> None:
    """Per-day figures get one tick per UTC day, whatever the bars' widths make Plotly choose."""
    if step == "day":
        layout["xaxis"]["dtick"] = 86400000
        layout["xaxis"]["tickformat"] = "%b %-d"


def _by_reason(
    rows: list[LevelRow], pick: str
) -> tuple[list[datetime], dict[str, dict[datetime, int]]]:
    """Per reason, its count in each period, summed over the groups."""
    counts: dict[str, dict[datetime, int]] = defaultdict(lambda: defaultdict(int))
    periods = sorted({row.period_start for row in rows})
    for row in rows:
        for reason, count in getattr(row, pick).items():
            counts[reason or "Other"][row.period_start] += count
    return periods, counts


def reasons_figure(
    time_range: TimeRange, rows: list[LevelRow], pick: str, title: str, empty_message: str
) -> dict[str, Any]:
    periods, counts = _by_reason(rows, pick)
    palette = [plotting.COLORS["idle"], plotting.COLORS["borrowed"], *plotting.SERIES]
    x = x_axis(periods)
    data = [
        plotting.bar(
            reason,
            x,
            [counts[reason].get(period, 0) for period in periods],
            color=palette[index % len(palette)],
            unit="per period",
        )
        for index, reason in enumerate(sorted(counts))
    ]
    step = queries.step_for(time_range)
    layout = range_layout(time_range, title, f"Count per {step}", barmode="stack")
    _day_ticks(layout, step)
    legend_room(layout, len(data), per_row=3)
    return plotting.figure(data, layout, empty_message=empty_message, meta={"step": step})


def _all_rows(request: HttpRequest, time_range: TimeRange) -> list[LevelRow]:
    group_by = choice_param(request, "group_by", GROUP_BY, "cluster_queue")
    every = queries.series(time_range, allowed_team_ids(request), group_by)
    return [row for rows in every.values() for row in rows]


@chart_view
def queue_levels_waits_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    group_by = choice_param(request, "group_by", GROUP_BY, "cluster_queue")
    every = queries.series(time_range, allowed_team_ids(request), group_by)
    return waits_figure(time_range, every, "Wait for quota: p95 (solid) and p50 (dashed)")


@chart_view
def queue_levels_evictions_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    return reasons_figure(
        time_range,
        _all_rows(request, time_range),
        "evictions",
        "Evictions by reason",
        "No eviction in this range.",
    )


@chart_view
def queue_levels_preemptions_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    return reasons_figure(
        time_range,
        _all_rows(request, time_range),
        "preemptions_by_reason",
        "Preemptions by reason",
        "No preemption in this range.",
    )


@chart_view
def cluster_queue_waits_chart(
    request: HttpRequest, time_range: TimeRange, cluster: str, name: str
) -> dict[str, Any]:
    queue = get_cluster_queue_for_user(request, cluster, name)
    every = queries.series(
        time_range,
        allowed_team_ids(request),
        "cluster_queue",
        cluster=queue.cluster.name,
        group=queue.name,
    )
    title = f"{words_for(queue.scheduler).queue} {queue.name}: wait for quota"
    return waits_figure(time_range, every, title)


@chart_view
def team_waits_chart(request: HttpRequest, time_range: TimeRange, name: str) -> dict[str, Any]:
    team = get_team_for_user(request, name)
    every = queries.series(time_range, {team.pk}, "cluster_queue")
    return waits_figure(time_range, every, f"{team.display_name or team.name}: wait per queue")
