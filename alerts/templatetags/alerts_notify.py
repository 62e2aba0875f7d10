"""``{% episode_notify episode as panel %}``: an episode's notifications and remediation, for
``templates/alerts/_episode_notify.html`` (the episode page includes it)."""

from __future__ import annotations

from typing import Any

from django import template

from alerts.models import Episode
from alerts.notify_models import Delivery, RemediationPolicy
from alerts.remediation import REACTIVATE_PERMISSION, actions_for_episode, needs_reactivation

register = template.Library()

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
