"""The GPU page: its reading and holders now, who held it over the range, and its charts."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.decorators import dashboard_page
from dashboard.frame import chart_url
from dashboard.queries.gpus import HOLDERS_LIMIT, gpu_rows, holders_over_range
from dashboard.templatetags.formatting import gpu_label
from fleet.models import Gpu
from ledger.window_detail import window_detail


@dashboard_page
def gpu_detail(request: HttpRequest, time_range: TimeRange, pk: int) -> HttpResponse:
    gpu = get_object_or_404(Gpu.objects.select_related("cluster", "node"), pk=pk)
    allowed = allowed_team_ids(request)
    # The node's GPUs too: holders known only from the allocation are placed across them.
    siblings = (
        list(
            Gpu.objects.physical()
            .filter(node_id=gpu.node_id)
            .select_related("node")
            .order_by("index", "gi_id")
        )
        if gpu.node_id
        else []
    )
    if gpu.pk not in {sibling.pk for sibling in siblings}:
        siblings.append(gpu)
    row = next(r for r in gpu_rows(siblings, allowed) if r["gpu"].pk == gpu.pk)
    detail = window_detail(gpu.cluster_id, time_range.start, time_range.end)
    history = holders_over_range([gpu.pk], time_range, allowed, after=detail.window_start)
    context = {
        "nav": "map",
        "page_title": f"{gpu.host} · {gpu_label(gpu)}",
        "gpu": gpu,
        "row": row,
        "history": history,
        "history_limit": HOLDERS_LIMIT,
        "detail_note": detail.note(
            "the node's hourly figures", "rollups keep no per-GPU row: no holders listed"
        ),
        "retention_days": settings.GPULEDGER_USAGE_RETENTION_DAYS,
        "live": bool(gpu.cluster.prometheus_url),
        "activity_chart_url": chart_url("dashboard:chart-gpu-activity", request, gpu.pk),
        "memory_chart_url": chart_url("dashboard:chart-gpu-memory", request, gpu.pk),
        "time_range": time_range,
    }
    return render(request, "dashboard/gpu_detail.html", context)
