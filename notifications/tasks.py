"""Celery task of the notifications app: thin glue over ``notifications.notify``."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from core.deadlines import Deadline
from notifications.notify import run_notifications

logger = logging.getLogger(__name__)


@shared_task(name="notifications.tasks.send_notifications", ignore_result=True)
def send_notifications() -> dict[str, int]:
    """Write the notifications episodes need, send the due ones, refresh Alertmanager.

    Every minute from beat, separate from collection and evaluation, ending by
    ``GPULEDGER_NOTIFY_DEADLINE_SECONDS``; idempotent (the outbox is unique per event and a send
    is claimed), so a doubled tick sends nothing twice.
    """
    deadline = Deadline(
        settings.GPULEDGER_NOTIFY_DEADLINE_SECONDS,
        "the notification deadline",
        "GPULEDGER_NOTIFY_DEADLINE_SECONDS",
    )
    result = run_notifications(timezone.now(), deadline)
    return {
        "written": result.scan.created,
        "sent": result.send.sent,
        "retrying": result.send.retrying,
        "failed": result.send.failed,
        "suppressed": result.send.suppressed,
        "alertmanager_alerts": result.refresh.alerts,
    }
