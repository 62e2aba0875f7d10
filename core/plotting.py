"""Plotly figures as plain dicts, so every chart shares one look: title, units, legend, colours.

Chart views (``dashboard/charts/``) build their traces with the helpers below and return
``figure(...)``; ``static/js/charts.js`` passes ``data``, ``layout`` and ``config`` to
``Plotly.newPlot`` unchanged. Missing values are ``None`` (JSON null): Plotly draws a gap, never 0.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from core import ratios

# One colour per figure of docs/architecture.md "Figures", the same on every page.
COLORS = {
    "capacity": "#94a3b8",
    "allocated": "#2563eb",
    "active": "#16a34a",
    "idle": "#dc2626",
    "nominal": "#64748b",
    "borrowed": "#d97706",
    "lent": "#7c3aed",
    "pending": "#0891b2",
    "busy": "#ea580c",
    "tensor": "#9333ea",
    "dram": "#0d9488",
    "gpu_util": "#f59e0b",
    "memory": "#475569",
    "no_data": "#c4c9d2",
}
# Distinct, colour-blind-friendly series colours (Okabe-Ito, then Tableau) for per-GPU lines.
SERIES = [
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#F0E442",
    "#000000",
    "#4E79A7",
    "#F28E2B",
    "#59A14F",
    "#B07AA1",
]
# Activity 0-1: Viridis (ordered, colour-blind safe); no-data cells stay grey, outside the scale.
ACTIVITY_COLORSCALE = "Viridis"
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"

CONFIG = {
    "responsive": True,
    "displaylogo": False,
    "modeBarButtonsToRemove": ["lasso2d", "select2d"],
}


def axis(title: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title},
        "gridcolor": "#e5e7eb",
        "zerolinecolor": "#cbd5e1",
        "automargin": True,
        **extra,
    }


def layout(
    title: str,
    *,
    x_title: str,
    y_title: str,
    y2_title: str | None = None,
    height: int = 360,
    **extra: Any,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "title": {
            "text": title,
            "x": 0,
            "xanchor": "left",
            "xref": "paper",
            "y": 0.98,
            "yanchor": "top",
            "yref": "container",
            "font": {"size": 15},
        },
        "xaxis": axis(x_title),
        "yaxis": axis(y_title, rangemode="tozero"),
        "showlegend": True,
        # Legend between the title and the plot: never over the x-axis title, whatever the height.
        "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.0, "yanchor": "bottom"},
        "margin": {"l": 60, "r": 20, "t": 76, "b": 48},
        "height": height,
        "font": {"family": FONT, "size": 12, "color": "#1f2937"},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "hovermode": "x unified",
    }
    if y2_title:
        result["yaxis2"] = axis(y2_title, overlaying="y", side="right", rangemode="tozero")
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = {**result[key], **value}
        else:
            result[key] = value
    return result


def iso(moment: datetime) -> str:
    return moment.isoformat()


def plain(value: object) -> str:
    """``value`` as literal text in a Plotly string (trace name, hover text, tick or category).

    Plotly renders a subset of HTML in those strings (``<a href>``, ``<b>``, ``<span style>``),
    so an upstream string such as a Workload condition message could become a live link. It
    decodes ``&lt;``, ``&gt;`` and ``&amp;``, so the escaped text shows exactly as it was written.
    """
    return html.escape(str(value), quote=False)


def _plain_categories(values: Sequence[Any]) -> list[Any]:
    return [plain(value) if isinstance(value, str) else value for value in values]


def line(
    name: str,
    x: Sequence[Any],
    y: Sequence[float | None],
    *,
    color: str | None = None,
    unit: str = "",
    fill: str | None = None,
    dash: str | None = None,
    yaxis: str | None = None,
    stackgroup: str | None = None,
) -> dict[str, Any]:
    name = plain(name)
    trace: dict[str, Any] = {
        "type": "scatter",
        "mode": "lines",
        "name": name,
        "x": list(x),
        "y": list(y),
        "connectgaps": False,
        "hovertemplate": f"%{{y:,.2f}} {unit}<extra>{name}</extra>".replace("  ", " "),
        "line": {"width": 2},
    }
    if color:
        trace["line"]["color"] = color
    if dash:
        trace["line"]["dash"] = dash
    if fill:
        trace["fill"] = fill
    if yaxis:
        trace["yaxis"] = yaxis
    if stackgroup:
        trace["stackgroup"] = stackgroup
    return trace


def bar(
    name: str,
    x: Sequence[Any],
    y: Sequence[Any],
    *,
    color: str | None = None,
    unit: str = "",
    orientation: str = "v",
) -> dict[str, Any]:
    value = "x" if orientation == "h" else "y"
    name = plain(name)
    # Categories are names (teams, workloads): literal text on the axis too.
    trace: dict[str, Any] = {
        "type": "bar",
        "name": name,
        "x": _plain_categories(x) if orientation == "v" else list(x),
        "y": _plain_categories(y) if orientation == "h" else list(y),
        "orientation": orientation,
        "hovertemplate": f"%{{{value}:,.1f}} {unit}<extra>{name}</extra>",
    }
    if color:
        trace["marker"] = {"color": color}
    return trace


def figure(
    data: list[dict[str, Any]],
    layout_: dict[str, Any],
    *,
    empty_message: str = "No data in this time range.",
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON a chart view returns. A figure without any point says so on the plot."""
    has_points = any(_has_values(trace) for trace in data)
    if not has_points:
        layout_ = {
            **layout_,
            "annotations": [
                *layout_.get("annotations", []),
                {
                    "text": empty_message,
                    "showarrow": False,
                    "xref": "paper",
                    "yref": "paper",
                    "x": 0.5,
                    "y": 0.5,
                    "font": {"size": 14, "color": "#6b7280"},
                },
            ],
        }
    return {
        "data": data,
        "layout": layout_,
        "config": CONFIG,
        "meta": {"empty": not has_points, **(meta or {})},
    }


def _has_values(trace: dict[str, Any]) -> bool:
    for key in ("y", "z", "x"):
        values = trace.get(key)
        if values is None:
            continue
        for value in values:
            if isinstance(value, list):
                if any(v is not None for v in value):
                    return True
            elif value is not None:
                return True
        return False
    return False


def percent(value: float | None) -> float | None:
    """A 0-1 ratio as 0-100 for display; None stays None (no telemetry is not 0 %)."""
    return None if value is None else round(value * 100.0, 2)


ratio = ratios.ratio
