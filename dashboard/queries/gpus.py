"""The node and GPU pages' reads: each GPU's reading and holders now, who held it over the range,
and its stored per-window history (the fallback of the live charts).

Per-GPU rows are kept ``GPULEDGER_USAGE_RETENTION_DAYS``; every read here covers one node's or
one GPU's rows.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    Avg,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    IntegerField,
    Max,
    Min,
    Q,
    Sum,
)
from django.db.models.functions import Cast, TruncHour

from core import plotting
from core.ranges import TimeRange
from dashboard.live import LiveSeries, with_gaps
from dashboard.queries.gpu_states import GpuState, gpu_states
from dashboard.queries.holders import HOLDER_IDENTITY, holder_from_row, holder_urls
from dashboard.queries.now import latest_windows
from fleet.models import Gpu
from ledger.figures import BY_NAME, thresholds
from ledger.models import GpuUsage

HOLDERS_LIMIT = 200
# Detail charts plot raw windows up to this span, hourly means beyond it (Plotly stays smooth
# with ~1,500 points per line; 24 h of 60 s windows is 1,440).
RAW_SPAN = timedelta(hours=24)


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
) -> list[dict[str, Any]]:
    """Who held these GPUs in the hours the range counts: first/last window, GPU-hours and mean
    activity.

    With ``node`` (cluster id, node name), also the pods that held GPUs on that node without
    any DCGM series (``gpu`` empty: exporter down, labels lost); their ``gpu_id`` is None.

    Rows are grouped by window length too, so GPU-hours stay right when the collection interval
    changed inside the range; the groups of one holder are merged here.
    """
    # Two queries, not one OR: each walks its own index (by GPU; by cluster and node name).
    filters = [Q(gpu_id__in=gpu_ids)]
    if node is not None:
        filters.append(Q(gpu_id__isnull=True, cluster_id=node[0], node_name=node[1]))
    rows: list[dict[str, Any]] = []
    # The hours the range counts, as every figure over a range (README "Which hours a range
    # counts"): the hour in progress is left out.
    after, until = time_range.counted_windows()
    allocated = BY_NAME["allocated_gpu_hours"].rows.q(thresholds())
    for held in filters:
        rows += (
            GpuUsage.objects.filter(held, allocated, window_end__gt=after, window_end__lte=until)
            .annotate(
                span=ExpressionWrapper(
                    F("window_end") - F("window_start"), output_field=DurationField()
                )
            )
            .values(*HOLDER_IDENTITY, "span")
            .annotate(
                windows=Count("pk"),
                since=Min("window_start"),
                until=Max("window_end"),
                held=Sum("gpus"),
                mean_activity=Avg("activity"),
                mean_gpu_util=Avg("gpu_util"),
                any_shared=Max(Cast("shared", IntegerField())),
            )
            .order_by("-until", "gpu_id")[:HOLDERS_LIMIT]
        )
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
            values = [(entry[name], entry["windows"]), (row[name], row["windows"])]
            known = [(v, n) for v, n in values if v is not None]
            entry[name] = sum(v * n for v, n in known) / sum(n for _, n in known) if known else None
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


def stored_gpu_series(
    gpu_ids: list[int], time_range: TimeRange, metric: str, scale: float = 1.0
) -> dict[int, LiveSeries]:
    """gpu id → its stored values of ``metric`` (a GpuUsage field) over the range.

    Raw windows up to RAW_SPAN, hourly means beyond; a shared GPU's several rows per window
    carry the same reading, so they are averaged, never summed.
    """
    rows = GpuUsage.objects.filter(
        gpu_id__in=gpu_ids,
        window_end__gt=time_range.start,
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
