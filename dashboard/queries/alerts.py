"""What the Alerts pages and the alert badges read: fired episodes the user may see."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet

from alerts.models import Episode, EpisodeQuerySet

# Open episodes a badge list shows on a team, queue, cohort or overview page.
SHORT_LIST = 5


def visible(allowed_team_ids: set[int] | None) -> EpisodeQuerySet:
    """Fired episodes of the teams the user sees (None = every team)."""
    queryset = Episode.objects.fired().with_subjects().select_related("acknowledged_by")
    return queryset if allowed_team_ids is None else queryset.filter(team_id__in=allowed_team_ids)


def listed(
    allowed_team_ids: set[int] | None,
    start: datetime,
    end: datetime,
    *,
    rule: str = "",
    severity: str = "",
    state: str = "",
    team: str = "",
    queue: str = "",
    cluster: str = "",
) -> QuerySet[Episode]:
    """Episodes overlapping [start, end) with the page's filters, most wasted GPU-hours first."""
    queryset = visible(allowed_team_ids).overlapping(start, end)
    if rule:
        queryset = queryset.filter(rule=rule)
    if severity:
        queryset = queryset.filter(severity=severity)
    if state == "open":
        queryset = queryset.filter(resolved_at__isnull=True)
    elif state == "resolved":
        queryset = queryset.filter(resolved_at__isnull=False)
    if team:
        queryset = queryset.filter(team__name=team)
    if queue:
        queryset = queryset.filter(cluster_queue__name=queue)
    if cluster:
        queryset = queryset.filter(cluster__name=cluster)
    return queryset.order_by("-idle_gpu_hours", "-held_gpu_hours", "-started_at", "pk")


def open_for(allowed_team_ids: set[int] | None, **where: object) -> list[Episode]:
    """The open episodes matching ``where`` (team_id=, cluster_queue_id=, …), costliest first."""
    queryset = visible(allowed_team_ids).filter(resolved_at__isnull=True).filter(Q(**where))
    return list(queryset.order_by("-idle_gpu_hours", "-started_at")[:SHORT_LIST])


def history(episode: Episode, allowed: set[int] | None, limit: int = 20) -> list[Episode]:
    """Earlier and later episodes of the same rule and subject, of the teams in ``allowed``
    (``None``: all): a node's history holds other teams' episodes on it."""
    episodes = Episode.objects.fired().filter(rule=episode.rule, subject_key=episode.subject_key)
    if allowed is not None:
        episodes = episodes.filter(team_id__in=allowed)
    return list(episodes.exclude(pk=episode.pk).order_by("-started_at")[:limit])
