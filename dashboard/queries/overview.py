"""The fleet overview's reads: the fleet now (newest windows), and teams and flavors over the range.

"Now" is one aggregate over the newest window of each cluster plus one over pending workloads;
the per-team and per-flavor GPU-hours come from team- and flavor-scope rollups of the range's
complete hours.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, F, FloatField, Max, Q, Sum

from core import plotting
from core.ranges import TimeRange
from dashboard.frame import quota_url
from dashboard.queries.now import busy_thresholds, latest_usage
from dashboard.queries.rollups import complete_hours
from fleet.choices import ActivitySource
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from quotas.access import visible_team_ids
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

    @property
    def allocation_rate(self) -> float | None:
        return plotting.ratio(self.allocated, self.capacity)

    @property
    def utilization(self) -> float | None:
        return plotting.ratio(self.active, self.telemetry)

    @property
    def coverage(self) -> float | None:
        return plotting.ratio(self.telemetry, self.allocated)

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
class TeamFigures:
    team_id: int | None
    key: str
    name: str
    allocated: float
    active: float
    telemetry: float
    idle: float
    busy: float
    url: str | None = None

    @property
    def utilization(self) -> float | None:
        return plotting.ratio(self.active, self.telemetry)

    @property
    def idle_share(self) -> float | None:
        return plotting.ratio(self.idle, self.allocated)

    @property
    def coverage(self) -> float | None:
        return plotting.ratio(self.telemetry, self.allocated)

    @property
    def utilization_pct(self) -> float | None:
        return plotting.percent(self.utilization)

    @property
    def idle_share_pct(self) -> float | None:
        return plotting.percent(self.idle_share)

    @property
    def coverage_pct(self) -> float | None:
        return plotting.percent(self.coverage)


def team_figures(time_range: TimeRange, user: Any) -> list[TeamFigures]:
    """Every team's GPU-hours over the range (team-scope rollups), most allocated first.

    Names are fleet-level facts every signed-in user may see; links go only to teams the user
    may open (quotas.access).
    """
    start, stop = complete_hours(time_range)
    # Grouped by the integer team id (a hash aggregate over ~100 groups); names ride along as
    # Max() of a value that is constant per team. Grouping by the text key sorted on disk.
    rows = (
        HourlyRollup.objects.for_scope(RollupScope.TEAM)
        .between(start, stop)
        .values("team_id")
        .annotate(
            team_key=Max("key"),
            team_name=Max("team__name"),
            team_display=Max("team__display_name"),
            allocated=Sum("allocated_gpu_hours"),
            active=Sum("active_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
            idle=Sum("idle_gpu_hours"),
            busy=Sum("busy_not_working_gpu_hours"),
        )
        .order_by("-allocated", "team_key")
    )
    allowed = visible_team_ids(user)
    result = []
    for row in rows:
        team_id = row["team_id"]
        visible = team_id is not None and (allowed is None or team_id in allowed)
        result.append(
            TeamFigures(
                team_id=team_id,
                key=row["team_key"],
                name=row["team_display"] or row["team_key"],
                allocated=row["allocated"] or 0.0,
                active=row["active"] or 0.0,
                telemetry=row["telemetry"] or 0.0,
                idle=row["idle"] or 0.0,
                busy=row["busy"] or 0.0,
                url=quota_url("quotas:team-detail", row["team_name"]) if visible else None,
            )
        )
    return result


def flavor_figures(time_range: TimeRange) -> list[dict[str, Any]]:
    start, stop = complete_hours(time_range)
    hours = max((stop - start).total_seconds() / 3600.0, 0.0)
    rows = (
        HourlyRollup.objects.for_scope(RollupScope.FLAVOR)
        .between(start, stop)
        .values("key")
        .annotate(
            capacity=Sum("capacity_gpu_hours"),
            allocated=Sum("allocated_gpu_hours"),
            active=Sum("active_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
            idle=Sum("idle_gpu_hours"),
        )
        .order_by("-capacity", "key")
    )
    result = []
    for row in rows:
        allocation_rate = plotting.ratio(row["allocated"] or 0.0, row["capacity"] or 0.0)
        utilization = plotting.ratio(row["active"] or 0.0, row["telemetry"] or 0.0)
        result.append(
            {
                **row,
                "avg_capacity": row["capacity"] / hours if hours else None,
                "avg_allocated": row["allocated"] / hours if hours else None,
                "allocation_rate": allocation_rate,
                "allocation_rate_pct": plotting.percent(allocation_rate),
                "utilization": utilization,
                "utilization_pct": plotting.percent(utilization),
            }
        )
    return result
