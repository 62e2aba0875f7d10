"""Who may see what: the one team-visibility policy of pages, charts, chargeback, OpenCost and
the read API.

Staff and members of the finance group (``GPULEDGER_FINANCE_GROUP``) see everything. Everyone
else who is signed in sees fleet-level aggregates and, by ``GPULEDGER_TEAM_VISIBILITY``:

- ``private`` (the default): the per-team figures, names, queues and workloads of the teams
  they lead or are members of only (members see; only leads act for a team). Other teams
  count in fleet totals and appear as anonymised members of a cohort ("another team's
  queue", "other members (2)", summed), never by name and never with a figure of their own
  next to a name.
- ``public``: every team's figures, pages, queues and workloads. (Admin features stay
  staff-only: that is Django's admin permissions, not this policy.)

``visible_team_ids`` is the policy: every caller asks it once per request (the dashboard through
``dashboard.access.allowed_team_ids``) and filters with ``sees_team`` or ``team_id__in``, never
one query per row. Rows without a team (unattributed usage, queues no team owns) are team
detail nobody leads: visible only to those who see everything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import Exists, OuterRef, Q

from quotas.models import ClusterQueue, Team

PRIVATE = "private"
PUBLIC = "public"

# How hidden things read wherever a page or chart would have named them.
ANOTHER_TEAM = "another team"
ANOTHER_TEAMS_QUEUE = "another team's queue"
ANOTHER_TEAMS_WORKLOAD = "a workload of another team"


def other_teams_label(count: int) -> str:
    """The row or series that sums the teams a user may not see by name."""
    return f"Other teams ({count})"


def other_members_label(count: int) -> str:
    """The row or series that sums a cohort's members a user may not see by name."""
    return f"Other members ({count})"


def hide_queue_path(text: str, path: str) -> str:
    """``text`` (a Kueue preemption message) with the preemptor's queue path taken out: that
    path names another team's ClusterQueue when the preemptor is not visible."""
    return text.replace(path, ANOTHER_TEAMS_QUEUE) if path else text


def team_visibility() -> str:
    return settings.GPULEDGER_TEAM_VISIBILITY


def sees_everything(user: Any) -> bool:
    """Staff and the finance group: every team, whatever ``GPULEDGER_TEAM_VISIBILITY`` says."""
    if not getattr(user, "is_authenticated", False):
        return False
    if user.is_staff or user.is_superuser:
        return True
    return bool(user.groups.filter(name=settings.GPULEDGER_FINANCE_GROUP).exists())


def member_team_ids(user: Any) -> set[int]:
    """The teams ``user`` leads or is a member of: the teams whose detail they see (one query)."""
    if not getattr(user, "is_authenticated", False):
        return set()
    return set(Team.objects.filter(Q(leads=user) | Q(members=user)).values_list("id", flat=True))


def led_team_ids(user: Any) -> set[int]:
    """The teams ``user`` leads (one query)."""
    if not getattr(user, "is_authenticated", False):
        return set()
    return set(Team.objects.filter(leads=user).values_list("id", flat=True))


@dataclass(frozen=True)
class Roles:
    """What the policy needs to know of a user who is neither staff nor superuser."""

    finance: bool
    # Team id → its name as pages say it (``str(team)``), in name order.
    led: dict[int, str]
    # The teams the user is a member of but does not lead, likewise.
    member: dict[int, str] = field(default_factory=dict)


def user_roles(user: Any) -> Roles:
    """Finance membership and the teams ``user`` leads or is a member of: two queries."""
    finance = user.groups.filter(name=settings.GPULEDGER_FINANCE_GROUP).exists()
    leads = Team.leads.through.objects.filter(team_id=OuterRef("pk"), user_id=user.pk)
    teams = (
        Team.objects.filter(Q(leads=user) | Q(members=user))
        .annotate(is_lead=Exists(leads))
        .distinct()
        .order_by("name")
    )
    led: dict[int, str] = {}
    member: dict[int, str] = {}
    for team in teams:
        (led if team.is_lead else member)[team.pk] = str(team)
    return Roles(finance=finance, led=led, member=member)


def visible_team_ids(user: Any, roles: Callable[[], Roles] | None = None) -> set[int] | None:
    """The ids of the teams whose figures, names and objects ``user`` may see; ``None`` means
    every team's (and rows without a team). At most two queries: call it once per request.
    ``roles`` returns the user's ``Roles`` when a caller already has (or caches) them."""
    if not getattr(user, "is_authenticated", False):
        return set()
    if team_visibility() == PUBLIC or user.is_staff or user.is_superuser:
        return None
    if roles is None:
        return None if sees_everything(user) else member_team_ids(user)
    found = roles()
    return None if found.finance else set(found.led) | set(found.member)


def sees_team(allowed: set[int] | None, team_id: int | None) -> bool:
    """Whether a row of team ``team_id`` is visible under ``allowed`` (``visible_team_ids``)."""
    return allowed is None or (team_id is not None and team_id in allowed)


def leads_team(user: Any, team_id: int | None) -> bool:
    """Whether ``user`` is a lead of the team (who may request quota changes for its queues)."""
    if team_id is None or not getattr(user, "is_authenticated", False):
        return False
    return Team.objects.filter(pk=team_id, leads=user).exists()


def acts_for_team(user: Any, team_id: int | None) -> bool:
    """Whether ``user`` may act on a team's object (acknowledge or silence its alerts): staff,
    or a lead of that team. Seeing a team (``visible_team_ids``, e.g. under ``public``) is not
    enough to act for it."""
    if not getattr(user, "is_authenticated", False):
        return False
    if getattr(user, "is_staff", False):
        return True
    return team_id is not None and team_id in led_team_ids(user)


# How many led teams the user menu names before it says "and N more".
ROLE_TEAMS_SHOWN = 3


def role_label(user: Any, roles: Callable[[], Roles] | None = None) -> str:
    """What the user is, in the words of this policy (the user menu): staff, finance, the lead of
    named teams, or a member who leads none. No query for staff; ``roles`` as for
    ``visible_team_ids`` (the dashboard shares one per request)."""
    if not getattr(user, "is_authenticated", False):
        return ""
    if user.is_staff:
        return "Staff: sees every team"
    if user.is_superuser:
        return "Superuser: sees every team"
    found = roles() if roles is not None else user_roles(user)
    parts = []
    if found.finance:
        parts.append("Finance: sees every team's figures and chargeback")
    if found.led:
        names = list(found.led.values())
        shown = ", ".join(names[:ROLE_TEAMS_SHOWN])
        if len(names) > ROLE_TEAMS_SHOWN:
            shown += f" and {len(names) - ROLE_TEAMS_SHOWN} more"
        parts.append(f"Team lead of {shown}")
    if found.member:
        names = list(found.member.values())
        shown = ", ".join(names[:ROLE_TEAMS_SHOWN])
        if len(names) > ROLE_TEAMS_SHOWN:
            shown += f" and {len(names) - ROLE_TEAMS_SHOWN} more"
        parts.append(f"Member of {shown}")
    if parts:
        return "; ".join(parts)
    if team_visibility() == PUBLIC:
        return "Member: leads no team; sees every team's figures"
    return "Member: leads no team; sees fleet totals"


def shown_preview(preview: Any, cluster_id: int, allowed: set[int] | None) -> Any:
    """A quota change's stored preview as a user who sees ``allowed`` teams may see it.

    The cohort members that may reclaim a borrower (``borrowers_after[].reclaimable_by``) are
    named only when their team is visible; the others are summed into one unnamed entry, with
    neither their policy nor whether they have pending work (one query per preview).
    """
    if allowed is None or not isinstance(preview, dict):
        return preview
    rows = preview.get("borrowers_after") or []
    named = {
        entry.get("queue")
        for row in rows
        if isinstance(row, dict)
        for entry in row.get("reclaimable_by") or []
        if isinstance(entry, dict)
    }
    if not named:
        return preview
    visible = set(
        ClusterQueue.objects.filter(
            cluster_id=cluster_id, name__in=named, team_id__in=allowed
        ).values_list("name", flat=True)
    )
    shown_rows = []
    for row in rows:
        entries = (row.get("reclaimable_by") or []) if isinstance(row, dict) else []
        kept = [e for e in entries if isinstance(e, dict) and e.get("queue") in visible]
        hidden = len(entries) - len(kept)
        if hidden:
            kept.append({"queue": other_members_label(hidden), "policy": "", "pending_now": None})
        shown_rows.append({**row, "reclaimable_by": kept} if isinstance(row, dict) else row)
    return {**preview, "borrowers_after": shown_rows}
