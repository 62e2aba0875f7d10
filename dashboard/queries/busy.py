"""The busy-but-not-working page's reads: GPUs now, teams and workloads over the range.

"Busy but not working" is GPU_UTIL at or above a threshold while SM_ACTIVE stays below another
(``busy_thresholds``): a kernel is resident but the GPU mostly waits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Max, Sum

from core import plotting
from core.ranges import TimeRange
from dashboard.frame import quota_url
from dashboard.queries.holders import HOLDER_FIELDS, holder_from_row, holder_urls
from dashboard.queries.now import busy_thresholds, latest_usage
from dashboard.queries.rollups import complete_hours
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from quotas.access import visible_team_ids
from quotas.models import Team, Workload

BUSY_WORKLOADS_LIMIT = 50
BUSY_GPUS_LIMIT = 100


def busy_by_team(time_range: TimeRange) -> list[dict[str, Any]]:
    start, stop = complete_hours(time_range)
    rows = (
        HourlyRollup.objects.for_scope(RollupScope.TEAM)
        .between(start, stop)
        .values("team_id")
        .annotate(
            team_key=Max("key"),
            team_display=Max("team__display_name"),
            busy=Sum("busy_not_working_gpu_hours"),
            allocated=Sum("allocated_gpu_hours"),
            util=Sum("gpu_util_gpu_hours"),
            util_covered=Sum("gpu_util_covered_gpu_hours"),
            active=Sum("active_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
        )
        .filter(busy__gt=0)
        .order_by("-busy", "team_key")
    )
    return [
        {
            **row,
            "key": row["team_key"],
            "name": row["team_display"] or row["team_key"],
            "busy_share_pct": plotting.percent(
                plotting.ratio(row["busy"], row["allocated"] or 0.0)
            ),
            # GPU_UTIL is already 0-100; the rollup keeps Σ GPU_UTIL/100 × GPU-hours.
            "mean_gpu_util_pct": plotting.percent(
                plotting.ratio(row["util"] or 0.0, row["util_covered"] or 0.0)
            ),
            "utilization_pct": plotting.percent(
                plotting.ratio(row["active"] or 0.0, row["telemetry"] or 0.0)
            ),
        }
        for row in rows
    ]


def busy_by_workload(time_range: TimeRange, user: Any) -> tuple[list[dict[str, Any]], float]:
    """Workloads the user may see, most busy-not-working GPU-hours first; plus the hidden rest."""
    start, stop = complete_hours(time_range)
    allowed = visible_team_ids(user)
    rows = (
        HourlyRollup.objects.for_scope(RollupScope.WORKLOAD)
        .between(start, stop)
        .filter(busy_not_working_gpu_hours__gt=0)
    )
    hidden = 0.0
    if allowed is not None:
        hidden = (
            rows.exclude(team_id__in=allowed).aggregate(busy=Sum("busy_not_working_gpu_hours"))[
                "busy"
            ]
            or 0.0
        )
        rows = rows.filter(team_id__in=allowed)
    # Sums per workload id only (an index-only scan of fleet_rollup_busy_hour on PostgreSQL);
    # names for the top rows come from one more query, so the scan carries no text.
    grouped = list(
        rows.values("workload_id")
        .annotate(
            workload_team=Max("team_id"),
            busy=Sum("busy_not_working_gpu_hours"),
            allocated=Sum("allocated_gpu_hours"),
            util=Sum("gpu_util_gpu_hours"),
            util_covered=Sum("gpu_util_covered_gpu_hours"),
            active=Sum("active_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
            peak=Max("peak_allocated_gpus"),
        )
        .order_by("-busy", "workload_id")[:BUSY_WORKLOADS_LIMIT]
    )
    names = {
        row["pk"]: row
        for row in Workload.objects.filter(
            pk__in=[row["workload_id"] for row in grouped if row["workload_id"]]
        ).values("pk", "namespace", "name")
    }
    teams = {
        team.pk: team
        for team in Team.objects.filter(
            pk__in={row["workload_team"] for row in grouped if row["workload_team"]}
        ).only("pk", "name", "display_name")
    }
    result = []
    for row in grouped:
        workload = names.get(row["workload_id"])
        team = teams.get(row["workload_team"])
        result.append(
            {
                **row,
                "key": f"{workload['namespace']}/{workload['name']}" if workload else "(deleted)",
                "team_id": row["workload_team"],
                "team": str(team) if team else "",
                "url": quota_url("quotas:workload-detail", row["workload_id"]),
                "team_url": quota_url("quotas:team-detail", team.name if team else None),
                "mean_gpu_util_pct": plotting.percent(
                    plotting.ratio(row["util"] or 0.0, row["util_covered"] or 0.0)
                ),
                "utilization_pct": plotting.percent(
                    plotting.ratio(row["active"] or 0.0, row["telemetry"] or 0.0)
                ),
            }
        )
    return result, hidden


def busy_gpus_now(windows: dict[int, datetime], user: Any) -> tuple[list[dict[str, Any]], float]:
    util_min, sm_max = busy_thresholds()
    rows = latest_usage(windows).filter(allocated=True, gpu_util__gte=util_min, activity__lt=sm_max)
    total = rows.aggregate(gpus=Sum("gpus"))["gpus"] or 0.0 if windows else 0.0
    allowed = visible_team_ids(user)
    result = []
    for row in rows.values(*HOLDER_FIELDS, "node_name", "gpu__index", "gpu__gi_id").order_by(
        "-gpu_util", "node_name", "gpu__index"
    )[:BUSY_GPUS_LIMIT]:
        holder = holder_from_row(row, allowed)
        result.append(
            {
                **row,
                "holder": holder,
                "activity_pct": plotting.percent(row["activity"]),
                **holder_urls(holder),
            }
        )
    return result, total
