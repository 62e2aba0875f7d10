"""``{% episode_remediation episode as panel %}``: what remediation did about an episode, for
``templates/dashboard/partials/episode_notify.html`` (the episode page includes it);
``{% workload_remediation workload as panel %}``: what remediation did to a workload, for
``templates/dashboard/partials/workload_remediation.html`` (the workload page includes it)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import template

from alerts.models import Episode
from quotas.models import Workload
from remediation.apply import REACTIVATE_PERMISSION, actions_for_episode, needs_reactivation
from remediation.models import RemediationAction, RemediationPolicy

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


def _may_reactivate(context: dict[str, Any]) -> bool:
    user = getattr(context.get("request"), "user", None)
    return bool(user is not None and user.is_staff and user.has_perm(REACTIVATE_PERMISSION))


@register.simple_tag(takes_context=True)
def episode_remediation(context: dict[str, Any], episode: Episode) -> dict[str, Any]:
    actions = actions_for_episode(episode)
    policy = (
        RemediationPolicy.objects.filter(cluster_queue_id=episode.cluster_queue_id).first()
        if episode.cluster_queue_id
        else None
    )
    return {
        "actions": actions,
        "policy": policy,
        "can_reactivate": _may_reactivate(context)
        and episode.workload_id is not None
        and needs_reactivation(actions),
    }


@register.simple_tag(takes_context=True)
def workload_remediation(context: dict[str, Any], workload: Workload) -> dict[str, Any]:
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
    return {
        "actions": actions,
        "policy": policy,
        "can_reactivate": _may_reactivate(context) and needs_reactivation(actions),
    }
