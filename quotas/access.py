"""Who may see what: the one set of access rules for pages and the REST API.

Staff and members of the finance group see everything. Everyone else who is signed in sees
fleet-level aggregates, and the full detail of the teams they lead.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from quotas.models import ClusterQueue, Team


def sees_everything(user: Any) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    if user.is_staff or user.is_superuser:
        return True
    return bool(user.groups.filter(name=settings.GPULEDGER_FINANCE_GROUP).exists())


def visible_team_ids(user: Any) -> set[int] | None:
    """The ids of the teams whose detail ``user`` may see; ``None`` means all of them."""
    if sees_everything(user):
        return None
    if not getattr(user, "is_authenticated", False):
        return set()
    return set(Team.objects.filter(leads=user).values_list("id", flat=True))


def can_view_team(user: Any, team: Team) -> bool:
    allowed = visible_team_ids(user)
    return allowed is None or team.pk in allowed


def can_view_cluster_queue(user: Any, cluster_queue: ClusterQueue) -> bool:
    allowed = visible_team_ids(user)
    return allowed is None or (
        cluster_queue.team_id is not None and cluster_queue.team_id in allowed
    )


def leads_team(user: Any, team_id: int | None) -> bool:
    """Whether ``user`` is a lead of the team (who may request quota changes for its queues)."""
    if team_id is None or not getattr(user, "is_authenticated", False):
        return False
    return Team.objects.filter(pk=team_id, leads=user).exists()
