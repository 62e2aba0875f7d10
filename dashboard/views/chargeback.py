"""The chargeback page: the chargeback API's report over the picked range, as a table.

The same ``ledger.chargeback.build_report`` as ``/api/v1/chargeback/``, over the whole UTC hours
the picked range counts; the page links the equivalent API URL (JSON and CSV). Visibility is the
API's: staff and finance see every team, a team lead their teams (and fleet-level groupings).
Both read it through ``ledger.chargeback.cache``: a report built once is paged from the cache
(only the page's rows are read) until its rollups, rate cards or groups change.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from core.ranges import TimeRange, form_hidden
from dashboard.access import allowed_team_ids
from dashboard.decorators import BadParameter, choice_param, dashboard_page, int_param
from dashboard.frame import PAGE_SIZE
from dashboard.templatetags.formatting import figure, percent
from ledger import chargeback

GROUPS = (
    ("team", "Team"),
    ("cluster_queue", "ClusterQueue"),
    ("local_queue", "LocalQueue"),
    ("namespace", "Namespace"),
    ("workload", "Workload"),
    ("cohort", "Cohort"),
    ("flavor", "Flavor"),
    ("node", "Node"),
    ("cluster", "Cluster"),
)


def _cells(report: chargeback.Report, figures: chargeback.Charge) -> dict[str, Any]:
    money = figures.money()
    return {
        "allocated": figure(figures.allocated_gpu_hours),
        "active": figure(figures.active_gpu_hours),
        "idle": figure(figures.idle_gpu_hours),
        "utilization": percent(figures.utilization),
        "nominal": figure(figures.nominal_gpu_hours),
        "borrowed": figure(figures.borrowed_gpu_hours),
        "lent": figure(figures.lent_gpu_hours),
        "cost_allocated": f"{money['allocated']:,.2f}",
        "cost_borrowing": f"{money['borrowing']:,.2f}",
        "cost_lending": f"{money['lending_credit']:,.2f}",
        "cost_total": f"{money['total']:,.2f}",
        "priced": report.priced(figures),
    }


@dashboard_page
def chargeback_page(request: HttpRequest, time_range: TimeRange) -> HttpResponse:
    group_by = choice_param(request, "group_by", tuple(key for key, _ in GROUPS), "team")
    step = choice_param(request, "step", chargeback.STEPS, "none")
    span = time_range.covered_hours()
    if span.count <= 0:
        raise BadParameter("the range covers no whole hour yet: pick a longer one")
    try:
        report, page = chargeback.cached_report_page(
            int_param(request, "page", 1),
            PAGE_SIZE,
            start=span.first,
            end=span.stop,
            group_by=group_by,
            step=step,
            team_ids=allowed_team_ids(request),
        )
    except chargeback.ChargebackError as exc:
        raise BadParameter(f"{exc.parameter}: {exc.reason}") from None
    rows = [
        {
            "group": row.group,
            "cluster": row.cluster,
            "period": row.period_start,
            **_cells(report, row.figures),
        }
        for row in page.object_list
    ]
    totals = report.totals
    total_money = chargeback.totals_dict(report)["cost"]
    api_params = {
        "start": chargeback.utc_text(report.start),
        "end": chargeback.utc_text(report.end),
        "group_by": group_by,
    }
    if step != "none":
        api_params["step"] = step
    api_path = reverse("api-chargeback") + "?" + urlencode(api_params, safe=":")
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "nav": "chargeback",
        "page_title": "Chargeback",
        "report": report,
        "rows": rows,
        "page_obj": page,
        "page_query": query.urlencode(),
        "totals": {
            "allocated": figure(totals.allocated_gpu_hours),
            "active": figure(totals.active_gpu_hours),
            "idle": figure(totals.idle_gpu_hours),
            "utilization": percent(totals.utilization),
            "nominal": figure(totals.nominal_gpu_hours),
            "borrowed": figure(totals.borrowed_gpu_hours),
            "lent": figure(totals.lent_gpu_hours),
            "cost_allocated": f"{total_money['allocated']:,.2f}",
            "cost_borrowing": f"{total_money['borrowing']:,.2f}",
            "cost_lending": f"{total_money['lending_credit']:,.2f}",
            "cost_total": f"{total_money['total']:,.2f}",
        },
        "pricing": report.pricing(),
        "group_by": group_by,
        "groups": GROUPS,
        "step": step,
        "steps": chargeback.STEPS,
        "api_url": request.build_absolute_uri(api_path),
        "csv_url": api_path + "&format=csv",
        "time_range": time_range,
        "form_hidden": form_hidden(request.GET, time_range, ("group_by", "step")),
        "quota_model": report.model == "quota",
        "user_sees_all": allowed_team_ids(request) is None,
    }
    return render(request, "dashboard/chargeback.html", context)
