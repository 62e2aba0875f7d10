"""The roles a provider's groups grant, and applying them to a user.

For an account that signs in through the provider, the groups claim owns these roles: the
teams it leads, the teams it is a member of, the finance group, ``is_staff`` and the
quota-apply permission. Each sign-in and each re-check of an open session
(``accounts.middleware``) sets them to exactly what the mapped groups grant, so a role granted
by hand to such an account lasts until its next re-check. ``is_superuser`` is never set from a
claim: the break-glass admin is a local account.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, Permission
from django.db import transaction

from accounts.choices import Role
from accounts.models import GroupRoleMapping

logger = logging.getLogger(__name__)

APPLY_PERMISSION = ("quotas", "apply_quota_change")


@dataclass(frozen=True)
class Granted:
    """What a set of provider groups grants."""

    lead: frozenset[int]
    member: frozenset[int]
    finance: bool
    admin: bool


def groups_from_claims(claims: dict[str, Any], claim: str) -> list[str]:
    """The groups claim as a list of strings; a missing claim is no groups, a malformed one
    is logged and read as no groups (the user keeps signing in, with no role)."""
    raw = claims.get(claim)
    if raw is None:
        return []
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and all(isinstance(item, str) for item in raw):
        return list(raw)
    logger.warning("OIDC claim %r is not a list of strings; read as no groups", claim)
    return []


def granted_roles(groups: Iterable[str]) -> Granted:
    """The roles the mapped ``groups`` grant (one query)."""
    names = set(groups)
    lead: set[int] = set()
    member: set[int] = set()
    finance = admin = False
    for role, team_id in GroupRoleMapping.objects.filter(group__in=names).values_list(
        "role", "team_id"
    ):
        if role == Role.LEAD and team_id is not None:
            lead.add(team_id)
        elif role == Role.MEMBER and team_id is not None:
            member.add(team_id)
        elif role == Role.FINANCE:
            finance = True
        elif role == Role.ADMIN:
            admin = True
    return Granted(
        lead=frozenset(lead), member=frozenset(member - lead), finance=finance, admin=admin
    )


def _apply_permission() -> Permission:
    app_label, codename = APPLY_PERMISSION
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


@transaction.atomic
def apply_roles(user: Any, granted: Granted) -> None:
    """Set ``user``'s leads, memberships, finance group, staff flag and quota-apply permission
    to exactly ``granted``."""
    user.teams_led.set(granted.lead)
    user.teams_joined.set(granted.member)
    finance_group, _ = Group.objects.get_or_create(name=settings.GPULEDGER_FINANCE_GROUP)
    if granted.finance:
        user.groups.add(finance_group)
    else:
        user.groups.remove(finance_group)
    permission = _apply_permission()
    if granted.admin:
        user.user_permissions.add(permission)
    else:
        user.user_permissions.remove(permission)
    if user.is_staff != granted.admin:
        user.is_staff = granted.admin
        user.save(update_fields=["is_staff"])
    # ModelBackend caches permissions on the instance.
    for cache in ("_perm_cache", "_user_perm_cache", "_group_perm_cache"):
        user.__dict__.pop(cache, None)
