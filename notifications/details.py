"""What an event adds to its message, supplied by the app that wrote the delivery.

A ``remediation`` delivery is written by the ``remediation`` app, which sits above this one: the
sender cannot read its rows, so that app registers a function here (from its ``AppConfig.ready``)
that turns a delivery into the extra sentence and JSON document its receivers get. An event with
no function, or a function that finds nothing, sends the plain episode message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from notifications.models import Delivery

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EventDetails:
    """``key`` names ``document`` in the webhook body; ``sentence`` leads emails and Slack."""

    key: str
    document: dict[str, Any]
    sentence: str


DetailsFor = Callable[["Delivery"], EventDetails | None]

_providers: dict[str, DetailsFor] = {}


def register(event: str, provider: DetailsFor) -> None:
    """Let ``provider`` describe the deliveries of ``event`` (once per event; a second
    registration replaces the first, as a reloaded app config would)."""
    _providers[event] = provider


def details_for(delivery: Delivery) -> EventDetails | None:
    provider = _providers.get(delivery.event)
    return None if provider is None else provider(delivery)
