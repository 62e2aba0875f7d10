"""``{% episode_notify episode as panel %}``: an episode's notifications, for
``templates/dashboard/partials/episode_notify.html`` (the episode page includes it)."""

from __future__ import annotations

from typing import Any

from django import template

from alerts.models import Episode
from notifications.models import Delivery

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
    return {
        "deliveries": deliveries,
        "is_staff": bool(user is not None and user.is_staff),
    }
