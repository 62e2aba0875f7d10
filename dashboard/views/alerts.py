"""The Alerts page (open and recent episodes) and the episode page with its actions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_POST

from alerts import actions, permissions
from alerts.choices import EpisodeState, Rule, Severity
from alerts.ended import through_ended_hours
from alerts.models import Episode
from alerts.overprovisioned import evidence_days
from alerts.summary import knee_unit
from core.params import InvalidParameter, check_text
from core.ranges import TimeRange
from dashboard.access import allowed_team_ids, get_episode_for_user
from dashboard.charts.alerts import MARGIN
from dashboard.decorators import choice_param, dashboard_page
from dashboard.frame import paginate, stat
from dashboard.queries import alerts as queries
from dashboard.templatetags.formatting import duration, figure
from fleet.models import Cluster
from ledger.window_detail import window_detail
from quotas.models import ClusterQueue, Team

STATES = ("all", "open", "resolved")
# Silence choices on the episode page, in hours.
SILENCE_HOURS = (4, 24, 72, 168)


@dashboard_page
def alert_list(request: HttpRequest, time_range: TimeRange) -> HttpResponse:
    allowed = allowed_team_ids(request)
    filters = {
        "rule": choice_param(request, "rule", ("", *Rule.values), ""),
        "severity": choice_param(request, "severity", ("", *Severity.values), ""),
        "state": choice_param(request, "state", STATES, "all"),
        "team": request.GET.get("team", "").strip(),
        "queue": request.GET.get("queue", "").strip(),
        "cluster": request.GET.get("cluster", "").strip(),
    }
    episodes = queries.listed(
        allowed,
        time_range.start,
        time_range.end,
        **{key: ("" if value == "all" else value) for key, value in filters.items()},
    )
    page, page_query = paginate(request, episodes)
    teams = Team.objects.order_by("name")
    queues = ClusterQueue.objects.order_by("name").values_list("name", flat=True).distinct()
    if allowed is not None:
        teams = teams.filter(pk__in=allowed)
        queues = queues.filter(team_id__in=allowed)
    open_now = queries.visible(allowed).filter(resolved_at__isnull=True)
    context = {
        "nav": "alerts",
        "page_title": "Hoarding alerts",
        "time_range": time_range,
        "page_obj": page,
        "page_query": page_query,
        "filters": filters,
        "rules": Rule.choices,
        "severities": Severity.choices,
        "states": STATES,
        "teams": list(teams.values_list("name", flat=True)),
        "queues": list(queues),
        "clusters": list(Cluster.objects.order_by("name").values_list("name", flat=True)),
        "now": timezone.now(),
        "open_count": open_now.count(),
        "critical_count": open_now.filter(severity=Severity.CRITICAL).count(),
    }
    return render(request, "dashboard/alert_list.html", context)


@dashboard_page(uses_range=False)
def episode_detail(request: HttpRequest, pk: int) -> HttpResponse:
    episode = get_episode_for_user(request, pk)
    now = timezone.now()
    end = episode.resolved_at or episode.evaluated_until
    evidence = episode.evidence or {}
    # The hours that have ended, as the workload and chargeback pages count them.
    ended = through_ended_hours(episode, now)
    through = f"through {ended.through:%Y-%m-%d %H:%M} UTC"
    if ended.cut:
        through += " (the hour in progress counts once it ends)"
    gpus = sorted(
        (evidence.get("gpus") or {}).items(), key=lambda item: item[1].get("uuid", item[0])
    )
    stats = [
        stat(
            "State",
            EpisodeState(episode.state).name.title(),
            "",
            "",
            tone="bad" if episode.state == "open" else None,
            testid="stat-state",
        ),
        stat("Severity", episode.get_severity_display(), "", "", testid="stat-severity"),
        stat(
            "Held",
            duration(episode.held_seconds),
            "",
            f"from {episode.started_at:%Y-%m-%d %H:%M} UTC",
            testid="stat-duration",
        ),
        stat(
            "Wasted",
            figure(ended.idle_gpu_hours),
            "GPU-h",
            f"{figure(ended.held_gpu_hours)} GPU-hours held, {through}",
            tone="warn" if ended.idle_gpu_hours else None,
            testid="stat-idle",
        ),
        stat(
            "Cost",
            f"{ended.cost:,.2f}",
            settings.GPULEDGER_CURRENCY,
            f"under the rate card, {through}",
            testid="stat-cost",
        ),
    ]
    detail = window_detail(episode.cluster_id, episode.started_at - MARGIN, end + MARGIN)
    context = {
        "nav": "alerts",
        "detail_note": detail.note(
            "the hourly mean of the episode's workload, queue or node",
            "rollups keep no per-GPU row",
        ),
        "page_title": episode.get_rule_display(),
        "episode": episode,
        "stats": stats,
        "gpus": gpus,
        "evidence": evidence,
        "history": queries.history(episode, allowed_team_ids(request)),
        "chart_end": end,
        "now": now,
        "silenced": episode.is_silenced(now),
        "silence_hours": SILENCE_HOURS,
        "can_acknowledge": permissions.may_acknowledge(request.user, episode),
        "can_silence": permissions.may_silence(request.user, episode),
        "can_exempt": permissions.may_exempt(request.user, episode),
    }
    if episode.serving_workload_id is not None:
        context["serving_unit"] = knee_unit(str(evidence.get("knee_unit", "")))
        context["serving_days"] = evidence_days(evidence)
        knee_hour = evidence.get("knee_hour")
        context["serving_knee_hour"] = parse_datetime(knee_hour) if knee_hour else None
        context["detail_note"] = ""  # its evidence is hourly: no per-window rows are missed
    return render(request, "dashboard/episode_detail.html", context)


def _comment(request: HttpRequest) -> str:
    try:
        return check_text("comment", request.POST.get("comment", "").strip(), 2000)
    except InvalidParameter as exc:
        raise PermissionDenied(str(exc)) from None


def _back(episode: Episode) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("dashboard:episode-detail", args=[episode.pk]))


def _episode_to_act_on(request: HttpRequest, pk: int, may: Callable[..., bool]) -> Episode:
    """The episode, if the user may act on it (alerts/permissions.py)."""
    episode = get_episode_for_user(request, pk)
    if not may(request.user, episode):
        raise PermissionDenied(
            "Only the team's leads and people given the permission act on its alerts."
        )
    return episode


@login_required
@require_POST
def episode_acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    episode = _episode_to_act_on(request, pk, permissions.may_acknowledge)
    actions.acknowledge(episode, request.user, _comment(request))
    messages.success(request, "Acknowledged.")
    return _back(episode)


@login_required
@require_POST
def episode_silence(request: HttpRequest, pk: int) -> HttpResponse:
    episode = _episode_to_act_on(request, pk, permissions.may_silence)
    raw = request.POST.get("hours", "")
    if raw not in {str(hours) for hours in SILENCE_HOURS}:
        return HttpResponse("hours must be one of 4, 24, 72, 168", status=400)
    until = timezone.now() + timedelta(hours=int(raw))
    actions.silence(episode, request.user, until, _comment(request))
    messages.success(request, f"Silenced until {until:%Y-%m-%d %H:%M} UTC.")
    return _back(episode)


@login_required
@require_POST
def episode_exempt(request: HttpRequest, pk: int) -> HttpResponse:
    episode = get_episode_for_user(request, pk)
    if not permissions.may_exempt(request.user, episode):
        raise PermissionDenied("Exemptions need the permission to exempt alerts.")
    if actions.exempt_workload(episode, request.user, _comment(request)) is None:
        return HttpResponse("this episode has no workload or queue to exempt", status=400)
    messages.success(request, "Exempt from now on: shown, never notified or remediated.")
    return _back(episode)
