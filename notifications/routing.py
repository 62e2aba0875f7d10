"""Which receivers an episode goes to: the enabled routes whose filters it matches.

An empty filter matches everything. Several routes may lead to one receiver: the receiver hears
once, and its re-notification interval is the shortest of those routes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from alerts.models import Episode
from notifications.models import Receiver, Route

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass(frozen=True)
class CompiledRoute:
    """A route's filters as sets, read once per run."""

    receiver: Receiver
    rules: frozenset[str]
    severities: frozenset[str]
    team_ids: frozenset[int]
    cluster_ids: frozenset[int]
    renotify_interval: timedelta

    def matches(self, episode: Episode) -> bool:
        if self.rules and episode.rule not in self.rules:
            return False
        if self.severities and episode.severity not in self.severities:
            return False
        if self.team_ids and episode.team_id not in self.team_ids:
            return False
        return not self.cluster_ids or episode.cluster_id in self.cluster_ids


@dataclass(frozen=True)
class Target:
    """One receiver an episode goes to, with the shortest re-notification interval."""

    receiver: Receiver
    renotify_interval: timedelta


def load_routes() -> list[CompiledRoute]:
    """Every enabled route of an enabled receiver (two queries, whatever the count)."""
    routes = (
        Route.objects.filter(enabled=True, receiver__enabled=True)
        .select_related("receiver")
        .prefetch_related("teams", "clusters")
    )
    return [
        CompiledRoute(
            receiver=route.receiver,
            rules=frozenset(route.rules or ()),
            severities=frozenset(route.severities or ()),
            team_ids=frozenset(team.pk for team in route.teams.all()),
            cluster_ids=frozenset(cluster.pk for cluster in route.clusters.all()),
            renotify_interval=route.renotify_interval,
        )
        for route in routes
    ]


def targets_for(episode: Episode, routes: Iterable[CompiledRoute]) -> list[Target]:
    """The receivers this episode goes to now (its current severity), each once."""
    best: dict[int, Target] = {}
    for route in routes:
        if not route.matches(episode):
            continue
        known = best.get(route.receiver.pk)
        if known is None or route.renotify_interval < known.renotify_interval:
            best[route.receiver.pk] = Target(route.receiver, route.renotify_interval)
    return [best[key] for key in sorted(best)]
