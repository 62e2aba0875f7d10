"""The object a quota page or chart URL names, for the user who asks (404 otherwise).

The policy is ``quotas.access`` (staff and finance see everything; a team lead the detail of
their teams, or of every team with ``GPULEDGER_TEAM_VISIBILITY=public``); this module applies
it to requests, so a page and its charts open and refuse the same things. ``allowed_team_ids``
asks the policy once per request; everything else here reuses that answer.

An object the user may not see is refused exactly as one that does not exist: ``Http404`` with
``NOT_YOURS``, the same status and the same page or JSON whichever it is, so that walking ids or
names reveals neither which exist nor whose they are (docs/architecture.md "Refusals").
"""

from __future__ import annotations

from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404

from accounts.rbac import rbac_allows
from alerts.models import Episode
from quotas.access import Roles, sees_team, user_roles, visible_team_ids
from quotas.models import ClusterQueue, Cohort, Team, Workload
from serving.deployments import visible_workloads
from serving.models import ServingWorkload

__all__ = [
    "NOT_YOURS",
    "allowed_team_ids",
    "request_roles",
    "get_cluster_queue_for_user",
    "get_cohort_for_user",
    "get_team_for_user",
    "get_serving_workload_for_user",
    "get_workload_for_user",
    "sees_team",
]


# The one answer to "no such object" and "not yours": it names nothing.
NOT_YOURS = "Not found, or not yours to see."


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


def refuse() -> Http404:
    """The refusal of an object the user may not see: the same as for one that does not exist."""
    return Http404(NOT_YOURS)


def get_team_for_user(request: HttpRequest, name: str) -> Team:
    team = Team.objects.filter(name=name).first()
    if team is None or not sees_team(allowed_team_ids(request), team.pk):
        raise refuse()
    return team


def get_cluster_queue_for_user(request: HttpRequest, cluster: str, name: str) -> ClusterQueue:
    cluster_queue = (
        ClusterQueue.objects.select_related("cluster", "cohort", "team")
        .filter(cluster__name=cluster, name=name)
        .first()
    )
    if cluster_queue is None or not sees_team(allowed_team_ids(request), cluster_queue.team_id):
        raise refuse()
    return cluster_queue


def get_cohort_for_user(request: HttpRequest, cluster: str, name: str) -> Cohort:
    # A cohort is shared by several teams: every signed-in user sees its aggregates; the members
    # of teams the user may not see are summed anonymously on its page and charts.
    return get_object_or_404(
        Cohort.objects.select_related("cluster"), cluster__name=cluster, name=name
    )


def get_workload_for_user(request: HttpRequest, pk: int) -> Workload:
    workload = (
        Workload.objects.select_related(
            "cluster", "cluster_queue", "cluster_queue__team", "local_queue"
        )
        .filter(pk=pk)
        .first()
    )
    if workload is None:
        raise refuse()
    team_id = workload.cluster_queue.team_id if workload.cluster_queue else None
    if not sees_team(allowed_team_ids(request), team_id) and not rbac_allows(
        request.user, workload.cluster, workload.namespace
    ):
        # Optional RBAC visibility adds the namespaces the user may list pods in (accounts.rbac).
        raise refuse()
    return workload


def get_episode_for_user(request: HttpRequest, pk: int) -> Episode:
    episode = (
        Episode.objects.with_subjects().select_related("acknowledged_by").filter(pk=pk).first()
    )
    if episode is None or not sees_team(allowed_team_ids(request), episode.team_id):
        raise refuse()
    return episode


def get_serving_workload_for_user(request: HttpRequest, pk: int) -> ServingWorkload:
    """A serving deployment whose namespace belongs to a team the user sees
    (``serving.deployments.visible_workloads``)."""
    workload = (
        ServingWorkload.objects.select_related("cluster")
        .filter(visible_workloads(allowed_team_ids(request)), pk=pk)
        .first()
    )
    if workload is None:
        raise refuse()
    return workload
