"""The object a quota page or chart URL names, for the user who asks (404 or 403 otherwise).

The rules are ``quotas.access`` (staff and finance see everything, a team lead the detail of
their teams); this module applies them to requests, so a page and its charts open and refuse
the same things. ``allowed_team_ids`` reads the user's teams once per request.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from alerts.models import Episode
from quotas.access import can_view_cluster_queue, can_view_team, visible_team_ids
from quotas.models import ClusterQueue, Cohort, Team, Workload


def allowed_team_ids(request: HttpRequest) -> set[int] | None:
    """The team ids whose detail the user sees (None = all), computed once per request."""
    cached = getattr(request, "_gpuledger_team_ids", False)
    if cached is False:
        cached = visible_team_ids(request.user)
        request._gpuledger_team_ids = cached  # type: ignore[attr-defined]
    return cached  # type: ignore[return-value]


def sees_team(allowed: set[int] | None, team_id: int | None) -> bool:
    return allowed is None or (team_id is not None and team_id in allowed)


def get_team_for_user(request: HttpRequest, name: str) -> Team:
    team = get_object_or_404(Team, name=name)
    if not can_view_team(request.user, team):
        raise PermissionDenied("Only this team's leads (and staff) see its detail.")
    return team


def get_cluster_queue_for_user(request: HttpRequest, cluster: str, name: str) -> ClusterQueue:
    cluster_queue = get_object_or_404(
        ClusterQueue.objects.select_related("cluster", "cohort", "team"),
        cluster__name=cluster,
        name=name,
    )
    if not can_view_cluster_queue(request.user, cluster_queue):
        raise PermissionDenied("Only the owning team's leads (and staff) see this queue.")
    return cluster_queue


def get_cohort_for_user(request: HttpRequest, cluster: str, name: str) -> Cohort:
    # A cohort is shared by several teams: every signed-in user sees its aggregates; workload
    # names of teams the user does not lead are hidden on the page.
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
        raise PermissionDenied("Only the owning team's leads (and staff) see this workload.")
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
