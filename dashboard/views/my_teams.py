"""A team lead's landing: each team they lead, its quota use per flavor, real use, idle
workloads and pending work; the fleet overview is one click away."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.views import LoginView
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render, resolve_url
from django.urls import reverse
from django.utils import timezone

from core.ranges import TimeRange
from dashboard.access import request_roles
from dashboard.decorators import dashboard_page
from dashboard.frame import utilization_tone
from dashboard.queries import my_teams as queries
from dashboard.queries.queue_levels import weekly_waits
from dashboard.queries.teams import figures_by_team, schedulers_by_team
from dashboard.templatetags.formatting import figure, percent
from ledger.range_figures import Figures
from quotas.models import Team
from quotas.now import latest_samples
from quotas.pending import free_in_quota, workload_reason
from quotas.words import list_words


def flavor_rows(uses: list[queries.FlavorUse]) -> list[dict[str, Any]]:
    """Cells of ``dashboard/partials/flavor_use.html``."""
    return [
        {
            "flavor": use.flavor,
            "nominal": figure(use.nominal),
            "admitted": figure(use.admitted),
            "borrowed": figure(use.borrowed),
            "share": percent(use.share),
            "bar": min(100.0, (use.share or 0.0) * 100),
            "over": (use.share or 0.0) > 1.0,
        }
        for use in uses
    ]


@dashboard_page
def my_teams(request: HttpRequest, time_range: TimeRange) -> HttpResponse:
    teams = list(Team.objects.filter(leads__pk=request.user.pk or 0).order_by("name"))
    if not teams and request_roles(request).finance:
        # Finance leads no team: its page is the chargeback, not an empty My teams.
        return redirect(f"{reverse('dashboard:chargeback')}?{urlencode(time_range.query())}")
    if not teams:
        return render(
            request,
            "dashboard/my_teams.html",
            {"nav": "my-teams", "page_title": "My teams", "cards": [], "time_range": time_range},
        )
    ids = [team.pk for team in teams]
    now = timezone.now()
    span = time_range.covered_hours()
    # The queues' newest samples serve both the flavor rows and the pending rows' short reasons.
    samples = latest_samples(
        Q(cluster_queue__team_id__in=ids, cluster_queue__deleted_at__isnull=True), now
    )
    flavors = queries.flavor_use_by_team(ids, now, samples=samples)
    admitted = queries.admitted_gpus_by_team(ids)
    held = queries.pod_gpus_by_team(ids)
    figures = figures_by_team(ids, span)
    quota_used = queries.quota_used_by_team(ids, span)
    waits = weekly_waits(teams, now)
    schedulers = schedulers_by_team(ids)
    cards = []
    for team in teams:
        found = figures.get(team.pk, Figures())
        pending = queries.pending_workloads(team)
        cards.append(
            {
                "team": team,
                "flavors": flavor_rows(flavors.get(team.pk, [])),
                "words": list_words(schedulers.get(team.pk, [])),
                "admitted": figure(admitted.get(team.pk, 0.0)),
                "held": figure(held.get(team.pk, 0.0)),
                "waits": waits.get(team.pk, []),
                "utilization": percent(found.utilization),
                "utilization_tone": utilization_tone(found.utilization),
                "allocated_hours": figure(found.allocated_gpu_hours),
                "idle_hours": figure(found.idle_gpu_hours),
                "quota_used": [
                    {
                        "flavor": row.flavor or "(no flavor)",
                        "allocated": figure(row.figures.allocated_gpu_hours),
                        "nominal": figure(row.figures.nominal_gpu_hours),
                        "used": percent(row.used),
                    }
                    for row in quota_used.get(team.pk, [])
                ],
                "idle": [
                    {
                        "workload": workload,
                        "idle_share": percent(workload_figures.idle_share),
                        "idle_hours": figure(workload_figures.idle_gpu_hours),
                    }
                    for workload, workload_figures in queries.idle_workloads(team, span)
                ],
                "pending": pending,
                "pending_rows": [
                    {
                        "workload": workload,
                        "short_reason": workload_reason(
                            workload, free_in_quota(samples.get(workload.cluster_queue_id or 0))
                        ),
                    }
                    for workload in pending["rows"]
                ],
            }
        )
    context = {
        "nav": "my-teams",
        "page_title": "My teams",
        "cards": cards,
        "time_range": time_range,
        "idle_threshold": percent(queries.idle_workload_share()),
    }
    return render(request, "dashboard/my_teams.html", context)


class LandingLoginView(LoginView):
    """Sign-in that lands a team lead on My teams, everyone else on ``LOGIN_REDIRECT_URL``
    (a ``next`` parameter still wins)."""

    def get_default_redirect_url(self) -> str:
        user = self.request.user
        if Team.objects.filter(leads__pk=user.pk or 0).exists():
            return reverse("dashboard:my-teams")
        return resolve_url(settings.LOGIN_REDIRECT_URL)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        # Which ways in the page offers (README "Sign-in"), and why a provider sign-in failed.
        context = super().get_context_data(**kwargs)
        outcome = self.request.GET.get("oidc", "")
        context.update(
            local_login=settings.GPULEDGER_LOCAL_LOGIN,
            oidc_enabled=bool(settings.GPULEDGER_OIDC_ISSUER),
            oidc_provider_name=settings.GPULEDGER_OIDC_PROVIDER_NAME,
            oidc_failed=outcome == "failed",
            oidc_unavailable=outcome == "unavailable",
        )
        return context
