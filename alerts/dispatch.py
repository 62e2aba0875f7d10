"""The queue of windows waiting for alert evaluation, one row per cluster (``AlertEvaluation``).

Collection calls ``request_evaluation`` once its windows are committed: the range is merged into
the cluster's pending range, and an ``evaluate_alerts`` task is published only when none is
waiting already (``queued_at``), so a backfill of a week queues one task, not 10,080. A task
that was published but never started (a lost message, a broker outage) stops counting as
waiting after ``STALE_QUEUED``, and the next request publishes again.

A task ``claim``s the row with a conditional UPDATE whose rowcount is checked, ``take``s the
pending range, evaluates it, and ``release``s the claim only if nothing is pending by then: a
range merged while it ran is evaluated by the same task before it lets go, and a task that
found the claim taken leaves its range pending for the holder. No range is skipped: it stays in
the row until a task that holds the claim has taken it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from alerts.models import AlertEvaluation

logger = logging.getLogger(__name__)

# A task published this long ago and not started is taken for lost: the next request publishes
# another (a duplicate is harmless, evaluation is idempotent and claimed).
STALE_QUEUED = timedelta(minutes=10)


@dataclass(frozen=True)
class PendingRange:
    """Windows ending in ``(start, end]``; ``live`` False when a backfill asked for any of them."""

    start: datetime
    end: datetime
    live: bool


PENDING_FIELDS = ["pending_start", "pending_end", "pending_live"]
TAKEN_FIELDS = ["taken_start", "taken_end", "taken_live"]


def _merge(row: AlertEvaluation, wanted: PendingRange) -> None:
    if row.pending_start is None or row.pending_end is None:
        row.pending_start, row.pending_end, row.pending_live = wanted.start, wanted.end, wanted.live
        return
    row.pending_start = min(row.pending_start, wanted.start)
    row.pending_end = max(row.pending_end, wanted.end)
    row.pending_live = row.pending_live and wanted.live


def _untake(row: AlertEvaluation) -> None:
    """What a holder took and did not evaluate is pending again."""
    if row.taken_start is not None and row.taken_end is not None:
        _merge(row, PendingRange(row.taken_start, row.taken_end, row.taken_live))
    row.taken_start = row.taken_end = None
    row.taken_live = True


def merge(cluster_id: int, wanted: PendingRange, *, now: datetime | None = None) -> bool:
    """Add ``wanted`` to the cluster's pending windows; True when a task should be published
    for them (none is waiting), which the row then records as waiting."""
    now = now or timezone.now()
    with transaction.atomic():
        AlertEvaluation.objects.get_or_create(cluster_id=cluster_id)
        row = AlertEvaluation.objects.select_for_update().get(cluster_id=cluster_id)
        _merge(row, wanted)
        publish = row.queued_at is None or row.queued_at < now - STALE_QUEUED
        if publish:
            row.queued_at = now
        row.save(update_fields=[*PENDING_FIELDS, "queued_at"])
    return publish


def unqueue(cluster_id: int) -> None:
    """A publish failed: no task waits, the next request publishes again."""
    AlertEvaluation.objects.filter(cluster_id=cluster_id).update(queued_at=None)


def claim(cluster_id: int, holder: str, seconds: float, *, now: datetime | None = None) -> bool:
    """Take the cluster's evaluation for ``seconds`` unless a live holder has it; what a holder
    whose claim ran out had taken (killed mid-range) is pending again."""
    now = now or timezone.now()
    AlertEvaluation.objects.get_or_create(cluster_id=cluster_id)
    claimed = (
        AlertEvaluation.objects.filter(cluster_id=cluster_id)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
        .update(
            claimed_by=holder,
            claimed_until=now + timedelta(seconds=seconds),
            queued_at=None,
        )
    )
    if claimed != 1:
        return False
    with transaction.atomic():
        row = AlertEvaluation.objects.select_for_update().get(cluster_id=cluster_id)
        if row.taken_start is not None:
            logger.warning(
                "cluster %s: windows in (%s, %s] left by a holder that stopped are pending again",
                cluster_id,
                row.taken_start.isoformat(),
                row.taken_end.isoformat() if row.taken_end else None,
            )
            _untake(row)
            row.save(update_fields=[*PENDING_FIELDS, *TAKEN_FIELDS])
    return True


def claimed_until(cluster_id: int) -> datetime | None:
    return (
        AlertEvaluation.objects.filter(cluster_id=cluster_id)
        .values_list("claimed_until", flat=True)
        .first()
    )


def take(cluster_id: int, holder: str) -> PendingRange | None:
    """The pending windows, now the holder's to evaluate (None: nothing pending, or the claim
    is no longer the holder's)."""
    with transaction.atomic():
        row = (
            AlertEvaluation.objects.select_for_update()
            .filter(cluster_id=cluster_id, claimed_by=holder)
            .first()
        )
        if row is None or row.pending_start is None or row.pending_end is None:
            return None
        _untake(row)
        taken = PendingRange(row.pending_start, row.pending_end, row.pending_live)
        row.taken_start, row.taken_end, row.taken_live = taken.start, taken.end, taken.live
        row.pending_start = row.pending_end = None
        row.pending_live = True
        row.save(update_fields=[*PENDING_FIELDS, *TAKEN_FIELDS])
    return taken


def give_back(cluster_id: int, rest: PendingRange) -> None:
    """Windows taken and not evaluated (the deadline, a transient error) wait again."""
    with transaction.atomic():
        row = AlertEvaluation.objects.select_for_update().get(cluster_id=cluster_id)
        row.taken_start = row.taken_end = None
        _merge(row, rest)
        row.save(update_fields=[*PENDING_FIELDS, *TAKEN_FIELDS])


def evaluated(cluster_id: int, holder: str, end: datetime, *, through: datetime) -> None:
    """The holder evaluated the windows up to ``end`` of what it took (``through`` its end):
    a holder killed now leaves only the rest taken."""
    rows = AlertEvaluation.objects.filter(cluster_id=cluster_id, claimed_by=holder)
    if end >= through:
        rows.update(evaluated_until=end, taken_start=None, taken_end=None, taken_live=True)
    else:
        rows.update(evaluated_until=end, taken_start=end)


def release(cluster_id: int, holder: str, *, handing_over: bool = False) -> bool:
    """Let go of the claim: only when nothing is pending (False: take again), unless
    ``handing_over`` to a task published for what is pending, which the row then records."""
    rows = AlertEvaluation.objects.filter(cluster_id=cluster_id, claimed_by=holder)
    if handing_over:
        return bool(rows.update(claimed_by="", claimed_until=None, queued_at=timezone.now()))
    return bool(rows.filter(pending_start__isnull=True).update(claimed_by="", claimed_until=None))


def holds(cluster_id: int, holder: str) -> bool:
    return AlertEvaluation.objects.filter(cluster_id=cluster_id, claimed_by=holder).exists()
