"""``{% episode_notify episode as panel %}``: an episode's notifications and remediation, for
``templates/dashboard/partials/episode_notify.html`` (the episode page includes it);
``{% workload_remediation workload as panel %}``: what remediation did to a workload, for
``templates/dashboard/partials/workload_remediation.html`` (the workload page includes it)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import template

from alerts.models import Episode
from alerts.notify_models import Delivery, RemediationAction, RemediationPolicy
from alerts.remediation import REACTIVATE_PERMISSION, actions_for_episode, needs_reactivation
from quotas.models import Workload

register = template.Library()


@register.filter
def grace(value: timedelta | None) -> str:
    """A grace period in words: "30 min", "2 h", "1 h 30 min"."""
    if value is None:
        return ""
    minutes = int(value.total_seconds() // 60)
    hours, rest = divmod(minutes, 60)
    if not hours:
        return f"{rest} min"
    return f"{hours} h" + (f" {rest} min" if rest else "")


# Deliveries listed on the page, newest first; the admin's delivery log has them all.
SHOWN_DELIVERIES = 50


@register.simple_tag(takes_context=True)
def episode_notify(context: dict[str, Any], episode: Episode) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    deliveries = list(
        Delivery.objects.filter(episode=episode)
        .select_related("receiver")
        .order_by("-created_at", "-id")[:SHOWN_DELIVERIES]
    )
    actions = actions_for_episode(episode)
    policy = (
        RemediationPolicy.objects.filter(cluster_queue_id=episode.cluster_queue_id).first()
        if episode.cluster_queue_id
        else None
    )
    staff = bool(user is not None and user.is_staff and user.has_perm(REACTIVATE_PERMISSION))
    return {
        "deliveries": deliveries,
        "actions": actions,
        "policy": policy,
        "can_reactivate": staff and episode.workload_id is not None and needs_reactivation(actions),
        "is_staff": bool(user is not None and user.is_staff),
    }


@register.simple_tag(takes_context=True)
def workload_remediation(context: dict[str, Any], workload: Workload) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    actions = list(
        RemediationAction.objects.filter(workload=workload)
        .select_related("requested_by", "episode")
        .order_by("created_at", "pk")
    )
    policy = (
        RemediationPolicy.objects.filter(cluster_queue_id=workload.cluster_queue_id).first()
        if workload.cluster_queue_id
        else None
    )
    staff = bool(user is not None and user.is_staff and user.has_perm(REACTIVATE_PERMISSION))
    return {
        "actions": actions,
        "policy": policy,
        "can_reactivate": staff and needs_reactivation(actions),
    }
