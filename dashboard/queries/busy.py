"""The busy-but-not-working page's reads: GPUs now, teams and workloads over the range.

"Busy but not working" is GPU_UTIL at or above a threshold while SM_ACTIVE stays below another
(``busy_thresholds``): a kernel is resident but the GPU mostly waits. Figures over the range come
from the read layer, over the hours the range counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Sum

from core import plotting
from core.ranges import HourSpan
from dashboard.frame import quota_url
from dashboard.queries.holders import HOLDER_FIELDS, holder_from_row, holder_urls
from dashboard.queries.now import busy_now
from dashboard.queries.ranking import TeamFigures, ranked_teams
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.range_figures import Figures
from quotas.models import Team, Workload

BUSY_WORKLOADS_LIMIT = 50
BUSY_GPUS_LIMIT = 100
BUSY = "busy_not_working_gpu_hours"
# The partial index of workload-hours with busy-not-working GPU-hours carries these figures:
# summing only them per workload is an index-only scan on PostgreSQL (bench/RESULTS.md).
BUSY_INDEX = "fleet_rollup_busy_hour"
BUSY_FIGURES = HourlyRollup.figures_in_index(BUSY_INDEX)


# What the busy page's team table shows: busy GPU-hours, their share of allocated, mean GPU_UTIL
# and utilization. Summing only these, which the team-scope partial index carries, makes 30 days
# of 100 teams an index-only scan (bench/pages.py).
BUSY_TEAM_INDEX = "fleet_rollup_team_busy"
BUSY_TEAM_FIGURES = HourlyRollup.figures_in_index(BUSY_TEAM_INDEX)


def busy_by_team(
    span: HourSpan, allowed: set[int] | None, names: tuple[str, ...] = BUSY_TEAM_FIGURES
) -> list[TeamFigures]:
    """Teams with busy-but-not-working GPU-hours in the span, most first, with ``names``."""
    return ranked_teams(span, allowed, by=BUSY, names=names, only_positive=True)


def fleet_figures(span: HourSpan) -> Figures:
    """The fleet's figures over the span: one aggregate."""
    return HourlyRollup.objects.for_scope(RollupScope.FLEET).covering(span).total()


@dataclass
class BusyWorkload:
    """A workload's busy-but-not-working figures over the range, with its name and links."""

    workload_id: int | None
    key: str
    team_id: int | None
    team: str
    figures: Figures
    url: str | None
    team_url: str | None


def busy_by_workload(span: HourSpan, allowed: set[int] | None) -> tuple[list[BusyWorkload], float]:
    """Workloads the user may see, most busy-not-working GPU-hours first (at most
    ``BUSY_WORKLOADS_LIMIT``); and the busy GPU-hours of the workloads hidden from the user."""
    # Only workload-hours that had any (the index's condition), per workload and team id: the
    # scan reads integers and the figures the index carries, and no text.
    rows = (
        HourlyRollup.objects.for_scope(RollupScope.WORKLOAD)
        .covering(span)
        .filter(busy_not_working_gpu_hours__gt=0)
    )
    hidden = 0.0
    if allowed is not None:
        hidden_rows = rows.exclude(team_id__in=allowed)
        hidden = hidden_rows.total(names=BUSY_FIGURES).busy_not_working_gpu_hours
        rows = rows.filter(team_id__in=allowed)
    top: dict[tuple[int | None, int | None], Figures] = rows.figures(
        group_by=("workload_id", "team_id"),
        names=BUSY_FIGURES,
        order_by=(f"-{BUSY}", "workload_id", "team_id"),
        limit=BUSY_WORKLOADS_LIMIT,
    )
    # The rows' figures over the whole range, as the team table's are: the busy GPU-hours are the
    # same (hours without any add 0), and the mean GPU_UTIL and utilization are GPU-hour weighted
    # over every hour of the range, not only the busy ones (docs/architecture.md "Figures").
    ids = [workload_id for workload_id, _ in top if workload_id]
    if ids:
        whole: dict[tuple[int | None, int | None], Figures] = (
            HourlyRollup.objects.for_scope(RollupScope.WORKLOAD)
            .covering(span)
            .filter(workload_id__in=ids)
            .figures(group_by=("workload_id", "team_id"), names=BUSY_TEAM_FIGURES)
        )
        top = {key: whole.get(key, figures) for key, figures in top.items()}
    names: dict[int | None, Mapping[str, Any]] = {
        row["pk"]: row
        for row in Workload.objects.filter(
            pk__in=[workload_id for workload_id, _ in top if workload_id]
        ).values("pk", "namespace", "name")
    }
    teams: dict[int | None, Team] = {
        team.pk: team
        for team in Team.objects.filter(pk__in={team_id for _, team_id in top if team_id}).only(
            "pk", "name", "display_name"
        )
    }
    result = []
    for (workload_id, team_id), figures in top.items():
        workload = names.get(workload_id)
        team = teams.get(team_id)
        result.append(
            BusyWorkload(
                workload_id=workload_id,
                key=f"{workload['namespace']}/{workload['name']}" if workload else "(deleted)",
                team_id=team_id,
                team=str(team) if team else "",
                figures=figures,
                url=quota_url("dashboard:workload-detail", workload_id),
                team_url=quota_url("dashboard:team-detail", team.name if team else None),
            )
        )
    return result, hidden


def busy_gpus_now(
    windows: dict[int, datetime], allowed: set[int] | None
) -> tuple[list[dict[str, Any]], float]:
    rows = busy_now(windows)
    total = rows.aggregate(gpus=Sum("gpus"))["gpus"] or 0.0 if windows else 0.0
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
