"""Alert badges and short lists on the other pages (one tag each, so those templates change by
one line): ``{% open_alerts team=team %}``, ``{% workload_state_badge workload %}``."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse
from django.utils.http import urlencode

from alerts.choices import Rule
from dashboard.access import allowed_team_ids
from dashboard.queries import alerts as queries
from quotas.models import ClusterQueue, Cohort, Team, Workload

register = template.Library()


@register.inclusion_tag("dashboard/partials/open_alerts.html", takes_context=True)
def open_alerts(
    context: template.Context,
    team: Team | None = None,
    cluster_queue: ClusterQueue | None = None,
    cohort: Cohort | None = None,
    workload: Workload | None = None,
) -> dict[str, Any]:
    """The open hoarding alerts of a team, queue, cohort or workload (every one on the
    overview), costliest first, with a link to the Alerts page filtered the same way."""
    where: dict[str, object] = {}
    link: dict[str, str] = {"state": "open"}
    if team is not None:
        where["team_id"] = team.pk
        link["team"] = team.name
    if cluster_queue is not None:
        where["cluster_queue_id"] = cluster_queue.pk
        link["queue"] = cluster_queue.name
    if cohort is not None:
        where["cluster_queue__cohort_id"] = cohort.pk
    if workload is not None:
        where["workload_id"] = workload.pk
    episodes = queries.open_for(allowed_team_ids(context["request"]), **where)
    return {
        "episodes": episodes,
        "more_url": f"{reverse('dashboard:alert-list')}?{urlencode(link)}",
        "for_workload": workload is not None,
    }


@register.inclusion_tag("dashboard/partials/workload_state_badge.html", takes_context=True)
def workload_state_badge(context: template.Context, workload: Workload) -> dict[str, Any]:
    """The workload's state badge; while a ghost reservation is open it says so."""
    ghost = (
        queries.visible(allowed_team_ids(context["request"]))
        .filter(workload=workload, rule=Rule.GHOST_RESERVATION, resolved_at__isnull=True)
        .first()
    )
    return {"workload": workload, "ghost": ghost}
