"""The node and GPU pages' reads: each GPU's reading and holders now, who held it over the range,
and its stored per-window history (the fallback of the live charts).

Per-GPU rows are kept ``GPULEDGER_USAGE_RETENTION_DAYS``; every read here covers one node's or
one GPU's rows, and only the part of the range that has them (``ledger.window_detail``: the
caller passes ``after``, its ``window_start``). Before that, ``node_hourly`` reads the node's
hourly rollups: rollups keep no per-GPU row, so that is all an older hour can show.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    Avg,
    Count,
    F,
    Max,
    Min,
    Q,
)
from django.db.models.functions import TruncHour

from core import plotting
from core.ranges import HourSpan, TimeRange
from dashboard.live import LiveSeries, with_gaps
from dashboard.queries.gpu_states import GpuState, gpu_states
from dashboard.queries.holders import HOLDER_IDENTITY, holder_from_row, holder_urls
from dashboard.queries.now import latest_windows
from fleet.models import Gpu
from ledger.choices import RollupScope
from ledger.figures import BY_NAME, thresholds
from ledger.models import GpuUsage, HourlyRollup, UsageFact, UsageHolding

HOLDERS_LIMIT = 200
# Detail charts plot raw windows up to this span, hourly means beyond it (Plotly stays smooth
# with ~1,500 points per line; 24 h of 60 s windows is 1,440).
RAW_SPAN = timedelta(hours=24)
HALF_HOUR = timedelta(minutes=30)
# GpuUsage field → the read layer's ratio a node's hourly rollup keeps of it. DRAM activity and
# framebuffer memory are per-window only.
HOURLY_RATIOS = {
    "activity": "utilization",
    "sm_active": "utilization",
    "pipe_tensor_active": "tensor_activity",
    "gpu_util": "mean_gpu_util",
}
# The rollup figures each ratio is computed from.
RATIO_FIGURES = {
    "utilization": ("active_gpu_hours", "telemetry_gpu_hours"),
    "tensor_activity": ("tensor_active_gpu_hours", "tensor_covered_gpu_hours"),
    "mean_gpu_util": ("gpu_util_gpu_hours", "gpu_util_covered_gpu_hours"),
}


def gpu_rows(
    gpus: list[Gpu], allowed: set[int] | None, states: dict[int, GpuState] | None = None
) -> list[dict[str, Any]]:
    """Each GPU's reading, state and holders now (``gpu_states``: the story every page tells)."""
    if states is None:
        states = gpu_states(gpus, latest_windows(), allowed)
    rows = []
    for gpu in gpus:
        state = states[gpu.pk]
        rows.append(
            {
                "gpu": gpu,
                "state": state.state,
                "state_label": state.label,
                "held": state.held,
                "placed": state.placed,
                "activity_pct": state.activity_pct,
                "gpu_util": state.gpu_util,
                "fb_used_gib": state.fb_used_gib,
                "holders": [
                    {"holder": holder, "shared": state.shared, **holder_urls(holder)}
                    for holder in state.holders
                ],
            }
        )
    return rows


def holders_over_range(
    gpu_ids: list[int],
    time_range: TimeRange,
    allowed: set[int] | None,
    node: tuple[int, str] | None = None,
    after: datetime | None = None,
) -> list[dict[str, Any]]:
    """Who held these GPUs in the hours the range counts: first/last window, GPU-hours and mean
    activity.

    Only windows ending after ``after`` (the start of the range's per-window rows) count.

    With ``node`` (cluster id, node name), also the pods that held GPUs on that node without
    any DCGM series (``gpu`` empty: exporter down, labels lost); their ``gpu_id`` is None.

    Rows are read per holding (``_holding_rows``: one window length each, so GPU-hours stay right
    when the collection interval changed inside the range); the holdings of one holder are
    merged here.
    """
    # Two queries, not one OR: each walks its own index (by GPU; by cluster and node name).
    filters = [Q(gpu_id__in=gpu_ids)]
    if node is not None:
        filters.append(Q(gpu_id__isnull=True, cluster_id=node[0], node_name=node[1]))
    rows: list[dict[str, Any]] = []
    # The hours the range counts, as every figure over a range (README "Which hours a range
    # counts"): the hour in progress is left out; and of those only the per-window ones.
    first, until = time_range.counted_windows()
    low = max(first, after or first)
    for held in filters:
        rows += _holding_rows(held, low, until)
    merged: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = tuple(row[name] for name in HOLDER_IDENTITY)
        span = row["span"]
        hours = (row["held"] or 0.0) * (span.total_seconds() / 3600.0 if span else 0.0)
        entry = merged.get(key)
        if entry is None:
            merged[key] = {**row, "gpu_hours": hours}
            continue
        total = entry["windows"] + row["windows"]
        for name in ("mean_activity", "mean_gpu_util"):
            # Each mean weighted by the windows that had a reading (an Avg over both).
            values = [(entry[name], entry["n_" + name]), (row[name], row["n_" + name])]
            known = [(v, n) for v, n in values if v is not None and n]
            entry[name] = sum(v * n for v, n in known) / sum(n for _, n in known) if known else None
            entry["n_" + name] += row["n_" + name]
        entry["windows"] = total
        entry["gpu_hours"] += hours
        entry["since"] = min(entry["since"], row["since"])
        entry["until"] = max(entry["until"], row["until"])
        entry["any_shared"] = max(entry["any_shared"] or 0, row["any_shared"] or 0)
    result = []
    for row in merged.values():
        holder = holder_from_row(row, allowed)
        result.append(
            {
                "gpu_id": row["gpu_id"],
                "holder": holder,
                **holder_urls(holder),
                "windows": row["windows"],
                "since": row["since"],
                "until": row["until"],
                "gpu_hours": row["gpu_hours"],
                "activity": row["mean_activity"],
                "activity_pct": plotting.percent(row["mean_activity"]),
                "gpu_util": row["mean_gpu_util"],
                "shared": bool(row["any_shared"]),
            }
        )
    result.sort(key=lambda entry: entry["until"], reverse=True)
    return result[:HOLDERS_LIMIT]


def _holding_rows(held: Q, low: datetime, high: datetime) -> list[dict[str, Any]]:
    """Per allocated holding matching ``held`` with windows ending in ``(low, high]``: its
    holder, window length (``span``), windows, first window start, last window end, GPU-windows
    held and mean readings, the newest ``HOLDERS_LIMIT``.

    The facts are grouped by holding alone and the holdings read after: grouping the wide rows
    of ``GpuUsage`` by the holder's names cost twice as much on a node's week (bench/RESULTS.md).
    """
    holdings = UsageHolding.objects.filter(
        held,
        BY_NAME["allocated_gpu_hours"].rows.q(thresholds()),
        last_window_end__gt=low,
        first_window_end__lte=high,
    )
    facts = {
        row["holding_id"]: row
        for row in UsageFact.objects.filter(
            holding_id__in=holdings.values("id"), window_end__gt=low, window_end__lte=high
        )
        .values("holding_id")
        .annotate(
            windows=Count("window_end"),
            first_end=Min("window_end"),
            until=Max("window_end"),
            mean_activity=Avg("activity"),
            n_mean_activity=Count("activity"),
            mean_gpu_util=Avg("gpu_util"),
            n_mean_gpu_util=Count("gpu_util"),
        )
        .order_by("-until", "holding_id")[:HOLDERS_LIMIT]
    }
    rows = []
    described = UsageHolding.objects.filter(pk__in=list(facts)).values(
        "id", *HOLDER_IDENTITY, "gpus", "window_seconds", "shared"
    )
    for holding in described:
        found = facts[holding["id"]]
        span = timedelta(seconds=holding["window_seconds"])
        rows.append(
            {
                **{name: holding[name] for name in HOLDER_IDENTITY},
                "span": span,
                "windows": found["windows"],
                "since": found["first_end"] - span,
                "until": found["until"],
                "held": holding["gpus"] * found["windows"],
                "mean_activity": found["mean_activity"],
                "n_mean_activity": found["n_mean_activity"],
                "mean_gpu_util": found["mean_gpu_util"],
                "n_mean_gpu_util": found["n_mean_gpu_util"],
                "any_shared": int(holding["shared"]),
            }
        )
    return rows


def stored_gpu_series(
    gpu_ids: list[int],
    time_range: TimeRange,
    metric: str,
    scale: float = 1.0,
    after: datetime | None = None,
) -> dict[int, LiveSeries]:
    """gpu id → its stored values of ``metric`` (a GpuUsage field) over the range, from the
    windows ending after ``after`` on (the start of the range's per-window rows).

    Raw windows up to RAW_SPAN, hourly means beyond; a shared GPU's several rows per window
    carry the same reading, so they are averaged, never summed.
    """
    rows = GpuUsage.objects.filter(
        gpu_id__in=gpu_ids,
        window_end__gt=max(time_range.start, after or time_range.start),
        window_end__lte=time_range.end,
    )
    raw = time_range.end - time_range.start <= RAW_SPAN
    step = None if raw else timedelta(hours=1)
    bucket = F("window_end") if raw else TruncHour("window_end")
    values = (
        rows.annotate(moment=bucket)
        .values("gpu_id", "moment")
        .annotate(v=Avg(metric))
        .order_by("gpu_id", "moment")
    )
    points: dict[int, list[tuple[datetime, float | None]]] = defaultdict(list)
    for row in values:
        value = row["v"]
        points[row["gpu_id"]].append(
            (row["moment"], None if value is None else round(value * scale, 3))
        )
    return {gpu_id: with_gaps(items, step) for gpu_id, items in points.items()}


def node_hourly(
    cluster_id: int, node_name: str, span: HourSpan, metric: str, scale: float = 1.0
) -> LiveSeries | None:
    """The node's hourly rollup of ``metric`` over the span (``scope_hourly``)."""
    return scope_hourly(cluster_id, RollupScope.NODE, {"key": node_name}, span, metric, scale)


def scope_hourly(
    cluster_id: int,
    scope: str,
    where: dict[str, Any],
    span: HourSpan,
    metric: str,
    scale: float = 1.0,
) -> LiveSeries | None:
    """One group's hourly rollup (``scope`` rows matching ``where``) of the GpuUsage field
    ``metric`` over the span: the mean over its held GPUs, at each hour's middle; None when
    rollups do not keep that figure or no hour has a row. Hours without a row are gaps, never 0.
    """
    ratio = HOURLY_RATIOS.get(metric)
    if ratio is None or not span.count:
        return None
    rollups = HourlyRollup.objects.for_scope(scope).filter(cluster_id=cluster_id, **where)
    hourly = rollups.hourly(span, names=RATIO_FIGURES[ratio])
    points: list[tuple[datetime, float | None]] = []
    for hour, found in zip(span.starts(), hourly, strict=True):
        if found is not None:
            value = getattr(found, ratio)
            points.append((hour + HALF_HOUR, None if value is None else round(value * scale, 4)))
    return with_gaps(points, timedelta(hours=1)) if points else None
