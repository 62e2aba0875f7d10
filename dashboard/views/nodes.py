"""The node page: its GPUs now, who held them over the range, and their activity chart."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.decorators import dashboard_page
from dashboard.fleet_map import node_capacity
from dashboard.frame import chart_url, stat
from dashboard.queries.gpu_states import gpu_states, node_story
from dashboard.queries.gpus import HOLDERS_LIMIT, gpu_rows, holders_over_range
from dashboard.queries.now import latest_windows
from dashboard.templatetags.formatting import gpus as fmt_gpus
from dashboard.templatetags.formatting import percent
from fleet.models import Gpu, Node
from ledger.window_detail import window_detail


@dashboard_page
def node_detail(request: HttpRequest, time_range: TimeRange, pk: int) -> HttpResponse:
    node = get_object_or_404(Node.objects.select_related("cluster"), pk=pk)
    allowed = allowed_team_ids(request)
    gpus = list(
        Gpu.objects.physical().filter(node=node).select_related("node").order_by("index", "gi_id")
    )
    states = gpu_states(gpus, latest_windows(), allowed, nodes=[(node.cluster_id, node.name)])
    story = node_story(list(states.values()), states.unplaced_on(node.cluster_id, node.name))
    rows = gpu_rows(gpus, allowed, states)
    gpu_by_id = {gpu.pk: gpu for gpu in gpus}
    detail = window_detail(node.cluster_id, time_range.start, time_range.end)
    history = holders_over_range(
        list(gpu_by_id),
        time_range,
        allowed,
        node=(node.cluster_id, node.name),
        after=detail.window_start,
    )
    for entry in history:
        entry["gpu"] = gpu_by_id.get(entry["gpu_id"])
    with_data = [row for row in rows if row["activity_pct"] is not None]
    silent_held = sum(1 for row in rows if row["state"] == "held_no_telemetry")
    unplaced = states.unplaced_on(node.cluster_id, node.name)
    capacity = node_capacity(node, states.values())
    cards = [
        stat(
            "GPUs",
            fmt_gpus(capacity.gpus),
            unit="GPUs",
            note=f"{capacity.devices} devices · {node.gpu_product or 'unknown model'}",
            tone="neutral",
            testid="node-gpus",
        ),
        stat(
            "Held now",
            str(story.held_devices),
            unit=f"of {len(gpus)}",
            note=" · ".join(
                note
                for note in (
                    f"{silent_held} held with no telemetry" if silent_held else "",
                    f"+{fmt_gpus(unplaced)} GPUs held that DCGM shows on no GPU"
                    if unplaced
                    else "",
                )
                if note
            ),
            tone="warn" if silent_held or unplaced else "",
            testid="node-held",
        ),
        stat(
            "Mean SM_ACTIVE now",
            percent(sum(r["activity_pct"] for r in with_data) / len(with_data) / 100)
            if with_data
            else "—",
            unit="%" if with_data else "",
            note=f"{len(gpus) - len(with_data)} without telemetry",
            tone="neutral",
        ),
    ]
    context = {
        "nav": "map",
        "page_title": node.name,
        "node": node,
        "cards": cards,
        "gpu_rows": rows,
        "history": history,
        "history_limit": HOLDERS_LIMIT,
        "detail_note": detail.note(
            "the node's hourly figures", "rollups keep no per-GPU row: no holders listed"
        ),
        "retention_days": settings.GPULEDGER_USAGE_RETENTION_DAYS,
        "live": bool(node.cluster.prometheus_url),
        "activity_chart_url": chart_url("dashboard:chart-node", request, node.pk),
        "time_range": time_range,
    }
    return render(request, "dashboard/node_detail.html", context)
