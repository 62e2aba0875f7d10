"""The object a quota page or chart URL names, for the user who asks (404 or 403 otherwise).

The policy is ``quotas.access`` (staff and finance see everything; a team lead the detail of
their teams, or of every team with ``GPULEDGER_TEAM_VISIBILITY=public``); this module applies
it to requests, so a page and its charts open and refuse the same things. ``allowed_team_ids``
asks the policy once per request; everything else here reuses that answer.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from alerts.models import Episode
from quotas.access import Roles, sees_team, user_roles, visible_team_ids
from quotas.models import ClusterQueue, Cohort, Team, Workload

__all__ = [
    "allowed_team_ids",
    "request_roles",
    "get_cluster_queue_for_user",
    "get_cohort_for_user",
    "get_team_for_user",
    "get_workload_for_user",
    "sees_team",
]


def request_roles(request: HttpRequest) -> Roles:
    """The user's finance membership and led teams, read once per request (the visibility
    policy and the user menu's role line share them)."""
    cached = getattr(request, "_gpuledger_roles", None)
    if cached is None:
        cached = user_roles(request.user)
        request._gpuledger_roles = cached  # type: ignore[attr-defined]
    return cached


def allowed_team_ids(request: HttpRequest) -> set[int] | None:
    """The team ids whose detail the user sees (None = all), computed once per request."""
    cached = getattr(request, "_gpuledger_team_ids", False)
    if cached is False:
        cached = visible_team_ids(request.user, lambda: request_roles(request))
        request._gpuledger_team_ids = cached  # type: ignore[attr-defined]
    return cached  # type: ignore[return-value]


def owner_sentence(what: str, team: Team | None) -> str:
    """Why a 403: whose the object is, and whom to ask (shown on the 403 page)."""
    if team is None:
        return f"This {what} belongs to no team; only staff see it."
    return f"This {what} belongs to team {team.name}; ask an admin for access."


def get_team_for_user(request: HttpRequest, name: str) -> Team:
    team = get_object_or_404(Team, name=name)
    if not sees_team(allowed_team_ids(request), team.pk):
        raise PermissionDenied(
            f"Only the leads of team {team.name} (and staff) see its detail; ask an admin "
            "to add you as a lead."
        )
    return team


def get_cluster_queue_for_user(request: HttpRequest, cluster: str, name: str) -> ClusterQueue:
    cluster_queue = get_object_or_404(
        ClusterQueue.objects.select_related("cluster", "cohort", "team"),
        cluster__name=cluster,
        name=name,
    )
    if not sees_team(allowed_team_ids(request), cluster_queue.team_id):
        raise PermissionDenied(owner_sentence("queue", cluster_queue.team))
    return cluster_queue


def get_cohort_for_user(request: HttpRequest, cluster: str, name: str) -> Cohort:
    # A cohort is shared by several teams: every signed-in user sees its aggregates; the members
    # of teams the user may not see are summed anonymously on its page and charts.
    return get_object_or_404(
        Cohort.objects.select_related("cluster"), cluster__name=cluster, name=name
    )


def get_workload_for_user(request: HttpRequest, pk: int) -> Workload:
    workload = get_object_or_404(
        Workload.objects.select_related(
            "cluster", "cluster_queue", "cluster_queue__team", "local_queue"
        ),
        pk=pk,
    )
    team_id = workload.cluster_queue.team_id if workload.cluster_queue else None
    if not sees_team(allowed_team_ids(request), team_id):
        owner = workload.cluster_queue.team if workload.cluster_queue else None
        raise PermissionDenied(owner_sentence("workload", owner))
    return workload


def get_episode_for_user(request: HttpRequest, pk: int) -> Episode:
    episode = get_object_or_404(
        Episode.objects.select_related(
            "cluster",
            "team",
            "cluster_queue",
            "local_queue",
            "workload",
            "node",
            "acknowledged_by",
        ),
        pk=pk,
    )
    if not sees_team(allowed_team_ids(request), episode.team_id):
        raise PermissionDenied("Only the owning team's leads (and staff) see this alert.")
    return episode
