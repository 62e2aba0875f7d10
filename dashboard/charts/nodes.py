"""The node page's figure: SM_ACTIVE per GPU over the range, live from Prometheus when it can,
from the stored windows otherwise, and before the range's stored windows
(``ledger.window_detail``) the node's hourly mean from its rollups, with a note that says so."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from core import plotting
from core.ranges import TimeRange
from dashboard.charts.gpus import hourly_line
from dashboard.charts.parts import range_layout, series_line
from dashboard.decorators import chart_view
from dashboard.live import (
    SOURCE_LIVE,
    SOURCE_STORED,
    LiveSeries,
    host_selector,
    live_series,
    read_live,
    unavailable_notice,
)
from dashboard.queries.gpus import node_hourly, stored_gpu_series
from dashboard.templatetags.formatting import gpu_label
from fleet.models import Gpu, Node
from ledger.window_detail import window_detail


def node_activity_figure(node: Node, time_range: TimeRange) -> dict[str, Any]:
    gpus = list(Gpu.objects.physical().filter(node=node).order_by("index", "gi_id"))
    source = SOURCE_STORED
    notice = ""
    lines: list[tuple[Gpu, LiveSeries]] = []
    if node.cluster.prometheus_url:
        old, new = host_selector(node.name)
        metric = "DCGM_FI_PROF_SM_ACTIVE"
        promql = f"max by (gpu, GPU_I_ID) ({metric}{{{old}}} or {metric}{{{new}}})"
        live, error = read_live(
            f"node {node.pk}",
            lambda: live_series(node.cluster, promql, time_range, ("gpu", "GPU_I_ID"), 100.0),
        )
        if live is not None:
            for gpu in gpus:
                found = live.get((str(gpu.index), gpu.gi_id))
                if found is not None:
                    lines.append((gpu, found))
            source = SOURCE_LIVE
        else:
            notice = unavailable_notice(error, "the stored per-minute history instead")
    hourly: LiveSeries | None = None
    if source != SOURCE_LIVE:
        detail = window_detail(node.cluster_id, time_range.start, time_range.end)
        stored = stored_gpu_series(
            [gpu.pk for gpu in gpus], time_range, "activity", 100.0, detail.window_start
        )
        lines = [(gpu, stored[gpu.pk]) for gpu in gpus if gpu.pk in stored]
        if not detail.whole:
            hourly = node_hourly(
                node.cluster_id, node.name, detail.hourly_span(), "activity", 100.0
            )
            older = detail.note(
                "the node's hourly mean of its held GPUs", "no per-GPU lines: rollups keep none"
            )
            notice = (notice + " " if notice else "") + older
    named = (
        per_physical_gpu(lines)
        if any(gpu.gi_id for gpu in gpus)
        else [(gpu_label(gpu), series) for gpu, series in lines]
    )
    traces = [
        series_line(
            plotting.plain(name), series, plotting.SERIES[index % len(plotting.SERIES)], "%"
        )
        for index, (name, series) in enumerate(named)
    ]
    if hourly is not None:
        traces.append(hourly_line("Node mean (hourly)", hourly, plotting.COLORS["nominal"]))
    # The range's own time axis, also when no GPU has a point (not Plotly's -1…6).
    layout = range_layout(
        time_range,
        f"SM_ACTIVE per GPU on {node.name} ({source})",
        "SM_ACTIVE (%)",
        yaxis={"range": [0, 100]},
    )
    return plotting.figure(
        traces,
        layout,
        empty_message="No telemetry for this node's GPUs in this time range.",
        meta={"source": source, "notice": notice.strip()},
    )


def per_physical_gpu(lines: list[tuple[Gpu, LiveSeries]]) -> list[tuple[str, LiveSeries]]:
    """A MIG node's instance lines merged into one line per physical GPU: the mean SM_ACTIVE of
    its instances weighted by their compute slices, named by its instance profiles.

    Seven instances a GPU make a legend of dozens of lines; one per GPU reads like a whole-GPU
    node, and the GPU page keeps each instance's own line.
    """
    groups: dict[int, list[tuple[Gpu, LiveSeries]]] = defaultdict(list)
    for gpu, series in lines:
        groups[gpu.index].append((gpu, series))
    result = []
    for index in sorted(groups):
        members = groups[index]
        sums: dict[Any, list[float]] = defaultdict(lambda: [0.0, 0.0])
        moments = set()
        for gpu, series in members:
            weight = gpu.fraction if gpu.gi_id else 1.0
            for moment, value in zip(series.x, series.y, strict=False):
                moments.add(moment)
                if value is not None:
                    sums[moment][0] += value * weight
                    sums[moment][1] += weight
        merged = LiveSeries(f"GPU {index}")
        for moment in sorted(moments):
            total, weight = sums.get(moment, (0.0, 0.0))
            merged.x.append(moment)
            merged.y.append(round(total / weight, 3) if weight else None)
        profiles = Counter(gpu.mig_profile or "?" for gpu, _ in members if gpu.gi_id)
        described = ", ".join(
            f"{count}× {profile}" if count > 1 else profile
            for profile, count in sorted(profiles.items())
        )
        name = f"GPU {index} · MIG {described}" if described else f"GPU {index}"
        result.append((name, merged))
    return result


@chart_view
def node_chart(request: HttpRequest, time_range: TimeRange, pk: int) -> dict[str, Any]:
    node = get_object_or_404(Node.objects.select_related("cluster"), pk=pk)
    return node_activity_figure(node, time_range)
