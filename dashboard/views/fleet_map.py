"""The fleet map page: GPU nodes, filtered and grouped, with a heatmap and their figures now."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.decorators import dashboard_page
from dashboard.fleet_map import (
    MAP_NODES_PER_PAGE,
    MapQuery,
    map_page,
    node_choices,
    node_summaries,
    team_choices,
)
from dashboard.frame import chart_url
from dashboard.queries.now import latest_windows


@dashboard_page
def fleet_map(request: HttpRequest, time_range: TimeRange) -> HttpResponse:
    query = MapQuery.from_request(request)
    windows = latest_windows()
    page, page_query = map_page(request, query, windows)
    nodes = list(page.object_list)
    summaries = node_summaries(nodes, windows)
    rows = []
    for node in nodes:
        summary = summaries.get((node.cluster_id, node.name), {})
        rows.append(
            {
                "node": node,
                "allocated": summary.get("allocated"),
                "utilization_pct": None
                if summary.get("utilization") is None
                else summary["utilization"] * 100,
                "no_data": summary.get("no_data"),
            }
        )
    context = {
        "nav": "map",
        "page_title": "Fleet map",
        "query": query,
        "page_obj": page,
        "page_query": page_query,
        "rows": rows,
        "flavors": node_choices("flavor"),
        "pools": node_choices("node_pool"),
        "teams": team_choices(allowed_team_ids(request)),
        "window_end": max(windows.values()) if windows else None,
        "map_chart_url": chart_url("fleet:chart-map", request),
        "gpu_url_template": reverse("fleet:gpu", args=[0]),
        "per_page": MAP_NODES_PER_PAGE,
        "time_range": time_range,
    }
    return render(request, "fleet/map.html", context)
