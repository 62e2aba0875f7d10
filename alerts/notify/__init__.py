"""Notifications of hoarding episodes: an outbox scanned from episodes, a sender, Alertmanager.

``outbox.scan`` writes the ``Delivery`` rows episodes need (fired, escalated, resolved, renotify),
``send.send_due`` sends what is due and records every attempt, ``alertmanager.refresh`` keeps
Alertmanager's open alerts alive. ``run_notifications`` does the three in that order within one
deadline; the beat task ``alerts.tasks.send_notifications`` calls it every minute. Nothing here
runs inside collection or evaluation: a slow receiver delays only the next notification.

The rest of the package: ``routing`` (routes -> receivers), ``messages`` (what each kind of
receiver is sent; pure), ``recipients`` (email addresses), ``transports`` (SMTP and HTTP with
deadlines and the transient/permanent split).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from alerts.notify import alertmanager, outbox, send
from alerts.notify.routing import load_routes
from alerts.notify_choices import DeliveryEvent
from alerts.notify_models import Delivery, Receiver
from core.deadlines import Deadline

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
