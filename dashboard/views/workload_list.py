"""The workload list (search, filters, sorting by figures) and the navigation's search box."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from accounts.rbac import rbac_workloads
from core.ranges import TimeRange, form_hidden
from dashboard.access import allowed_team_ids
from dashboard.decorators import choice_param, dashboard_page, int_param
from dashboard.frame import PAGE_SIZE
from dashboard.queries import workload_list as queries
from dashboard.templatetags.formatting import duration, figure, percent
from fleet.models import Gpu, Node
from ledger.chargeback import Charge
from quotas.models import ClusterQueue, Team, Workload

# Results per kind in the navigation search.
SEARCH_LIMIT = 10
MAX_SEARCH = 200


def _text(request: HttpRequest, name: str) -> str:
    return request.GET.get(name, "").strip()[:MAX_SEARCH]


def _row(workload: Workload, charge: Charge | None, now: datetime) -> dict[str, Any]:
    money = charge.money()["total"] if charge is not None else Decimal(0)
    return {
        "workload": workload,
        "team": workload.cluster_queue.team if workload.cluster_queue else None,
        "gpus": figure(workload.admitted_gpus or workload.requested_gpus),
        "flavor": workload.gpu_flavor,
        "gpu_hours": figure(charge.allocated_gpu_hours) if charge else "0",
        "utilization": percent(charge.utilization) if charge else "—",
        "idle_share": percent(charge.idle_share) if charge else "—",
        "cost": f"{money:,.2f}",
        "age": duration((now - workload.observed_at).total_seconds())
        if workload.observed_at
        else "—",
    }


@dashboard_page
def workload_list(request: HttpRequest, time_range: TimeRange) -> HttpResponse:
    allowed = allowed_team_ids(request)
    rbac = None if allowed is None else rbac_workloads(request.user)
    now = timezone.now()
    search = _text(request, "q")
    state = choice_param(request, "state", queries.STATE_FILTERS, "all")
    sort = choice_param(request, "sort", queries.SORTS, "newest")
    queue = _text(request, "queue")
    owner_kind = _text(request, "owner_kind")
    team = _text(request, "team")
    matched = queries.matching_workloads(
        allowed,
        search=search,
        state=state,
        queue=queue,
        owner_kind=owner_kind,
        team=team,
        rbac=rbac,
    )
    span = time_range.covered_hours()
    matched = queries.in_range(matched, span, time_range.start)
    if sort in queries.FIGURE_SORTS:
        # Sorting by a figure ranks every match in the database (the read layer's ranking,
        # which returns ids only); the page's workloads then get their figures as below.
        ids: Any = queries.RankedWorkloads(matched, sort, span)
    else:
        # A page of ids first: sorting 50,000 narrow rows, not the joined wide ones.
        ordering = ("namespace", "name", "pk") if sort == "name" else ("-observed_at", "-pk")
        ids = matched.order_by(*ordering).values_list("pk", flat=True)
        if search:
            # A text search scans every workload: once for the ids (a short list) rather than
            # once for the count and again for the page.
            ids = list(ids)
    page: Page[int] = Paginator(ids, PAGE_SIZE).get_page(int_param(request, "page", 1))
    page_ids = list(page.object_list)
    query = request.GET.copy()
    query.pop("page", None)
    page_query = query.urlencode()
    by_id = (
        Workload.objects.select_related("cluster", "cluster_queue__team", "local_queue")
        .defer(*queries.UNLISTED_FIELDS)
        .in_bulk(page_ids)
    )
    workloads = [by_id[pk] for pk in page_ids if pk in by_id]
    charges = queries.workload_charges(
        span, Q(workload_id__in=[workload.pk for workload in workloads])
    )
    if sort in queries.FIGURE_SORTS:
        # The page in the exact order of the figures it shows (the ranking's cost is the same
        # priced sum, rounded to cents in SQL; a stable sort keeps its ties).
        workloads.sort(key=lambda w: queries.figure_sort_key(sort, charges.get(w.pk)), reverse=True)
    rows = [_row(workload, charges.get(workload.pk), now) for workload in workloads]
    sort_query = request.GET.copy()
    sort_query.pop("page", None)
    sort_query.pop("sort", None)
    context = {
        "nav": "workloads",
        "page_title": "Workloads",
        "rows": rows,
        "page_obj": page,
        "page_query": page_query,
        "search": search,
        "state": state,
        "state_choices": queries.STATE_FILTERS,
        "sort": sort,
        "sort_query": sort_query.urlencode(),
        "sorts": [
            ("newest", "Newest"),
            ("gpu_hours", "GPU-hours"),
            ("idle_share", "Idle share"),
            ("cost", "Cost"),
            ("name", "Name"),
        ],
        "queue": queue,
        "owner_kind": owner_kind,
        "owner_kinds": queries.owner_kinds(allowed, rbac),
        "team": team,
        "currency": settings.GPULEDGER_CURRENCY,
        "time_range": time_range,
        "form_hidden": form_hidden(
            request.GET, time_range, ("q", "state", "queue", "owner_kind", "team", "sort")
        ),
        "range_query": urlencode(time_range.query()),
        "user_sees_all": allowed is None,
        "filtered": bool(search or state != "all" or queue or owner_kind or team),
    }
    return render(request, "dashboard/workload_list.html", context)


@dashboard_page(uses_range=False)
def search(request: HttpRequest) -> HttpResponse:
    """Workloads, ClusterQueues, teams, nodes and GPUs (by UUID) whose name contains ``q``."""
    allowed = allowed_team_ids(request)
    term = _text(request, "q")
    groups: list[dict[str, Any]] = []
    if term:
        rbac = None if allowed is None else rbac_workloads(request.user)
        workloads = (
            queries.visible_workloads(allowed, rbac)
            .filter(Q(name__icontains=term) | Q(namespace__icontains=term))
            .select_related("cluster_queue__team")
            .order_by("-observed_at", "-pk")[:SEARCH_LIMIT]
        )
        # Queues and teams the user may see (quotas.access): no other team's names.
        queues = ClusterQueue.objects.present().filter(name__icontains=term)
        teams = Team.objects.filter(Q(name__icontains=term) | Q(display_name__icontains=term))
        if allowed is not None:
            queues = queues.filter(team_id__in=allowed)
            teams = teams.filter(pk__in=allowed)
        queues = queues.select_related("cluster", "team").order_by("name")[:SEARCH_LIMIT]
        teams = teams.order_by("name")[:SEARCH_LIMIT]
        nodes = (
            Node.objects.filter(name__icontains=term)
            .select_related("cluster")
            .order_by("name")[:SEARCH_LIMIT]
        )
        gpus = (
            Gpu.objects.filter(uuid__icontains=term)
            .select_related("node")
            .order_by("uuid", "gi_id")[:SEARCH_LIMIT]
        )
        groups = [
            {
                "kind": "Workloads",
                "more": reverse("dashboard:workload-list") + "?" + urlencode({"q": term}),
                "items": [
                    (
                        f"{w.namespace}/{w.name}",
                        reverse("dashboard:workload-detail", args=[w.pk]),
                        f"{w.get_state_display()}"
                        + (
                            f" · team {w.cluster_queue.team}"
                            if w.cluster_queue and w.cluster_queue.team
                            else ""
                        ),
                    )
                    for w in workloads
                ],
            },
            {
                "kind": "ClusterQueues",
                "more": reverse("dashboard:cluster-queue-list") + "?" + urlencode({"q": term}),
                "items": [
                    (
                        q.name,
                        reverse("dashboard:cluster-queue-detail", args=[q.cluster.name, q.name]),
                        f"{q.cluster}" + (f" · team {q.team}" if q.team else ""),
                    )
                    for q in queues
                ],
            },
            {
                "kind": "Teams",
                "more": "",
                "items": [
                    (str(t), reverse("dashboard:team-detail", args=[t.name]), t.name) for t in teams
                ],
            },
            {
                "kind": "Nodes",
                "more": "",
                "items": [
                    (n.name, reverse("dashboard:node", args=[n.pk]), str(n.cluster)) for n in nodes
                ],
            },
            {
                "kind": "GPUs",
                "more": "",
                "items": [
                    (
                        g.uuid + (f" GI {g.gi_id}" if g.gi_id else ""),
                        reverse("dashboard:gpu", args=[g.pk]),
                        g.host,
                    )
                    for g in gpus
                ],
            },
        ]
    found = sum(len(group["items"]) for group in groups)
    context = {
        "page_title": "Search",
        "search": term,
        "groups": [group for group in groups if group["items"]],
        "found": found,
        "limit": SEARCH_LIMIT,
    }
    return render(request, "dashboard/search.html", context)
