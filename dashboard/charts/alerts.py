"""The episode page's evidence chart: the GPUs' SM_ACTIVE over the episode, from the stored
windows (per window up to 12 hours, hourly means beyond), with the idle threshold. Hours without
stored windows (``ledger.window_detail``) show the hourly mean of the episode's workload, queue
or node from its rollups, and the figure's notice says so.

The time axis is a date axis over the episode and its margins whatever the points: an episode
without a stored sample (a ghost reservation's pods never ran) still draws its band, and the
band's dates are never read as numbers on an axis Plotly would otherwise guess from no data.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Avg, Q
from django.db.models.functions import TruncHour
from django.http import HttpRequest

from alerts.choices import Rule
from alerts.models import Episode
from core import plotting
from dashboard.access import get_episode_for_user
from dashboard.charts.episode_serving import serving_evidence_figure
from dashboard.charts.gpus import hourly_line
from dashboard.charts.parts import TIME_AXIS, episode_band, level_line
from dashboard.decorators import chart_view
from dashboard.queries.gpus import scope_hourly
from ledger.choices import RollupScope
from ledger.models import GpuUsage
from ledger.window_detail import window_detail

# Margin shown before and after the episode.
MARGIN = timedelta(minutes=30)
RAW_SPAN = timedelta(hours=12)
MAX_GPU_LINES = 8


def _usage(episode: Episode) -> Any:
    usage = GpuUsage.objects.filter(cluster_id=episode.cluster_id, allocated=True)
    if episode.workload_id is not None and episode.rule != Rule.TELEMETRY_MISSING:
        return usage.filter(workload_id=episode.workload_id)
    keys = list((episode.evidence or {}).get("gpus", {}))
    if keys:
        return usage.filter(gpu_key__in=keys)
    if episode.cluster_queue_id is not None:
        return usage.filter(cluster_queue_id=episode.cluster_queue_id)
    if episode.node_id is not None:
        return usage.filter(node_name=episode.node.name if episode.node else "")
    return usage.none()


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@chart_view(uses_range=False)
def episode_evidence_chart(request: HttpRequest, pk: int) -> dict[str, Any]:
    episode = get_episode_for_user(request, pk)
    if episode.serving_workload_id is not None:
        return serving_evidence_figure(episode)
    end = episode.resolved_at or episode.evaluated_until
    start, stop = episode.started_at - MARGIN, end + MARGIN
    detail = window_detail(episode.cluster_id, start, stop)
    usage = _usage(episode).filter(window_end__gt=detail.window_start, window_end__lte=stop)
    series: dict[str, dict[datetime, float | None]] = defaultdict(dict)
    if stop - start <= RAW_SPAN:
        rows = usage.exclude(gpu_key="").values_list("gpu_key", "window_end", "activity")
    else:
        rows = (
            usage.exclude(gpu_key="")
            .annotate(hour=TruncHour("window_end"))
            .values_list("gpu_key", "hour")
            .annotate(mean=Avg("activity", filter=Q(activity__isnull=False)))
            .order_by()
        )
    for key, moment, activity in rows:
        series[key][moment] = activity
    moments = sorted({moment for points in series.values() for moment in points})
    traces = []
    for key in sorted(series)[:MAX_GPU_LINES]:
        label = key.split("/")[1] if key.count("/") >= 1 else key
        traces.append(
            plotting.line(
                label,
                [plotting.iso(moment) for moment in moments],
                [_rounded(series[key].get(moment)) for moment in moments],
            )
        )
    notice = ""
    if not detail.whole:
        scope, where, name = _hourly_group(episode)
        hourly = (
            scope_hourly(episode.cluster_id, scope, where, detail.hourly_span(), "activity")
            if scope
            else None
        )
        if hourly is not None:
            traces.append(hourly_line(f"{name} mean (hourly)", hourly, plotting.COLORS["nominal"]))
        shown = f"the {name.lower()}'s hourly mean (dotted)" if scope else "nothing drawn"
        notice = detail.note(shown, "no per-GPU lines: rollups keep none")
    threshold = (episode.evidence or {}).get("idle_threshold", 0.01)
    layout = plotting.layout(
        "SM_ACTIVE of the episode's GPUs" + (" (hourly means)" if stop - start > RAW_SPAN else ""),
        x_title=TIME_AXIS,
        y_title="SM_ACTIVE (0-1)",
        xaxis={"type": "date", "range": [plotting.iso(start), plotting.iso(stop)]},
        yaxis={"range": [0, 1.02]},
        shapes=[episode_band(episode.started_at, end), level_line(threshold)],
    )
    return plotting.figure(
        traces,
        layout,
        empty_message="No stored per-GPU samples for this episode (pruned, or no telemetry).",
        meta={"notice": notice, "per_window_since": plotting.iso(detail.window_start)},
    )


def _hourly_group(episode: Episode) -> tuple[str, dict[str, Any], str]:
    """The rollup group that stands for the episode's GPUs where they have no per-window rows:
    (scope, its filter, its name), or ("", {}, "") when no rollup group matches."""
    if episode.workload_id is not None and episode.rule != Rule.TELEMETRY_MISSING:
        return RollupScope.WORKLOAD, {"workload_id": episode.workload_id}, "Workload"
    if episode.cluster_queue_id is not None:
        return RollupScope.CLUSTER_QUEUE, {"cluster_queue_id": episode.cluster_queue_id}, "Queue"
    if episode.node is not None:
        return RollupScope.NODE, {"key": episode.node.name}, "Node"
    return "", {}, ""
