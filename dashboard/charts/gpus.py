"""The GPU page's figures: its activity metrics and its memory over the range, live from
Prometheus when it can, from the stored windows otherwise, and before the range's stored
windows (``ledger.window_detail``) from its node's hourly rollups, with a note that says so."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from core import plotting
from core.ranges import TimeRange
from dashboard.charts.parts import range_layout, series_line
from dashboard.decorators import chart_view
from dashboard.live import (
    SOURCE_LIVE,
    SOURCE_STORED,
    LiveSeries,
    live_series,
    promql_string,
    read_live,
    unavailable_notice,
)
from dashboard.queries.gpus import HOURLY_RATIOS, node_hourly, stored_gpu_series
from fleet.models import Gpu
from ledger.window_detail import window_detail

GPU_METRICS = (
    # (GpuUsage field, dcgm-exporter name, legend, scale to %, colour)
    ("sm_active", "DCGM_FI_PROF_SM_ACTIVE", "SM_ACTIVE", 100.0, plotting.COLORS["active"]),
    (
        "pipe_tensor_active",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Tensor pipe active",
        100.0,
        plotting.COLORS["tensor"],
    ),
    ("dram_active", "DCGM_FI_PROF_DRAM_ACTIVE", "DRAM active", 100.0, plotting.COLORS["dram"]),
    ("gpu_util", "DCGM_FI_DEV_GPU_UTIL", "GPU_UTIL", 1.0, plotting.COLORS["gpu_util"]),
)
FB_METRIC = (
    "fb_used_mib",
    "DCGM_FI_DEV_FB_USED",
    "Framebuffer used",
    1.0 / 1024.0,
    plotting.COLORS["memory"],
)


def gpu_metric_figure(gpu: Gpu, time_range: TimeRange, *, memory: bool) -> dict[str, Any]:
    metrics = (FB_METRIC,) if memory else GPU_METRICS
    source = SOURCE_STORED
    notice = ""
    lines: list[tuple[tuple, LiveSeries]] = []
    cluster = gpu.cluster
    if cluster.prometheus_url:
        names = "|".join(metric[1] for metric in metrics)
        promql = (
            f'max by (__name__) ({{__name__=~"{names}", UUID="{promql_string(gpu.uuid)}", '
            f'GPU_I_ID="{promql_string(gpu.gi_id)}"}})'
        )
        live, error = read_live(
            f"gpu {gpu.pk}",
            lambda: live_series(cluster, promql, time_range, ("__name__",), 1.0),
        )
        if live is not None:
            for metric in metrics:
                found = live.get((metric[1],))
                if found is not None:
                    scale = metric[3]
                    found.y = [None if v is None else round(v * scale, 3) for v in found.y]
                    lines.append((metric, found))
            source = SOURCE_LIVE
        else:
            notice = unavailable_notice(error, "the stored per-minute history instead")
    unit = "GiB" if memory else "%"
    if source != SOURCE_LIVE:
        lines, hourly, older = stored_lines(gpu, time_range, metrics)
        notice = " ".join(part for part in (notice, older) if part)
    else:
        hourly = []
    traces = [series_line(metric[2], series, metric[4], unit) for metric, series in lines]
    traces += hourly
    # The range's own time axis, also when the GPU has no point (not Plotly's -1…6).
    if memory:
        layout = range_layout(
            time_range, f"Framebuffer memory used on {gpu} ({source})", "Memory used (GiB)"
        )
    else:
        layout = range_layout(
            time_range, f"Activity of {gpu} ({source})", "Activity (%)", yaxis={"range": [0, 100]}
        )
    return plotting.figure(
        traces,
        layout,
        empty_message="No telemetry for this GPU in this time range.",
        meta={"source": source, "notice": notice},
    )


def stored_lines(
    gpu: Gpu, time_range: TimeRange, metrics: tuple[tuple, ...]
) -> tuple[list[tuple[tuple, LiveSeries]], list[dict[str, Any]], str]:
    """The GPU's stored per-window lines over the part of the range that has them, the hourly
    lines of its node before that (rollups keep no per-GPU row), and the note that says so."""
    detail = window_detail(gpu.cluster_id, time_range.start, time_range.end)
    lines = []
    for metric in metrics:
        stored = stored_gpu_series([gpu.pk], time_range, metric[0], metric[3], detail.window_start)
        if gpu.pk in stored:
            lines.append((metric, stored[gpu.pk]))
    if detail.whole:
        return lines, [], ""
    hourly = []
    node = gpu.node.name if gpu.node is not None else gpu.host
    span = detail.hourly_span()
    for metric in metrics:
        series = node_hourly(gpu.cluster_id, node, span, metric[0], 100.0)
        if series is not None:
            hourly.append(hourly_line(f"{metric[2]}, node mean (hourly)", series, metric[4]))
    kept = [metric[2] for metric in metrics if metric[0] in HOURLY_RATIOS]
    lost = [metric[2] for metric in metrics if metric[0] not in HOURLY_RATIOS]
    if kept:
        shown = f"hourly means of node {node}'s held GPUs ({', '.join(kept)})"
        missing = "no per-GPU figures"
        if lost:
            missing += f"; {', '.join(lost)} not kept hourly"
    else:
        shown = "nothing drawn"
        missing = f"{', '.join(lost)} is not kept in hourly figures"
    return lines, hourly, detail.note(shown, missing)


def hourly_line(name: str, series: LiveSeries, color: str) -> dict[str, Any]:
    """A dotted line with markers: hourly figures, told apart from the per-window lines."""
    line = series_line(name, series, color, "%")
    line["line"]["dash"] = "dot"
    line["mode"] = "lines+markers"
    line["marker"] = {"size": 5}
    return line


@chart_view
def gpu_activity_chart(request: HttpRequest, time_range: TimeRange, pk: int) -> dict[str, Any]:
    gpu = get_object_or_404(Gpu.objects.select_related("cluster", "node"), pk=pk)
    return gpu_metric_figure(gpu, time_range, memory=False)


@chart_view
def gpu_memory_chart(request: HttpRequest, time_range: TimeRange, pk: int) -> dict[str, Any]:
    gpu = get_object_or_404(Gpu.objects.select_related("cluster", "node"), pk=pk)
    return gpu_metric_figure(gpu, time_range, memory=True)
