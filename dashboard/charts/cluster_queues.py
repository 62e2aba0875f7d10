"""The ClusterQueue page's figures: usage, quota and borrowing over time, and its evictions."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.http import HttpRequest

from core import plotting
from core.ranges import TimeRange
from dashboard.access import get_cluster_queue_for_user
from dashboard.charts.parts import (
    added_up,
    borrowing_figure,
    gpu_line,
    legend_room,
    per_hour,
    range_layout,
    real_use,
    stacked,
    stacked_lines,
    x_axis,
)
from dashboard.decorators import chart_view
from dashboard.queries.cluster_queues import evictions_per_hour, queue_hours
from quotas.choices import TransitionKind
from quotas.words import KUEUE, words_for


@chart_view
def cluster_queue_usage_chart(
    request: HttpRequest, time_range: TimeRange, cluster: str, name: str
) -> dict[str, Any]:
    """Allocated per flavor (stacked), nominal, borrowed, lent, real use and pending demand."""
    queue = get_cluster_queue_for_user(request, cluster, name)
    span = time_range.covered_hours()
    hours = span.starts()
    by_flavor = queue_hours(queue, span)
    words = words_for(queue.scheduler)
    # Another scheduler's queue names no node pool: its allocation is one series.
    names, allocated = stacked(
        by_flavor,
        (lambda flavor: flavor or "no flavor") if words is KUEUE else (lambda flavor: "GPUs"),
        "allocated_gpu_hours",
    )
    totals = added_up(
        by_flavor,
        len(hours),
        (
            "borrowed_gpu_hours",
            "nominal_gpu_hours",
            "lent_gpu_hours",
            "active_gpu_hours",
            "telemetry_gpu_hours",
            "pending_gpu_hours",
        ),
    )
    x = x_axis(hours)
    labelled = {f"Allocated {series}": allocated[series] for series in names}
    data = stacked_lines(x, list(labelled), labelled, "allocated")
    borrowed = per_hour(totals, "borrowed_gpu_hours")
    data += [
        gpu_line("Nominal quota", x, per_hour(totals, "nominal_gpu_hours"), "nominal", dash="dash"),
        gpu_line("Borrowed", x, borrowed, "borrowed"),
        gpu_line("Lent", x, per_hour(totals, "lent_gpu_hours"), "lent"),
        gpu_line("Real use (SM_ACTIVE-weighted)", x, real_use(totals), "active"),
        gpu_line("Pending demand", x, per_hour(totals, "pending_gpu_hours"), "pending", dash="dot"),
    ]
    return borrowing_figure(
        time_range,
        f"{words.queue} {queue.name}: usage and borrowing",
        data,
        hours,
        borrowed,
        legend_per_row=8,
        empty_message="No rollups for this queue in this range.",
    )


@chart_view
def cluster_queue_evictions_chart(
    request: HttpRequest, time_range: TimeRange, cluster: str, name: str
) -> dict[str, Any]:
    """Evictions and preemptions of the queue's workloads per hour, by kind and reason."""
    queue = get_cluster_queue_for_user(request, cluster, name)
    series: dict[str, dict[datetime, int]] = defaultdict(dict)
    for row in evictions_per_hour(queue, time_range):
        label = f"{TransitionKind(row['kind']).label}: {row['reason'] or 'no reason'}"
        series[label][row["bucket"]] = row["count"]
    palette = [plotting.COLORS["idle"], plotting.COLORS["borrowed"], *plotting.SERIES]
    data = []
    for i, label in enumerate(sorted(series)):
        buckets = sorted(series[label])
        data.append(
            plotting.bar(
                label,
                x_axis(buckets),
                [series[label][b] for b in buckets],
                color=palette[i % len(palette)],
                unit="per hour",
            )
        )
    layout = range_layout(
        time_range,
        "Evictions and preemptions per hour",
        "Evictions (count per hour)",
        barmode="stack",
    )
    legend_room(layout, len(data), per_row=3)
    return plotting.figure(data, layout, empty_message="No evictions or preemptions in this range.")
