"""Who may acknowledge, silence and exempt an episode.

Acknowledging and silencing need the permission (``alerts.acknowledge_episode``,
``alerts.silence_episode``) or to be a lead of the episode's team; exempting its workload or
ClusterQueue needs ``alerts.exempt_episode`` (a lead may not exempt their own team's
workloads from its alerts). Being staff grants none of them: staff get them from their groups
or user permissions in the admin, superusers have all. The pages, the API and the admin's
episode actions ask here (docs/architecture.md "Notifications and remediation").
"""

from __future__ import annotations

from typing import Any

from alerts.models import Episode
from quotas.access import led_team_ids

ACKNOWLEDGE = "alerts.acknowledge_episode"
SILENCE = "alerts.silence_episode"
EXEMPT = "alerts.exempt_episode"


def _leads(user: Any, episode: Episode) -> bool:
    return episode.team_id is not None and episode.team_id in led_team_ids(user)


def _granted(user: Any, permission: str) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.has_perm(permission))


def may_acknowledge(user: Any, episode: Episode) -> bool:
    return _granted(user, ACKNOWLEDGE) or _leads(user, episode)


def may_silence(user: Any, episode: Episode) -> bool:
    return _granted(user, SILENCE) or _leads(user, episode)


def may_exempt(user: Any, episode: Episode) -> bool:
    return _granted(user, EXEMPT)
