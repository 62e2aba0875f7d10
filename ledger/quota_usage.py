"""How much of its allocation a ClusterQueue really used lately: the figure a quota preview
shows next to the change ("you are cutting a queue that uses 12 % of what it holds").

It reads the read layer (``HourlyRollupQuerySet.covering(...).total()``) over the hours the last
``QUOTA_PREVIEW_DAYS`` days count (``core.ranges.covered_hours``); ``quotas`` cannot, being below
``ledger``, so the preview page and the quota-changes API add this to the service's preview.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from core.ranges import covered_hours
from core.ratios import allocation_rate
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from quotas.models import ClusterQueue

QUOTA_PREVIEW_DAYS = 7


def queue_utilization(queue: ClusterQueue, now: datetime | None = None) -> dict[str, Any]:
    """GPU-hours held, really used and guaranteed over the last days, with their ratios."""
    moment = now or timezone.now()
    span = covered_hours(moment - timedelta(days=QUOTA_PREVIEW_DAYS), moment, moment)
    figures = (
        HourlyRollup.objects.for_scope(RollupScope.CLUSTER_QUEUE)
        .filter(cluster_queue=queue)
        .covering(span)
        .total()
    )
    hours = span.count
    return {
        "days": QUOTA_PREVIEW_DAYS,
        "hours": hours,
        "allocated_gpu_hours": figures.allocated_gpu_hours,
        "active_gpu_hours": figures.active_gpu_hours,
        "nominal_gpu_hours": figures.nominal_gpu_hours,
        "utilization": figures.utilization,
        "telemetry_coverage": figures.telemetry_coverage,
        "quota_allocation_rate": allocation_rate(
            figures.allocated_gpu_hours, figures.nominal_gpu_hours
        ),
        "mean_allocated_gpus": figures.allocated_gpu_hours / hours if hours else None,
    }
