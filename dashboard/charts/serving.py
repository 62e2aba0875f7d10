"""A serving deployment's figures (README "Serving: deployments"): throughput per replica with
its knee, SM_ACTIVE against tokens per GPU, p95 latencies against the targets, and saturation.
One point per stored hour of the range; an hour without the figure is a gap (None), never 0."""

from __future__ import annotations

from django.http import HttpRequest

from core import plotting
from core.ranges import TimeRange
from dashboard.access import get_serving_workload_for_user
from dashboard.charts.parts import legend_room, range_layout, rounded
from dashboard.decorators import chart_view
from dashboard.queries.serving import one_deployment
from serving.deployments import Deployment, Hour
from serving.figures import KNEE_FRACTION
from serving.knee import OUTPUT_TOKENS, REQUESTS

NO_SERVING = "No serving telemetry in this range."


def _deployment(request: HttpRequest, time_range: TimeRange, pk: int) -> Deployment:
    return one_deployment(get_serving_workload_for_user(request, pk), time_range)


def _times(hours: list[Hour]) -> list[str]:
    return [plotting.iso(h.hour) for h in hours]


def _second_axis(layout: dict) -> dict:
    """A right axis with ticks of its own (not aligned to the left axis' grid) and room."""
    layout["yaxis2"].update({"tickmode": "auto", "nticks": 6, "showgrid": False})
    layout["margin"] = {**layout["margin"], "r": 70}
    return layout


def _level(name: str, time_range: TimeRange, value: float, color: str, dash: str) -> dict:
    """A horizontal line across the whole range (a knee, a target)."""
    trace = plotting.line(
        name,
        [plotting.iso(time_range.start), plotting.iso(time_range.end)],
        [rounded(value), rounded(value)],
        color=color,
        dash=dash,
    )
    trace["hoverinfo"] = "skip"
    trace.pop("hovertemplate", None)
    return trace


@chart_view
def serving_throughput_chart(request: HttpRequest, time_range: TimeRange, pk: int) -> dict:
    d = _deployment(request, time_range, pk)
    # The knee's unit; without a knee, tokens when any hour counted them, else requests.
    if d.knee is not None:
        unit = d.knee.unit
    elif any(h.output_tokens_per_second is not None for h in d.hours):
        unit = OUTPUT_TOKENS
    else:
        unit = REQUESTS
    label = "tokens/s" if unit == OUTPUT_TOKENS else "req/s"
    delivered = plotting.line(
        f"Output {label} per replica" if unit == OUTPUT_TOKENS else "Requests/s per replica",
        _times(d.hours),
        [rounded(h.per_replica(getattr(h, unit)), 2) for h in d.hours],
        color=plotting.COLORS["allocated"],
        unit=label,
    )
    delivered["mode"] = "lines+markers"
    data = [delivered]
    if d.knee is not None:
        data.append(
            _level(
                f"Knee {d.knee.per_replica:,.1f} {label}",
                time_range,
                d.knee.per_replica,
                plotting.COLORS["active"],
                "dash",
            )
        )
        data.append(
            _level(
                f"Half the knee {KNEE_FRACTION * d.knee.per_replica:,.1f}",
                time_range,
                KNEE_FRACTION * d.knee.per_replica,
                plotting.COLORS["idle"],
                "dot",
            )
        )
    layout = range_layout(time_range, "Throughput per replica", f"{label} per replica")
    return plotting.figure(
        data,
        legend_room(layout, len(data), per_row=3),
        empty_message=NO_SERVING,
        meta={"knee": None if d.knee is None else d.knee.per_replica},
    )


@chart_view
def serving_activity_chart(request: HttpRequest, time_range: TimeRange, pk: int) -> dict:
    d = _deployment(request, time_range, pk)
    joined = [h for h in d.hours if h.sm_active is not None and h.gpu_hours]
    points = {
        "type": "scatter",
        "mode": "markers",
        "name": "Hours with DCGM telemetry",
        "x": [plotting.percent(h.sm_active) for h in joined],
        "y": [
            rounded(
                None
                if h.output_tokens_per_second is None or not h.gpu_hours
                else h.output_tokens_per_second / h.gpu_hours,
                2,
            )
            for h in joined
        ],
        "text": [f"{h.hour:%Y-%m-%d %H:00} UTC" for h in joined],
        "marker": {"color": plotting.COLORS["active"], "size": 8},
        "hovertemplate": "%{text}<br>SM_ACTIVE %{x:.1f} %<br>%{y:,.1f} tokens/s per GPU"
        "<extra></extra>",
    }
    layout = plotting.layout(
        "SM_ACTIVE against output tokens/s per GPU",
        x_title="SM_ACTIVE (%)",
        y_title="Output tokens/s per GPU",
        showlegend=False,
        hovermode="closest",
    )
    layout["xaxis"]["range"] = [0, 100]
    layout["margin"] = {**layout["margin"], "t": 48}
    return plotting.figure(
        [points],
        layout,
        empty_message="No hour of this range has DCGM telemetry of its GPUs.",
    )


@chart_view
def serving_latency_chart(request: HttpRequest, time_range: TimeRange, pk: int) -> dict:
    d = _deployment(request, time_range, pk)
    targets = d.workload.targets()
    times = _times(d.hours)
    data = [
        plotting.line(
            "TTFT p95",
            times,
            [rounded(h.ttft_p95_seconds) for h in d.hours],
            color=plotting.SERIES[0],
            unit="s",
        ),
        plotting.line(
            "ITL p95",
            times,
            [rounded(h.itl_p95_seconds, 4) for h in d.hours],
            color=plotting.SERIES[1],
            unit="s",
            yaxis="y2",
        ),
    ]
    if targets.ttft_p95_seconds is not None:
        data.append(
            _level(
                f"TTFT target {targets.ttft_p95_seconds:g} s",
                time_range,
                targets.ttft_p95_seconds,
                plotting.SERIES[0],
                "dash",
            )
        )
    if targets.itl_p95_seconds is not None:
        itl = _level(
            f"ITL target {targets.itl_p95_seconds:g} s",
            time_range,
            targets.itl_p95_seconds,
            plotting.SERIES[1],
            "dash",
        )
        itl["yaxis"] = "y2"
        data.append(itl)
    layout = range_layout(
        time_range,
        "Latency p95 against targets",
        "Time to first token (s)",
        y2_title="Inter-token latency (s)",
    )
    return plotting.figure(
        data, legend_room(_second_axis(layout), len(data), per_row=2), empty_message=NO_SERVING
    )


@chart_view
def serving_saturation_chart(request: HttpRequest, time_range: TimeRange, pk: int) -> dict:
    d = _deployment(request, time_range, pk)
    times = _times(d.hours)
    data = [
        plotting.line(
            "KV cache mean",
            times,
            [plotting.percent(h.kv_cache_mean) for h in d.hours],
            color=plotting.COLORS["memory"],
            unit="%",
        ),
        plotting.line(
            "KV cache max",
            times,
            [plotting.percent(h.kv_cache_max) for h in d.hours],
            color=plotting.COLORS["memory"],
            unit="%",
            dash="dot",
        ),
        plotting.line(
            "Waiting per replica",
            times,
            [rounded(h.per_replica(h.mean_waiting), 2) for h in d.hours],
            color=plotting.COLORS["idle"],
            unit="requests",
            yaxis="y2",
        ),
        plotting.line(
            "Running per replica",
            times,
            [rounded(h.per_replica(h.mean_running), 2) for h in d.hours],
            color=plotting.COLORS["allocated"],
            unit="requests",
            yaxis="y2",
        ),
    ]
    layout = range_layout(
        time_range, "Saturation", "KV-cache use (%)", y2_title="Requests per replica"
    )
    layout["yaxis"]["range"] = [0, 100]
    return plotting.figure(
        data, legend_room(_second_axis(layout), len(data), per_row=2), empty_message=NO_SERVING
    )
