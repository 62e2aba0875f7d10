"""Which cluster-hours' rollups include every window written to them: a recorded fact.

One ``RollupHour`` row per cluster-hour that was ever written to or rolled up:

- ``mark_changed``, in the transaction that writes a window (``Collector._write``), bumps the
  hour's change counter, so the window and the counter commit together or not at all;
- ``changes_of`` is what ``roll_up_hour`` reads before it computes, and ``record_rollup`` stores
  it, in the transaction that replaces the rollup rows. A rollup that fails, is killed, or races
  a window committed while it computed leaves the counter ahead: the hour stays dirty, and the
  next collection run or sweep (``ledger.rollup.sweep``) rolls it up again;
- ``mark_pruned``: retention deleted usage of these hours, so their rollups are all that is left
  and must never be rebuilt from what remains (``usage_gone`` says why an hour is in that state).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from core.timewindows import hour_floor
from ledger.models import GpuUsage, HourlyRollup, RollupHour


def mark_changed(cluster_id: int, hour: datetime) -> None:
    """Count one more window written to ``hour``; call it inside the window's transaction."""
    hour = hour_floor(hour)
    rows = RollupHour.objects.filter(cluster_id=cluster_id, hour=hour)
    if rows.update(changes=F("changes") + 1, updated_at=timezone.now()):
        return
    try:
        with transaction.atomic():
            RollupHour.objects.create(cluster_id=cluster_id, hour=hour, changes=1)
    except IntegrityError:
        # Created meanwhile by another transaction (a rollup recording a first read).
        rows.update(changes=F("changes") + 1, updated_at=timezone.now())


def changes_of(cluster_id: int, hour: datetime) -> int:
    """The hour's change counter as committed now (0 for an hour never written to)."""
    found = (
        RollupHour.objects.filter(cluster_id=cluster_id, hour=hour)
        .values_list("changes", flat=True)
        .first()
    )
    return found or 0


def record_rollup(cluster_id: int, hour: datetime, seen: int, started_at: datetime) -> None:
    """Record that the rollup that read ``seen`` at ``started_at`` succeeded (its transaction)."""
    rows = RollupHour.objects.filter(cluster_id=cluster_id, hour=hour)
    values = {"rolled_changes": seen, "rolled_up_at": started_at, "updated_at": timezone.now()}
    if rows.update(**values):
        return
    try:
        with transaction.atomic():
            RollupHour.objects.create(
                cluster_id=cluster_id,
                hour=hour,
                changes=seen,
                rolled_changes=seen,
                rolled_up_at=started_at,
            )
    except IntegrityError:
        rows.update(**values)


def mark_pruned(cluster_id: int, first: datetime, before: datetime) -> None:
    """Flag the hours a prune of the windows in ``[first, before)`` cut into.

    Rows are created for hours that have none (written before this bookkeeping existed), so the
    hour the cutoff falls in is known to be partial whatever wrote it.
    """
    now = timezone.now()
    hours = []
    hour = hour_floor(first - timedelta(microseconds=1))
    while hour < before:
        hours.append(RollupHour(cluster_id=cluster_id, hour=hour, usage_pruned=True))
        hour += timedelta(hours=1)
    RollupHour.objects.bulk_create(
        hours,
        batch_size=1_000,
        update_conflicts=True,
        unique_fields=["cluster", "hour"],
        update_fields=["usage_pruned", "updated_at"],
    )
    RollupHour.objects.filter(cluster_id=cluster_id, hour__lt=before, usage_pruned=False).update(
        usage_pruned=True, updated_at=now
    )


def usage_gone(cluster_id: int, hour: datetime) -> str:
    """Why the hour's rollup cannot be rebuilt or checked from its usage rows; "" when it can.

    A prune flags the hours it cut into. An hour whose rollup counts usage while no usage row is
    left lost its rows some other way (a prune from before this bookkeeping existed, a manual
    delete): its rollup is all there is, too.
    """
    hour = hour_floor(hour)
    if RollupHour.objects.filter(cluster_id=cluster_id, hour=hour, usage_pruned=True).exists():
        return "usage rows pruned (older than the usage retention)"
    usage = GpuUsage.objects.filter(
        cluster_id=cluster_id, window_end__gt=hour, window_end__lte=hour + timedelta(hours=1)
    )
    if not usage.exists():
        counted = HourlyRollup.objects.filter(cluster_id=cluster_id, hour=hour).filter(
            Q(capacity_gpu_hours__gt=0) | Q(allocated_gpu_hours__gt=0)
        )
        if counted.exists():
            return "no usage rows left for an hour whose rollup counts usage"
    return ""
