"""The pieces the dashboard's Plotly figures share: hourly axes, layouts, legends, stacking, bars.

Time series are hourly: an hour's GPU-hours are that hour's mean GPUs
(docs/architecture.md "Figures"). The hours plotted are those the range counts
(``TimeRange.covered_hours``, the hour in progress never); the read layer gives one ``Figures`` per
hour (``hourly`` / ``series``), and an hour without a rollup row is a gap (None), never 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from core import plotting
from core.ranges import TimeRange
from dashboard.live import LiveSeries
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.range_figures import Figures

Hourly = Sequence[Figures | None]

HOUR = timedelta(hours=1)
GPUS_AXIS = "GPUs (hourly mean)"
TIME_AXIS = "Time (UTC)"
# Series drawn one by one before the rest is summed into "Other": more lines than this are
# unreadable, and the payload stays small however many queues a team or cohort has.
MAX_SERIES = 10
# Teams a ranking bar chart shows.
RANKING_SIZE = 15
# Height of one team's bar row in the rankings: thin bars whatever the number of teams.
RANKING_ROW_PX = 30


def x_axis(moments: Iterable[datetime]) -> list[str]:
    return [plotting.iso(moment) for moment in moments]


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def per_hour(hourly: Hourly, name: str, digits: int = 3) -> list[float | None]:
    """The figure ``name`` of each hour (GPU-hours in one hour: mean GPUs); no row is a gap."""
    return [None if hour is None else rounded(getattr(hour, name), digits) for hour in hourly]


def real_use(hourly: Hourly) -> list[float | None]:
    """SM_ACTIVE-weighted GPUs per hour; an hour without telemetry is a gap, never idle."""
    return [
        rounded(hour.active_gpu_hours)
        if hour is not None and hour.telemetry_gpu_hours > 0
        else None
        for hour in hourly
    ]


def added_up(
    series: Mapping[Any, Hourly], hours: int, names: Sequence[str]
) -> list[Figures | None]:
    """Per hour, the figures ``names`` of every group of a ``series`` added up (the others stay
    0); None where no group has a row. Only what the chart plots is added, as plain floats: a
    month of a 20-queue cohort is 14,000 group-hours."""
    sums = {name: [0.0] * hours for name in names}
    seen = [False] * hours
    for hourly in series.values():
        for position, hour in enumerate(hourly):
            if hour is None:
                continue
            seen[position] = True
            for name in names:
                sums[name][position] += getattr(hour, name)
    return [
        Figures(**{name: sums[name][position] for name in names}) if seen[position] else None
        for position in range(hours)
    ]


def range_layout(time_range: TimeRange, title: str, y_title: str, **extra: Any) -> dict:
    """A layout whose x axis spans the whole range, so every chart of a page lines up."""
    result = plotting.layout(title, x_title=TIME_AXIS, y_title=y_title, **extra)
    result["xaxis"]["type"] = "date"
    result["xaxis"]["range"] = [plotting.iso(time_range.start), plotting.iso(time_range.end)]
    return result


def legend_room(layout: dict[str, Any], entries: int, per_row: int = 4) -> dict[str, Any]:
    """Make the top margin fit a horizontal legend of ``entries`` items above the plot."""
    rows = max(1, -(-entries // per_row))
    layout["margin"] = {**layout.get("margin", {}), "t": 56 + 22 * rows}
    layout["height"] = layout.get("height", 360) + 22 * (rows - 1)
    return layout


def legend_right(layout: dict[str, Any]) -> dict[str, Any]:
    """A vertical legend right of the plot, for many short-lived series (one per GPU)."""
    layout["legend"] = {
        "orientation": "v",
        "x": 1.02,
        "xanchor": "left",
        "y": 1,
        "yanchor": "top",
        "font": {"size": 11},
    }
    layout["margin"] = {**layout.get("margin", {}), "r": 10, "t": 56}
    return layout


def borrowing_shapes(hours: list[datetime], borrowed: list[float | None]) -> list[dict]:
    """One shaded rectangle per run of consecutive hours with borrowed GPUs > 0."""
    shapes = []
    start: datetime | None = None
    for index, hour in enumerate(hours):
        value = borrowed[index]
        if value is not None and value > 0:
            if start is None:
                start = hour
            end = hour + HOUR
        elif start is not None:
            shapes.append((start, end))
            start = None
    if start is not None:
        shapes.append((start, end))
    # Points sit on hour starts: a shaded run is centred on its points, half an hour each side.
    half = HOUR / 2
    return [
        {
            "type": "rect",
            "xref": "x",
            "yref": "paper",
            "x0": plotting.iso(x0 - half),
            "x1": plotting.iso(x1 - half),
            "y0": 0,
            "y1": 1,
            "fillcolor": plotting.COLORS["borrowed"],
            "opacity": 0.12,
            "line": {"width": 0},
            "layer": "below",
            "name": "borrowing",
        }
        for x0, x1 in shapes
    ]


def legend_swatch(name: str, color: str) -> dict[str, Any]:
    """A legend entry for shaded areas (layout shapes have none of their own)."""
    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": [None],
        "y": [None],
        "marker": {"symbol": "square", "size": 14, "color": color, "opacity": 0.35},
        "hoverinfo": "skip",
    }


def _top_series(totals: dict[str, float], limit: int = MAX_SERIES) -> tuple[list[str], set[str]]:
    """The ``limit`` largest series by total, in name order, and the rest."""
    ranked = sorted(totals, key=lambda name: (-totals[name], name))
    kept = sorted(ranked[:limit])
    return kept, set(ranked[limit:])


def stacked(
    series: Mapping[Any, Hourly],
    label_of: Callable[[Any], str],
    name: str,
) -> tuple[list[str], dict[str, list[float | None]]]:
    """Per-label hourly values of the figure ``name`` from the read layer's ``series`` (group →
    one ``Figures`` or None per hour): the top labels plus "Other"; hours without rows are gaps.
    """
    lines: dict[str, list[float | None]] = {}
    totals: dict[str, float] = defaultdict(float)
    for group, hourly in series.items():
        label = label_of(group)
        line = lines.setdefault(label, [None] * len(hourly))
        for position, hour in enumerate(hourly):
            if hour is not None:
                value = getattr(hour, name)
                line[position] = (line[position] or 0.0) + value
                totals[label] += value
    kept, rest = _top_series(totals)
    per_series = {label: lines[label] for label in kept}
    if rest:
        other: list[float | None] = [None] * len(next(iter(lines.values())))
        for label in rest:
            for position, value in enumerate(lines[label]):
                if value is not None:
                    other[position] = (other[position] or 0.0) + value
        per_series["Other"] = other
    return list(per_series), per_series


def team_ranking(
    title: str,
    trace_name: str,
    names: list[str],
    values: list[float],
    *,
    color: str,
    empty_message: str,
    links: list[str] | None = None,
    total: int | None = None,
) -> dict[str, Any]:
    """Horizontal bars of GPU-hours per team; pass them smallest first (the last bar is on top).

    Readable with 1 or 200 teams: every bar is one thin row labelled with its value (one team
    is not one huge block), the chart grows with its bars, and when ``total`` teams exceed the
    bars shown the title says these are the top ones. ``links`` (one URL or "" per bar) ride
    along as ``customdata`` for a page script to follow.
    """
    rounded = [round(value, 2) for value in values]
    trace = plotting.bar(
        trace_name,
        rounded,
        names,
        color=color,
        unit="GPU-hours",
        orientation="h",
    )
    trace.update(
        text=[f"{value:,.1f}" for value in rounded],
        textposition="outside",
        cliponaxis=False,
    )
    if links is not None:
        trace["customdata"] = links
    if total is not None and total > len(names):
        title = f"{title} · top {len(names)} of {total} teams"
    top = max(rounded, default=0.0)
    layout = plotting.layout(
        title,
        x_title="GPU-hours",
        y_title="Team",
        height=RANKING_ROW_PX * max(len(names), 1) + 150,
        hovermode="closest",
        bargap=0.35,
        xaxis={"range": [0, top * 1.18 if top > 0 else 1]},
        yaxis={"type": "category", "rangemode": "normal", "automargin": True},
    )
    return plotting.figure([trace], layout, empty_message=empty_message)


def gpu_line(name: str, x: list[str], values: list[float | None], color: str, **style: Any) -> dict:
    """One line of GPUs per hour in the colour ``plotting.COLORS[color]``."""
    return plotting.line(name, x, values, color=plotting.COLORS[color], unit="GPUs", **style)


def stacked_lines(
    x: list[str], names: list[str], values: Mapping[str, list[float | None]], stackgroup: str
) -> list[dict[str, Any]]:
    """The lines of ``stacked``'s series, stacked on each other, one palette colour each."""
    return [
        plotting.line(
            name,
            x,
            [rounded(v) for v in values[name]],
            color=plotting.SERIES[i % len(plotting.SERIES)],
            unit="GPUs",
            stackgroup=stackgroup,
        )
        for i, name in enumerate(names)
    ]


def borrowing_figure(
    time_range: TimeRange,
    title: str,
    data: list[dict[str, Any]],
    hours: list[datetime],
    borrowed: list[float | None],
    *,
    legend_per_row: int,
    empty_message: str,
) -> dict[str, Any]:
    """A GPU chart over the range with its hours of borrowing shaded and a legend entry for them.

    ``borrowed`` has one value per hour of ``hours``; the figure's ``meta`` says how many
    borrowing periods were shaded and how many hours were plotted.
    """
    shapes = borrowing_shapes(hours, borrowed)
    if shapes:
        data.append(legend_swatch("Borrowing period", plotting.COLORS["borrowed"]))
    layout = range_layout(time_range, title, GPUS_AXIS, shapes=shapes)
    legend_room(layout, len(data), per_row=legend_per_row)
    return plotting.figure(
        data,
        layout,
        empty_message=empty_message,
        meta={"borrowing_periods": len(shapes), "hours": len(hours)},
    )


def fleet_hours_figure(
    time_range: TimeRange,
    title: str,
    lines: Sequence[tuple[str, str, str, dict[str, Any]]],
) -> dict[str, Any]:
    """Fleet-wide GPUs per hour from the fleet-scope rollups, one line per figure.

    ``lines``: (legend name, figure name, colour, extra line style) each.
    """
    span = time_range.covered_hours()
    hourly = HourlyRollup.objects.for_scope(RollupScope.FLEET).hourly(
        span, names=tuple(figure for _, figure, _, _ in lines)
    )
    x = x_axis(span.starts())
    data = [
        gpu_line(name, x, per_hour(hourly, figure, digits=2), color, **style)
        for name, figure, color, style in lines
    ]
    layout = plotting.layout(title, x_title="Hour (UTC)", y_title="GPUs (GPU-hours per hour)")
    return plotting.figure(data, layout, empty_message="No hourly rollups in this range yet.")


def top_teams_figure(
    every: Sequence[Any],
    value_of: Callable[[Any], float],
    title: str,
    trace_name: str,
    *,
    color: str,
    empty_message: str,
    link_of: Callable[[Any], str] | None = None,
) -> dict[str, Any]:
    """``team_ranking`` of the first ``RANKING_SIZE`` of ``every`` (ranked teams, biggest first),
    the biggest on top; the title says when more teams ranked than are shown."""
    ranked = list(every[:RANKING_SIZE])
    ranked.reverse()  # horizontal bars: biggest on top
    return team_ranking(
        title,
        trace_name,
        [team.name for team in ranked],
        [value_of(team) for team in ranked],
        color=color,
        empty_message=empty_message,
        links=None if link_of is None else [link_of(team) for team in ranked],
        total=len(every),
    )


def series_line(name: str, series: LiveSeries, color: str, unit: str) -> dict[str, Any]:
    """A detail chart's line from a ``LiveSeries`` (Prometheus or the stored windows)."""
    return plotting.line(
        name, [plotting.iso(moment) for moment in series.x], series.y, color=color, unit=unit
    )


def episode_band(start: datetime, end: datetime) -> dict[str, Any]:
    """The shaded band of an episode's evidence chart, from its start to its end."""
    return {
        "type": "rect",
        "xref": "x",
        "yref": "paper",
        "x0": plotting.iso(start),
        "x1": plotting.iso(end),
        "y0": 0,
        "y1": 1,
        "fillcolor": "rgba(220, 38, 38, 0.08)",
        "line": {"width": 0},
    }


def level_line(value: float, dash: str = "dot") -> dict[str, Any]:
    """A horizontal line across the plot at ``value`` (a threshold, a knee)."""
    return {
        "type": "line",
        "xref": "paper",
        "yref": "y",
        "x0": 0,
        "x1": 1,
        "y0": value,
        "y1": value,
        "line": {"dash": dash, "width": 1, "color": "#dc2626"},
    }
