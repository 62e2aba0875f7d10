"""The fleet overview's reads: the fleet now (newest windows), and flavors over the range.

"Now" is one aggregate over the newest window of each cluster plus one over pending workloads;
the per-flavor GPU-hours come from the read layer (flavor-scope rollups of the hours the range
counts); the team table is ``dashboard.queries.ranking``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Count, F, FloatField, Q, Sum

from core import figures as formulas
from core.ranges import HourSpan
from dashboard.queries.now import busy_thresholds, latest_usage
from fleet.choices import ActivitySource
from ledger.choices import RollupScope
from ledger.figures import Figures
from ledger.models import HourlyRollup
from quotas.models import Workload


@dataclass
class FleetNow:
    window_end: datetime | None
    capacity: float = 0.0
    allocated: float = 0.0
    telemetry: float = 0.0
    active: float = 0.0
    idle: float = 0.0
    no_telemetry_allocated: float = 0.0
    no_telemetry_free: float = 0.0
    fallback: float = 0.0
    busy: float = 0.0
    pending_gpus: float = 0.0
    pending_workloads: int = 0

    # GPUs now, not GPU-hours; the ratios are DESIGN "Figures"' formulas all the same.

    @property
    def allocation_rate(self) -> float | None:
        return formulas.allocation_rate(self.allocated, self.capacity)

    @property
    def utilization(self) -> float | None:
        return formulas.utilization(self.active, self.telemetry)

    @property
    def coverage(self) -> float | None:
        return formulas.telemetry_coverage(self.telemetry, self.allocated)

    @property
    def no_telemetry(self) -> float:
        return self.no_telemetry_allocated + self.no_telemetry_free


def fleet_now(windows: dict[int, datetime]) -> FleetNow:
    """The overview's numbers: one aggregate over the newest windows, one over pending workloads."""
    util_min, sm_max = busy_thresholds()
    idle_below = settings.GPULEDGER_IDLE_THRESHOLD
    allocated = Q(allocated=True)
    with_data = Q(allocated=True, activity__isnull=False)
    totals = (
        latest_usage(windows).aggregate(
            sum_capacity=Sum("capacity_gpus"),
            sum_allocated=Sum("gpus", filter=allocated),
            sum_telemetry=Sum("gpus", filter=with_data),
            sum_active=Sum(F("activity") * F("gpus"), filter=with_data, output_field=FloatField()),
            sum_idle=Sum("gpus", filter=Q(allocated=True, activity__lt=idle_below)),
            sum_no_telemetry_allocated=Sum("gpus", filter=Q(allocated=True, activity__isnull=True)),
            sum_no_telemetry_free=Sum(
                "capacity_gpus", filter=Q(allocated=False, activity__isnull=True)
            ),
            sum_fallback=Sum(
                "gpus", filter=Q(allocated=True, activity_source=ActivitySource.GR_ENGINE_ACTIVE)
            ),
            sum_busy=Sum(
                "gpus", filter=Q(allocated=True, gpu_util__gte=util_min, activity__lt=sm_max)
            ),
        )
        if windows
        else {}
    )
    pending = Workload.objects.pending().aggregate(gpus=Sum("requested_gpus"), count=Count("pk"))
    return FleetNow(
        window_end=max(windows.values()) if windows else None,
        pending_gpus=pending["gpus"] or 0.0,
        pending_workloads=pending["count"] or 0,
        **{key.removeprefix("sum_"): value or 0.0 for key, value in totals.items()},
    )


@dataclass
class FlavorFigures:
    """One ResourceFlavor over a range: its figures and its mean GPUs over the counted hours."""

    key: str
    figures: Figures
    mean_capacity: float | None
    mean_allocated: float | None


def flavor_figures(span: HourSpan) -> list[FlavorFigures]:
    """Every flavor's figures over the hours ``span`` counts, most capacity first: one query."""
    found: dict[str, Figures] = (
        HourlyRollup.objects.for_scope(RollupScope.FLAVOR)
        .covering(span)
        .figures(group_by=("key",), order_by=("-capacity_gpu_hours", "key"))
    )
    return [
        FlavorFigures(
            key=key,
            figures=figures,
            mean_capacity=figures.mean_gpus("capacity_gpu_hours", span.count),
            mean_allocated=figures.mean_gpus("allocated_gpu_hours", span.count),
        )
        for key, figures in found.items()
    ]
