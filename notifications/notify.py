"""One notification run: scan the episodes into the outbox, send, refresh Alertmanager."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.deadlines import Deadline
from notifications import alertmanager, outbox, send
from notifications.choices import DeliveryEvent
from notifications.models import Delivery, Receiver
from notifications.routing import load_routes

logger = logging.getLogger(__name__)


@dataclass
class NotifyResult:
    scan: outbox.ScanResult
    send: send.SendResult
    refresh: alertmanager.RefreshResult


def run_notifications(now: datetime, deadline: Deadline) -> NotifyResult:
    """Scan the episodes into the outbox, send what is due, refresh Alertmanager."""
    routes = load_routes()
    scanned = outbox.scan(now, routes)
    sent = send.send_due(now, deadline)
    refreshed = alertmanager.refresh(now, deadline, routes)
    return NotifyResult(scanned, sent, refreshed)


def queue_test(receiver: Receiver, now: datetime, user: Any = None) -> Delivery:
    """A test delivery for the receiver, due now (the admin's "send test")."""
    return Delivery.objects.create(
        episode=None,
        receiver=receiver,
        event=DeliveryEvent.TEST,
        severity="",
        next_attempt_at=now,
        requested_by=user if user is not None and user.is_authenticated else None,
    )


__all__ = ["NotifyResult", "queue_test", "run_notifications"]
