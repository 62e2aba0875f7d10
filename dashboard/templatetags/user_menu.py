"""The user menu's line saying what the signed-in user is: ``{% user_role %}``."""

from __future__ import annotations

from django import template

from dashboard.access import request_roles
from quotas.access import role_label

register = template.Library()


@register.simple_tag(takes_context=True)
def user_role(context: template.Context) -> str:
    """Staff, finance, the lead of which teams, or a member who leads none (``role_label``)."""
    request = context.get("request")
    if request is None:
        return role_label(context.get("user"))
    return role_label(request.user, lambda: request_roles(request))


@register.simple_tag(takes_context=True)
def shows_my_teams(context: template.Context) -> bool:
    """Whether the navigation offers My teams: not to staff, nor to finance users who lead no
    team (their page is the chargeback; My teams would be empty)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if request is None or user is None or user.is_staff:
        return False
    roles = request_roles(request)
    return bool(roles.led) or not roles.finance
