"""The capacity planner's figure: the three lower bounds against the replicas chosen."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from core import plotting
from dashboard.access import allowed_team_ids
from dashboard.decorators import BadParameter, chart_view
from dashboard.queries.planner import planner_form


@chart_view(uses_range=False)
def planner_chart(request: HttpRequest) -> dict[str, Any]:
    form = planner_form(request.GET, allowed_team_ids(request))
    plan = form.plan
    if plan is None:
        name, reasons = next(iter(form.errors.items()))
        raise BadParameter(f"{name}: {' '.join(reasons)}")
    names = ["By throughput", "By concurrency", "By KV cache", "Planned"]
    values = [
        plan.replicas_by_throughput,
        plan.replicas_by_concurrency,
        plan.replicas_by_kv_cache,
        plan.replicas,
    ]
    bounds = plotting.bar("Replicas", names, values, unit="replicas")
    bounds["marker"] = {
        "color": [plotting.COLORS["allocated"]] * 3 + [plotting.COLORS["active"]],
    }
    bounds["text"] = [f"{value:,.2f}" for value in values[:3]] + [f"{plan.replicas:,}"]
    bounds["textposition"] = "outside"
    bounds["cliponaxis"] = False
    return plotting.figure(
        [bounds],
        plotting.layout(
            "Replicas by each bound, and planned",
            x_title="",
            y_title="Replicas",
            showlegend=False,
            hovermode="closest",
        ),
    )
