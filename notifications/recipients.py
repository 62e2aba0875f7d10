"""Who an email receiver writes to: its own addresses, then the team's and the queue's people."""

from __future__ import annotations

from typing import TYPE_CHECKING

from notifications.models import AlertContact, Receiver

if TYPE_CHECKING:
    from alerts.models import Episode


def email_recipients(receiver: Receiver, episode: Episode | None) -> list[str]:
    """The receiver's addresses, and with ``include_owners`` the episode's team contacts and
    leads (active users with an address) and its ClusterQueue's owners; each address once."""
    addresses = receiver.target_list()
    if receiver.include_owners and episode is not None:
        queue = episode.cluster_queue
        team = episode.team or (queue.team if queue is not None else None)
        if team is not None:
            addresses += AlertContact.objects.filter(team=team).values_list("email", flat=True)
            addresses += (
                team.leads.filter(is_active=True)
                .exclude(email="")
                .order_by("username")
                .values_list("email", flat=True)
            )
        if queue is not None:
            addresses += AlertContact.objects.filter(cluster_queue=queue).values_list(
                "email", flat=True
            )
    seen: set[str] = set()
    unique = []
    for address in addresses:
        key = address.strip().lower()
        if key and key not in seen:
            seen.add(key)
            unique.append(address.strip())
    return unique
