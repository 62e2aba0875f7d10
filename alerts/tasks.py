"""Celery tasks of the alerts app: thin glue (docs/conventions.md "Background work")."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from alerts.notify import run_notifications
from alerts.remediation import remediate
from core.deadlines import Deadline

logger = logging.getLogger(__name__)


@shared_task(name="alerts.tasks.send_notifications", ignore_result=True)
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


@shared_task(name="alerts.tasks.remediate_workloads", ignore_result=True)
def remediate_workloads() -> dict[str, int]:
    """Apply the ClusterQueues' remediation policies (off unless set; alerts.remediation).

    Every minute from beat, ending by a deadline shorter than the interval; an episode is acted
    on once (claimed by a unique row), so a doubled tick deactivates nothing twice.
    """
    deadline = Deadline(
        max(1, settings.GPULEDGER_REMEDIATION_SECONDS - 10),
        "the remediation deadline",
        "GPULEDGER_REMEDIATION_SECONDS - 10",
    )
    result = remediate(timezone.now(), deadline)
    return {
        "deactivated": result.deactivated,
        "dry_runs": result.dry_runs,
        "notified": result.notified,
        "failed": result.failed,
    }
