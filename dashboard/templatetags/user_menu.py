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
