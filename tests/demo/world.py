"""The simulated world the demo's tests read, written once per module (``test_demo_world.py``).

One ``simulate`` run crosses every scenario element those tests look for. Four days: the
preemption needs a second one; the over-provisioned serving episode fires after
``GPULEDGER_ALERT_SERVING_DAYS`` (3) counting days from the first, partial one and stays open
through a fourth. Hourly windows: the fewest that still collect every serving hour."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.management import call_command
from django.db.models import Sum
from django.test import TestCase

from ledger.models import GpuUsage, HourlyRollup
from quotas.models import WorkloadTransition

END = datetime.fromisoformat("2026-06-15T12:00:00+00:00")
DAYS = 4
STEP = 3600
SEED = 3
START = END - timedelta(days=DAYS)
# ``simulate`` runs its API server sync over the last half of the history (--sync-days).
INSTALL = END - timedelta(days=DAYS / 2)
ARGS = ("--days", str(DAYS), "--step", str(STEP), "--seed", str(SEED), "--end", END.isoformat())


def simulate_world(*extra: str) -> None:
    """The world, with the admission records the sync's after-commit hook builds: they run at the
    end of the block, inside whatever transaction the caller holds."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        call_command("simulate", *ARGS, *extra, verbosity=0)


def table_figures() -> tuple:
    """Counts and sums of the tables the simulation writes, to compare two runs."""
    usage = GpuUsage.objects.aggregate(g=Sum("gpus"), a=Sum("activity"))
    rollups = HourlyRollup.objects.aggregate(
        a=Sum("allocated_gpu_hours"), b=Sum("borrowed_gpu_hours")
    )
    return (
        GpuUsage.objects.count(),
        round(usage["g"], 6),
        round(usage["a"], 6),
        WorkloadTransition.objects.count(),
        HourlyRollup.objects.count(),
        round(rollups["a"], 6),
        round(rollups["b"], 6),
    )
