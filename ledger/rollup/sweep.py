"""Roll up every hour that is due: after each collection run, and from beat for every cluster.

An hour is due (``RollupHourQuerySet.due``) when it is dirty (a window was written that its rollup
did not include: the rollup failed, was killed, or has not run yet), or when its last rollup ran
before the hour settled (``GPULEDGER_ROLLUP_SETTLE_SECONDS`` after its end) and that time has
passed. Hours whose usage was pruned are never rebuilt. The hour still being collected is
re-rolled at most every ``GPULEDGER_ROLLUP_SECONDS``: at 50,000 GPUs a rollup costs seconds, and
pages read the newest windows directly.

A failed rollup is logged and the sweep goes on with the next hour; the failed one stays due.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from ledger.models import RollupHour
from ledger.rollup.hour import HOUR, roll_up_hour

logger = logging.getLogger(__name__)


@dataclass
class Swept:
    """What one sweep did: hours rolled up, and hours whose rollup failed (still due)."""

    rolled_up: list[datetime] = field(default_factory=list)
    failed: list[datetime] = field(default_factory=list)


def due_hours(cluster_id: int, now: datetime | None = None) -> list[datetime]:
    """The cluster's due hours, oldest first."""
    return list(
        RollupHour.objects.due(now or timezone.now())
        .filter(cluster_id=cluster_id)
        .order_by("hour")
        .values_list("hour", flat=True)
    )


def recently_rolled_up(cluster_id: int, hour: datetime, now: datetime | None = None) -> bool:
    """Whether ``hour`` was rolled up less than GPULEDGER_ROLLUP_SECONDS ago."""
    if settings.GPULEDGER_ROLLUP_SECONDS <= 0:
        return False
    fresh_after = (now or timezone.now()) - timedelta(seconds=settings.GPULEDGER_ROLLUP_SECONDS)
    return RollupHour.objects.filter(
        cluster_id=cluster_id, hour=hour, rolled_up_at__gt=fresh_after
    ).exists()


def roll_up_or_log(cluster_id: int, hour: datetime, *, open_hour: bool = False) -> bool | None:
    """Roll ``hour`` up: True if done, None if the open hour was throttled, False if it failed.

    A failure is logged, never raised: the usage rows are committed and the hour stays dirty, so
    the next run or sweep rolls it up; a failed rollup must not undo a successful collection.
    """
    if open_hour and recently_rolled_up(cluster_id, hour):
        return None
    try:
        roll_up_hour(cluster_id, hour)
    except Exception:
        logger.exception("cluster %s: rollup of %s failed", cluster_id, hour.isoformat())
        return False
    return True


def roll_up_due_hours(
    cluster_id: int,
    now: datetime | None = None,
    *,
    is_open: Callable[[datetime], bool] | None = None,
) -> Swept:
    """Roll up every due hour of one cluster, oldest first.

    ``is_open`` says whether windows of an hour are still to come (default: it has not ended).
    """
    now = now or timezone.now()
    is_open = is_open or (lambda hour: hour + HOUR > now)
    swept = Swept()
    for hour in due_hours(cluster_id, now):
        done = roll_up_or_log(cluster_id, hour, open_hour=is_open(hour))
        if done:
            swept.rolled_up.append(hour)
        elif done is False:
            swept.failed.append(hour)
    return swept


def clusters_with_due_hours(now: datetime | None = None) -> list[int]:
    return list(
        RollupHour.objects.due(now or timezone.now())
        .order_by("cluster_id")
        .values_list("cluster_id", flat=True)
        .distinct()
    )
