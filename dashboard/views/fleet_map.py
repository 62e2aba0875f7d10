"""The fleet map page: GPU nodes, filtered and grouped, with a heatmap and their figures now."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.defaultfilters import floatformat
from django.urls import reverse

from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.decorators import dashboard_page
from dashboard.fleet_map import (
    MAP_NODES_PER_PAGE,
    MapQuery,
    NodeCapacity,
    map_page,
    node_capacities,
    node_choices,
    node_summaries,
    page_states,
    team_choices,
)
from dashboard.frame import chart_url
from dashboard.queries.gpu_states import NodeStory
from dashboard.queries.now import latest_windows
from dashboard.templatetags.formatting import gpus as fmt_gpus
from fleet.models import Node


@dashboard_page
def fleet_map(request: HttpRequest, time_range: TimeRange) -> HttpResponse:
    query = MapQuery.from_request(request)
    windows = latest_windows()
    page, page_query = map_page(request, query, windows)
    nodes = list(page.object_list)
    states = page_states(nodes, windows, allowed_team_ids(request), holders=False)
    summaries = node_summaries(nodes, states)
    capacities = node_capacities(nodes, states)
    rows = []
    for node in nodes:
        story = summaries[node.pk]
        utilization = story.utilization
        row = {
            "node": node,
            "story": story,
            "allocated": story.held if windows else None,
            "utilization_pct": None if utilization is None else utilization * 100,
            "no_data": story.no_telemetry,
        }
        rows.append({**row, "cells": _cells(node, row, story, capacities[node.pk])})
    flavors, pools = node_choices()
    context = {
        "nav": "map",
        "page_title": "Fleet map",
        "query": query,
        "page_obj": page,
        "page_query": page_query,
        "rows": rows,
        "flavors": flavors,
        "pools": pools,
        "teams": team_choices(allowed_team_ids(request)),
        "window_end": max(windows.values()) if windows else None,
        "map_chart_url": chart_url("dashboard:chart-map", request),
        "gpu_url_template": reverse("dashboard:gpu", args=[0]),
        "per_page": MAP_NODES_PER_PAGE,
        "time_range": time_range,
    }
    return render(request, "dashboard/fleet_map.html", context)


def _cells(
    node: Node, row: dict[str, Any], story: NodeStory, capacity: NodeCapacity
) -> dict[str, str]:
    """A node table row's texts, formatted here once (as the template's filters would): 100
    rows of template lookups and filters cost more than the rest of the page."""
    return {
        "gpus": fmt_gpus(capacity.gpus),
        "devices": f"{capacity.devices} devices",
        "url": reverse("dashboard:node", args=[node.pk]),
        "cluster": str(node.cluster),
        "held": "" if row["allocated"] is None else floatformat(row["allocated"], "-1"),
        "held_no_telemetry": floatformat(story.held_no_telemetry, "-1")
        if story.held_no_telemetry
        else "",
        "idle": floatformat(story.idle, "-1") if story.idle else "",
        "utilization": ""
        if row["utilization_pct"] is None
        else floatformat(row["utilization_pct"], 1),
        "no_data": floatformat(row["no_data"], "-1") if row["no_data"] else "",
    }
