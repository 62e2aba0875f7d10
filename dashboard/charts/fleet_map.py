"""The fleet map's heatmap as a JSON view (the figure itself: ``dashboard.fleet_map``)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import reverse

from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.decorators import chart_view
from dashboard.fleet_map import (
    MapQuery,
    map_figure,
    map_page,
    mean_activity,
    page_states,
    states_by_node,
)
from dashboard.queries.now import latest_windows


@chart_view
def map_chart(request: HttpRequest, time_range: TimeRange) -> dict[str, Any]:
    query = MapQuery.from_request(request)
    windows = latest_windows()
    page, _ = map_page(request, query, windows)
    nodes = list(page.object_list)
    states = page_states(nodes, windows, allowed_team_ids(request))
    cells = states_by_node(states)
    means = mean_activity(list(states), time_range) if query.value == "mean" else None
    gpu_url = reverse("dashboard:gpu", args=[0])
    return map_figure(nodes, cells, query, gpu_url, means)
