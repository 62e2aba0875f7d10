"""Celery task of the remediation app: thin glue over ``remediation.apply``."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from core.deadlines import Deadline
from remediation.apply import remediate

logger = logging.getLogger(__name__)


@shared_task(name="remediation.tasks.remediate_workloads", ignore_result=True)
def remediate_workloads() -> dict[str, int]:
    """Apply the ClusterQueues' remediation policies (off unless set; ``remediation.apply``).

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
