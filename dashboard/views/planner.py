"""The capacity planner page (README "Serving: capacity planner"): a form read from the query
string, so every plan is a link; the three bounds, the replicas and GPUs, the monthly cost and
the method step by step. Bad input is shown at its field (the page still answers 200)."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from dashboard.access import allowed_team_ids
from dashboard.decorators import dashboard_page
from dashboard.frame import stat
from dashboard.queries.planner import FIELDS, PlannerForm, planner_form
from serving.planner import HOURS_PER_MONTH, Plan
from serving.pricing import flavor_names


def _stats(plan: Plan, form: PlannerForm) -> list[dict[str, object]]:
    spares = plan.replicas - plan.replicas_before_spares
    tensor_parallel = (
        f"{plan.gpus // plan.replicas:,}"
        if plan.replicas
        else form.values["tensor_parallel"].strip() or "—"
    )
    if plan.cost_per_month is None:
        cost = stat(
            "Cost per month",
            "—",
            note="No rate card prices it: pick a flavor or GPU model with one.",
            tone="neutral",
            testid="plan-cost",
        )
    else:
        cost = stat(
            "Cost per month",
            f"{plan.cost_per_month:,.2f}",
            plan.currency or "",
            note=f"{HOURS_PER_MONTH} h × {plan.price_per_gpu_hour:,.2f} per GPU-hour",
            testid="plan-cost",
        )
    utilization = plan.slot_utilization
    return [
        stat(
            "Replicas",
            f"{plan.replicas:,}",
            note=f"{plan.replicas_before_spares:,} + {spares:,} spare{'' if spares == 1 else 's'}",
            testid="plan-replicas",
        ),
        stat(
            "GPUs", f"{plan.gpus:,}", note=f"tensor-parallel {tensor_parallel}", testid="plan-gpus"
        ),
        cost,
        stat(
            "Slot utilization",
            "—" if utilization is None else f"{utilization * 100:.0f}",
            "" if utilization is None else "%",
            note="in-flight requests ÷ slots",
            tone="neutral" if utilization is None else "",
            testid="plan-slots",
        ),
    ]


def _bounds(plan: Plan) -> list[dict[str, object]]:
    deciding = set(plan.deciding_bounds)
    kv_note = (
        f"⌈C⌉ × (input + output) = {plan.kv_tokens_needed:,} tokens; the busiest replica needs "
        f"{plan.kv_tokens_busiest_replica:,} of its {plan.kv_cache_tokens:,}: "
        + ("fits" if plan.kv_fits else "does not fit")
    )
    return [
        {
            "key": "throughput",
            "label": "By throughput",
            "value": plan.replicas_by_throughput,
            "note": "λ × output tokens ÷ replica tokens/s",
            "decides": "throughput" in deciding,
        },
        {
            "key": "concurrency",
            "label": "By concurrency",
            "value": plan.replicas_by_concurrency,
            "note": f"{plan.concurrent_requests:,.1f} in flight, {plan.response_seconds:,.1f} s a"
            " response (Little's law)",
            "decides": "concurrency" in deciding,
        },
        {
            "key": "kv",
            "label": "By KV cache",
            "value": plan.replicas_by_kv_cache,
            "note": kv_note,
            "decides": "KV cache" in deciding,
            "warn": not plan.kv_fits,
        },
    ]


MEASURED_LABELS = {
    "request_rate": "λ {:,.2f} req/s (its busiest hour)",
    "input_tokens": "{:,.0f} input tokens",
    "output_tokens": "{:,.0f} output tokens",
    "replica_throughput_tokens_per_second": "replica throughput {:,.1f} tokens/s",
    "replica_max_concurrency": "max concurrency {:,}",
    "tensor_parallel": "tensor parallel {:,}",
    "flavor": "priced as {}",
}


def _measured(form: PlannerForm) -> dict[str, object] | None:
    """What the plan took from the deployment, as the page lists it."""
    measured = form.measured
    if measured is None:
        return None
    values = measured["values"]
    listed = [MEASURED_LABELS[name].format(values[name]) for name in measured["inputs"]]
    knee_hour = measured["knee_hour"]
    knee_at = None if knee_hour is None else datetime.fromisoformat(knee_hour)
    return {**measured, "listed": listed, "knee_at": knee_at}


@dashboard_page(uses_range=False)
def capacity_planner(request: HttpRequest) -> HttpResponse:
    form = planner_form(request.GET, allowed_team_ids(request))
    plan = form.plan
    query = urlencode({name: value for name, value in form.values.items() if value})
    context = {
        "nav": "planner",
        "page_title": "Capacity planner",
        "form": form,
        "fields": [
            {
                "name": name,
                "label": label,
                "unit": unit,
                "hint": hint,
                "value": form.values[name],
                "errors": form.errors.get(name, []),
                "measurable": name in MEASURED_LABELS,
            }
            for name, label, unit, hint in FIELDS
        ],
        "flavors": flavor_names(),
        "measured": _measured(form),
        "comparison": form.comparison,
        "plan": plan,
        "stats": [] if plan is None else _stats(plan, form),
        "bounds": [] if plan is None else _bounds(plan),
        "chart_url": reverse("dashboard:planner-chart") + "?" + query,
        "api_url": request.build_absolute_uri(reverse("api-capacity-plan")),
    }
    return render(request, "dashboard/planner.html", context, status=200)
