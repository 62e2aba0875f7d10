"""Serving pages (README "Serving: deployments"): every inference deployment the user may see
over the range, and one deployment's replicas, GPUs, throughput, cost per million output tokens,
saturation and knee, with its four charts and a link to plan capacity from it."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from core.ranges import TimeRange
from dashboard.access import allowed_team_ids, get_serving_workload_for_user
from dashboard.decorators import choice_param, dashboard_page, int_param
from dashboard.frame import PAGE_SIZE, range_query, stat, utilization_tone
from dashboard.queries import serving as queries
from dashboard.templatetags.formatting import figure, percent
from serving.deployments import Deployment
from serving.knee import OUTPUT_TOKENS
from serving.models import ServingWorkload

NO_TELEMETRY = "no serving telemetry"


def knee_unit(deployment: Deployment) -> str:
    """The knee's unit as the page writes it."""
    if deployment.knee is None:
        return ""
    return "tokens/s" if deployment.knee.unit == OUTPUT_TOKENS else "req/s"


def money(value: Any, digits: int = 2) -> str:
    return "—" if value is None else f"{float(value):,.{digits}f}"


def row(deployment: Deployment) -> dict[str, Any]:
    """A deployment as a row of the list or the team page's section."""
    return {
        "deployment": deployment,
        "workload": deployment.workload,
        "team": deployment.team,
        "replicas": figure(deployment.mean_replicas),
        "gpus": figure(deployment.mean_gpus),
        "per_replica": figure(deployment.tokens_per_second_per_replica),
        "per_gpu_hour": figure(deployment.tokens_per_gpu_hour, 0),
        "cost_per_million": money(deployment.cost_per_million_tokens),
        "sm_active": percent(deployment.sm_active),
        "knee": figure(deployment.knee.per_replica) if deployment.knee else "—",
        "knee_unit": knee_unit(deployment),
        "below_knee": percent(deployment.below_knee_share),
        "overprovisioned": deployment.overprovisioned,
    }


@dashboard_page
def serving_list(request: HttpRequest, time_range: TimeRange) -> HttpResponse:
    sort = choice_param(request, "sort", tuple(queries.SORTS), queries.DEFAULT_SORT)
    found = queries.visible_deployments(time_range, allowed_team_ids(request), sort)
    page = Paginator(found, PAGE_SIZE).get_page(int_param(request, "page", 1))
    query = request.GET.copy()
    query.pop("page", None)
    sort_query = query.copy()
    sort_query.pop("sort", None)
    over = sum(1 for d in found if d.overprovisioned)
    context = {
        "nav": "serving",
        "page_title": "Serving",
        "rows": [row(d) for d in page.object_list],
        "page_obj": page,
        "page_query": query.urlencode(),
        "sort": sort,
        "sorts": [(key, label) for key, (label, _value, _desc) in queries.SORTS.items()],
        "sort_query": sort_query.urlencode(),
        "stats": [
            stat("Deployments", f"{len(found):,}", note="with serving telemetry in the range"),
            stat(
                "Over-provisioned",
                f"{over:,}",
                note="below half their knee in most judged hours",
                tone="warn" if over else "good",
                testid="stat-overprovisioned",
            ),
        ],
        "time_range": time_range,
        "range_query": range_query(request, time_range),
        "currency": found[0].currency if found else "",
        "planner_url": reverse("dashboard:planner"),
    }
    return render(request, "dashboard/serving_list.html", context)


def _stats(d: Deployment) -> list[dict[str, Any]]:
    """The detail page's cards; a figure no hour has says "no serving telemetry"."""

    def card(label: str, value: str, unit: str, note: str, testid: str) -> dict[str, Any]:
        if value == "—":
            return stat(label, "—", "", NO_TELEMETRY, tone="neutral", testid=testid)
        return stat(label, value, unit, note, testid=testid)

    share = d.below_knee_share
    if d.cost_per_million_tokens is not None:
        card_name = d.flavor or d.gpu_model or "default card"
        cost = stat(
            "Cost per million output tokens",
            money(d.cost_per_million_tokens),
            d.currency,
            f"GPU-hours priced by the rate cards ({card_name}) ÷ output tokens",
            testid="stat-cost",
        )
    else:
        why = NO_TELEMETRY if d.tokens_per_second_per_gpu is None else "no rate card prices it"
        cost = stat(
            "Cost per million output tokens", "—", "", why, tone="neutral", testid="stat-cost"
        )
    return [
        card(
            "Mean replicas",
            figure(d.mean_replicas),
            "",
            f"on {figure(d.mean_gpus)} GPU{'' if d.mean_gpus == 1 else 's'} "
            "(replica- and GPU-hours ÷ hours)"
            if d.mean_gpus is not None
            else "replica-hours ÷ hours; no GPU requests seen",
            "stat-replicas",
        ),
        card(
            "Per replica",
            figure(d.tokens_per_second_per_replica),
            "tokens/s",
            "output tokens ÷ replica-time",
            "stat-per-replica",
        ),
        card(
            "Per GPU",
            figure(d.tokens_per_second_per_gpu),
            "tokens/s",
            f"{figure(d.tokens_per_gpu_hour, 0)} tokens per GPU-hour",
            "stat-per-gpu",
        ),
        cost,
        stat(
            "SM_ACTIVE",
            percent(d.sm_active),
            "%" if d.sm_active is not None else "",
            f"over {d.sm_active_hours} hour{'' if d.sm_active_hours == 1 else 's'} with DCGM "
            "telemetry of its GPUs"
            if d.sm_active is not None
            else "no hour has DCGM telemetry of its GPUs",
            tone=utilization_tone(d.sm_active),
            testid="stat-sm-active",
        ),
        stat(
            "Below half the knee",
            percent(share),
            "%" if share is not None else "",
            f"of {d.judged_hours} judged hour{'' if d.judged_hours == 1 else 's'}"
            if share is not None
            else "no knee: no hour within its targets",
            tone=("warn" if d.overprovisioned else "good") if share is not None else "neutral",
            testid="stat-below-knee",
        ),
    ]


def _knee_text(d: Deployment) -> dict[str, Any] | None:
    """The knee in words, with the hour it was reached at."""
    if d.knee is None:
        return None
    hour = next(h for h in d.hours if h.hour == d.knee.hour)
    return {
        "per_replica": figure(d.knee.per_replica),
        "half": figure(d.knee.per_replica / 2),
        "unit": knee_unit(d),
        "hour": d.knee.hour,
        "replicas": figure(d.knee.replicas),
        "ttft": hour.ttft_p95_seconds,
        "itl": hour.itl_p95_seconds,
        "waiting": hour.per_replica(hour.mean_waiting),
        "running": d.knee_running_per_replica,
    }


@dashboard_page
def serving_detail(request: HttpRequest, time_range: TimeRange, pk: int) -> HttpResponse:
    workload = get_serving_workload_for_user(request, pk)
    d = queries.one_deployment(workload, time_range)
    targets = workload.targets()
    plan_query = urlencode({"workload": d.full_path})
    chart_query = range_query(request, time_range)
    context = {
        "nav": "serving",
        "page_title": f"{workload.namespace}/{workload.name}",
        "workload": workload,
        "d": d,
        "stats": _stats(d),
        "knee": _knee_text(d),
        "targets": targets,
        "saturation": {
            "kv_mean": percent(d.kv_cache_mean),
            "kv_max": percent(d.kv_cache_max),
            "waiting": figure(d.mean_waiting, 2),
            "running": figure(d.running_per_replica, 2),
        },
        "charts": _charts(workload, chart_query),
        "plan_url": reverse("dashboard:planner") + "?" + plan_query,
        "range_query": chart_query,
        "time_range": time_range,
    }
    return render(request, "dashboard/serving_detail.html", context)


def _charts(workload: ServingWorkload, query: str) -> list[dict[str, str]]:
    charts = [
        (
            "throughput",
            "Throughput per replica each hour (output tokens/s; requests/s for servers without "
            "token counts), with the knee and half of it.",
        ),
        (
            "activity",
            "SM_ACTIVE of its own pods' GPUs against output tokens/s per GPU, one point per hour "
            "with their DCGM telemetry (older hours: its namespace's, when the namespace held its "
            "GPUs and no others).",
        ),
        ("latency", "p95 time to first token and inter-token latency against the targets."),
        ("saturation", "KV-cache use (mean, max), and requests waiting and running per replica."),
    ]
    return [
        {
            "id": f"serving-{name}-chart",
            "testid": f"chart-{name}",
            "url": reverse(f"dashboard:serving-chart-{name}", args=[workload.pk]) + "?" + query,
            "caption": caption,
        }
        for name, caption in charts
    ]
