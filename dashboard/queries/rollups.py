"""GPU-hour sums over a time range, from hourly rollups (DESIGN "Figures").

Pages over a range sum every rollup hour that overlaps it (``rollups_in_range``); charts and the
fleet trends use the complete hours only (``complete_hours``), an hour without a row being a gap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet, Sum

from core.figures import ratio
from core.ranges import TimeRange
from core.timewindows import hour_floor
from ledger.choices import RollupScope
from ledger.models import HourlyRollup

ROLLUP_SUMS = {
    "allocated": Sum("allocated_gpu_hours"),
    "nominal": Sum("nominal_gpu_hours"),
    "active": Sum("active_gpu_hours"),
    "telemetry": Sum("telemetry_gpu_hours"),
    "idle": Sum("idle_gpu_hours"),
    "borrowed": Sum("borrowed_gpu_hours"),
    "lent": Sum("lent_gpu_hours"),
    "tensor": Sum("tensor_active_gpu_hours"),
    "tensor_covered": Sum("tensor_covered_gpu_hours"),
    "pending": Sum("pending_gpu_hours"),
}


def rollups_in_range(scope: str, time_range: TimeRange) -> QuerySet[HourlyRollup]:
    return HourlyRollup.objects.filter(
        scope=scope, hour__gte=time_range.hour_start, hour__lt=time_range.end
    )


def complete_hours(time_range: TimeRange) -> tuple[datetime, datetime]:
    """[first hour start, end of the last complete hour) inside the range."""
    return time_range.hour_start, hour_floor(time_range.end)


def in_complete_hours(time_range: TimeRange) -> Q:
    """Rollup rows of the range's complete hours (``complete_hours``) as a filter."""
    start, stop = complete_hours(time_range)
    return Q(hour__gte=start, hour__lt=stop)


@dataclass
class RangeFigures:
    """GPU-hour sums of one group over the range (DESIGN "Figures")."""

    allocated: float = 0.0
    nominal: float = 0.0
    active: float = 0.0
    telemetry: float = 0.0
    idle: float = 0.0
    borrowed: float = 0.0
    lent: float = 0.0
    tensor: float = 0.0
    tensor_covered: float = 0.0
    pending: float = 0.0

    @classmethod
    def from_row(cls, row: Mapping[str, Any] | None) -> RangeFigures:
        row = row or {}
        return cls(**{name: float(row.get(name) or 0.0) for name in ROLLUP_SUMS})

    @property
    def utilization(self) -> float | None:
        return ratio(self.active, self.telemetry)

    @property
    def tensor_activity(self) -> float | None:
        return ratio(self.tensor, self.tensor_covered)

    @property
    def coverage(self) -> float | None:
        return ratio(self.telemetry, self.allocated)


def workload_figures(ids: list[int], time_range: TimeRange) -> dict[int, RangeFigures]:
    """Range figures of the given workloads from workload-scope rollups: one query."""
    if not ids:
        return {}
    rows = (
        rollups_in_range(RollupScope.WORKLOAD, time_range)
        .filter(workload_id__in=ids)
        .order_by()
        .values("workload_id")
        .annotate(**ROLLUP_SUMS)
    )
    return {row["workload_id"]: RangeFigures.from_row(row) for row in rows}


def fleet_hours(time_range: TimeRange) -> dict[datetime, dict[str, Any]]:
    """Fleet-scope sums per complete hour of the range: one query."""
    start, stop = complete_hours(time_range)
    rows = (
        HourlyRollup.objects.for_scope(RollupScope.FLEET)
        .between(start, stop)
        .values("hour")
        .annotate(
            capacity=Sum("capacity_gpu_hours"),
            allocated=Sum("allocated_gpu_hours"),
            active=Sum("active_gpu_hours"),
            idle=Sum("idle_gpu_hours"),
            busy=Sum("busy_not_working_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
        )
        .order_by("hour")
    )
    return {row["hour"]: dict(row) for row in rows}
