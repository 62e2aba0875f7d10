"""Fleet pages: overview, fleet map, node, GPU, busy-but-not-working.

Plain functions (STYLE rule 15): ``@dashboard_page`` for login, method, time range and the
freshness banner; the queries live in ``dashboard.fleet_charts`` next to the JSON views
that share them; each page renders its frame and numbers, and its figures load from
``fleet:chart-*`` URLs.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from core import plotting
from core.ranges import TimeRange
from dashboard import fleet_charts as charts
from dashboard.decorators import dashboard_page
from fleet.models import Gpu, Node
from quotas.access import visible_team_ids


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}"


def _gpus(value: float) -> str:
    return f"{value:,.1f}".removesuffix(".0")


def _chart_url(name: str, request: HttpRequest, *args: Any, drop: tuple[str, ...] = ()) -> str:
    params = request.GET.copy()
    for key in drop:
        params.pop(key, None)
    query = params.urlencode()
    url = reverse(name, args=args)
    return f"{url}?{query}" if query else url


def _card(
    label: str, value: str, *, unit: str = "", note: str = "", tone: str = "", testid: str = ""
) -> dict[str, str]:
    return {
        "label": label,
        "value": value,
        "unit": unit,
        "note": note,
        "tone": tone,
        "testid": testid,
    }


@dashboard_page
def overview(request: HttpRequest) -> HttpResponse:
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    windows = charts.latest_windows()
    now = charts.fleet_now(windows)
    teams = charts.team_figures(time_range, request.user)
    flavors = charts.flavor_figures(time_range)
    utilization = now.utilization
    cards = [
        _card(
            "Capacity",
            _gpus(now.capacity),
            unit="GPUs",
            note="physical GPUs, MIG by slices",
            tone="neutral",
            testid="capacity",
        ),
        _card(
            "Allocated",
            _gpus(now.allocated),
            unit="GPUs",
            note=f"{_pct(now.allocation_rate)} % of capacity",
            testid="allocated",
        ),
        _card(
            "Real utilization",
            _pct(utilization),
            unit="%" if utilization is not None else "",
            note=(
                f"SM_ACTIVE-weighted over {_gpus(now.telemetry)} allocated GPUs with telemetry"
                + (f"; {_gpus(now.fallback)} from GR_ENGINE_ACTIVE" if now.fallback else "")
            ),
            tone="good" if utilization is not None and utilization >= 0.5 else "warn",
            testid="utilization",
        ),
        _card(
            "Idle but allocated",
            _gpus(now.idle),
            unit="GPUs",
            note=f"SM_ACTIVE below {settings.GPULEDGER_IDLE_THRESHOLD * 100:g} %",
            tone="bad" if now.idle else "good",
            testid="idle",
        ),
        _card(
            "No telemetry",
            _gpus(now.no_telemetry),
            unit="GPUs",
            note=f"{_gpus(now.no_telemetry_allocated)} allocated · "
            f"{_gpus(now.no_telemetry_free)} free; never counted as idle",
            tone="warn" if now.no_telemetry_allocated else "neutral",
            testid="no-telemetry",
        ),
        _card(
            "Pending demand",
            _gpus(now.pending_gpus),
            unit="GPUs",
            note=f"{now.pending_workloads} pending workloads",
            tone="neutral",
            testid="pending",
        ),
    ]
    context = {
        "nav": "overview",
        "page_title": "Fleet overview",
        "now": now,
        "cards": cards,
        "has_data": bool(windows or teams or flavors),
        "teams": teams,
        "flavors": flavors,
        "capacity_chart_url": _chart_url("fleet:chart-capacity", request),
        "team_idle_chart_url": _chart_url("fleet:chart-team-idle", request),
        "team_active_chart_url": _chart_url("fleet:chart-team-active", request),
        "idle_threshold_pct": settings.GPULEDGER_IDLE_THRESHOLD * 100,
    }
    return render(request, "fleet/overview.html", context)


def _distinct(field_name: str) -> list[str]:
    values: QuerySet = (
        Node.objects.present()
        .exclude(**{field_name: ""})
        .values_list(field_name, flat=True)
        .distinct()
        .order_by(field_name)
    )
    return list(values)


@dashboard_page
def fleet_map(request: HttpRequest) -> HttpResponse:
    query = charts.MapQuery.from_request(request)
    windows = charts.latest_windows()
    page = charts.map_page(query, windows)
    nodes = list(page.object_list)
    summaries = charts.node_summaries(nodes, windows)
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
    params = request.GET.copy()
    params.pop("page", None)
    context = {
        "nav": "map",
        "page_title": "Fleet map",
        "query": query,
        "page_obj": page,
        "page_query": params.urlencode(),
        "rows": rows,
        "flavors": _distinct("flavor"),
        "pools": _distinct("node_pool"),
        "teams": charts.team_choices(),
        "window_end": max(windows.values()) if windows else None,
        "map_chart_url": _chart_url("fleet:chart-map", request),
        "gpu_url_template": reverse("fleet:gpu", args=[0]),
        "per_page": charts.MAP_NODES_PER_PAGE,
    }
    return render(request, "fleet/map.html", context)


def _gpu_rows(gpus: list[Gpu], user: Any) -> list[dict[str, Any]]:
    """Each GPU's reading and holders in its cluster's newest window (one query)."""
    windows = charts.latest_windows()
    allowed = visible_team_ids(user)
    readings: dict[int, dict[str, Any]] = {}
    holders: dict[int, list[dict[str, Any]]] = {}
    usage = (
        charts.latest_usage(windows)
        .filter(gpu_id__in=[gpu.pk for gpu in gpus])
        .values(*charts.HOLDER_FIELDS, "fb_used_mib")
    )
    for row in usage:
        readings[row["gpu_id"]] = row
        if not row["allocated"]:
            continue
        holder = charts.holder_from_row(row, allowed)
        holders.setdefault(row["gpu_id"], []).append(
            {
                "holder": holder,
                "shared": row["shared"],
                "workload_url": charts.quota_url("quotas:workload-detail", row["workload_id"])
                if holder.visible
                else None,
                "team_url": charts.quota_url("quotas:team-detail", row["team__name"])
                if holder.visible
                else None,
            }
        )
    rows = []
    for gpu in gpus:
        reading = readings.get(gpu.pk, {})
        activity = reading.get("activity")
        fb_used = reading.get("fb_used_mib")
        rows.append(
            {
                "gpu": gpu,
                "label": charts.gpu_label(gpu),
                "activity_pct": None if activity is None else activity * 100,
                "gpu_util": reading.get("gpu_util"),
                "fb_used_gib": None if fb_used is None else fb_used / 1024,
                "holders": holders.get(gpu.pk, []),
            }
        )
    return rows


@dashboard_page
def node_detail(request: HttpRequest, pk: int) -> HttpResponse:
    node = get_object_or_404(Node.objects.select_related("cluster"), pk=pk)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    gpus = list(Gpu.objects.physical().filter(node=node).order_by("index", "gi_id"))
    gpu_rows = _gpu_rows(gpus, request.user)
    gpu_by_id = {gpu.pk: gpu for gpu in gpus}
    history = charts.holders_over_range(list(gpu_by_id), time_range, request.user)
    for entry in history:
        entry["gpu"] = gpu_by_id.get(entry["gpu_id"])
    allocated = sum(1 for row in gpu_rows if row["holders"])
    with_data = [row for row in gpu_rows if row["activity_pct"] is not None]
    cards = [
        _card(
            "GPUs",
            _gpus(sum(gpu.fraction for gpu in gpus)),
            unit="GPUs",
            note=f"{len(gpus)} devices · {node.gpu_product or 'unknown model'}",
            tone="neutral",
        ),
        _card("Held now", str(allocated), unit=f"of {len(gpus)}", testid="node-held"),
        _card(
            "Mean SM_ACTIVE now",
            _pct(sum(r["activity_pct"] for r in with_data) / len(with_data) / 100)
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
        "gpu_rows": gpu_rows,
        "history": history,
        "history_limit": charts.HOLDERS_LIMIT,
        "retention_days": settings.GPULEDGER_USAGE_RETENTION_DAYS,
        "live": bool(node.cluster.prometheus_url),
        "activity_chart_url": _chart_url("fleet:chart-node", request, node.pk),
    }
    return render(request, "fleet/node.html", context)


@dashboard_page
def gpu_detail(request: HttpRequest, pk: int) -> HttpResponse:
    gpu = get_object_or_404(Gpu.objects.select_related("cluster", "node"), pk=pk)
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    row = _gpu_rows([gpu], request.user)[0]
    history = charts.holders_over_range([gpu.pk], time_range, request.user)
    context = {
        "nav": "map",
        "page_title": f"{gpu.host} · {charts.gpu_label(gpu)}",
        "gpu": gpu,
        "row": row,
        "history": history,
        "history_limit": charts.HOLDERS_LIMIT,
        "retention_days": settings.GPULEDGER_USAGE_RETENTION_DAYS,
        "live": bool(gpu.cluster.prometheus_url),
        "activity_chart_url": _chart_url("fleet:chart-gpu-activity", request, gpu.pk),
        "memory_chart_url": _chart_url("fleet:chart-gpu-memory", request, gpu.pk),
    }
    return render(request, "fleet/gpu.html", context)


@dashboard_page
def busy(request: HttpRequest) -> HttpResponse:
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    util_min, sm_max = charts.busy_thresholds()
    windows = charts.latest_windows()
    gpus_now, busy_now = charts.busy_gpus_now(windows, request.user)
    teams = charts.busy_by_team(time_range)
    workloads, hidden = charts.busy_by_workload(time_range, request.user)
    hours = charts.fleet_hours(time_range)
    busy_hours = sum(row["busy"] or 0.0 for row in hours.values())
    allocated_hours = sum(row["allocated"] or 0.0 for row in hours.values())
    share = plotting.ratio(busy_hours, allocated_hours)
    cards = [
        _card(
            "Busy but not working now",
            _gpus(busy_now),
            unit="GPUs",
            note="allocated GPUs in the newest window",
            tone="bad" if busy_now else "good",
            testid="busy-now",
        ),
        _card(
            "In this range",
            f"{busy_hours:,.1f}",
            unit="GPU-hours",
            note="complete hours, from hourly rollups",
            tone="warn",
            testid="busy-hours",
        ),
        _card(
            "Share of allocated",
            _pct(share),
            unit="%" if share is not None else "",
            note=f"of {allocated_hours:,.1f} allocated GPU-hours",
            tone="neutral",
            testid="busy-share",
        ),
    ]
    context = {
        "nav": "busy",
        "page_title": "Busy but not working",
        "cards": cards,
        "util_min": util_min,
        "sm_max_pct": sm_max * 100,
        "gpus_now": gpus_now,
        "gpus_limit": charts.BUSY_GPUS_LIMIT,
        "teams": teams,
        "workloads": workloads,
        "workloads_limit": charts.BUSY_WORKLOADS_LIMIT,
        "hidden_busy": hidden,
        "has_data": bool(windows or hours),
        "teams_chart_url": _chart_url("fleet:chart-busy-teams", request),
        "time_chart_url": _chart_url("fleet:chart-busy-time", request),
    }
    return render(request, "fleet/busy.html", context)
