"""Quota per flavor now, GPUs held by running pods now, and a lead's teams at a glance.

"Allocated now" is two numbers, named the same on every page: **admitted (quota)** is the
Kueue quota admitted to workloads (the ClusterQueue's newest ``flavorsUsage`` sample, or the
admitted GPUs of holding workloads without one), and **held by running pods** is the GPUs the
newest collected window found allocated to running pods. A workload admitted but still
pulling images holds quota, not GPUs; the two differ, and both are shown.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q, Sum

from core.ranges import HourSpan
from dashboard.queries.now import latest_usage, latest_windows
from dashboard.queries.teams import workload_figures
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.range_figures import Figures
from quotas.choices import HOLDING_STATES
from quotas.models import ClusterQueue, ClusterQueueQuota, Team, Workload
from quotas.now import (
    Demand,
    QueueNow,
    gpu_quotas,
    holding_by_flavor,
    latest_samples,
    pending_gpus,
    quota_gpus,
)

# Rows per list on a team card (idle and pending workloads).
CARD_ROWS = 5
# Up to this many teams, their pods' GPUs now are filtered by team in the query.
FEW_TEAMS = 5


@dataclass
class FlavorUse:
    """One flavor of a team (summed over its ClusterQueues) now."""

    flavor: str
    nominal: float = 0.0
    admitted: float = 0.0
    # From the queues' newest fresh samples; None (unknown) when none of them has one, as the
    # team's "Borrowed now" card says.
    borrowed: float | None = None

    @property
    def share(self) -> float | None:
        """Admitted quota ÷ nominal quota (above 1 = borrowing); None without nominal quota."""
        return self.admitted / self.nominal if self.nominal > 0 else None


def flavor_use_by_team(
    team_ids: list[int],
    now: datetime,
    *,
    quotas: dict[int, list[ClusterQueueQuota]] | None = None,
    samples: dict[int, QueueNow] | None = None,
    team_of: dict[int, int] | None = None,
    holding: dict[int, dict[str, float]] | None = None,
) -> dict[int, list[FlavorUse]]:
    """Team id → its GPU flavors now (nominal, admitted, borrowed), in quota order.

    Nominal is the queues' spec in GPUs (``quotas.now.quota_gpus``: MIG quota at slices/7),
    admitted the GPUs of their holding workloads (``quotas.now``'s "admitted now"), borrowed
    the sum of the queues' newest fresh samples (None when no queue of the flavor has one). A
    page that has already read the teams' ``gpu_quotas``, ``latest_samples``,
    ``holding_by_flavor`` and queue → team map passes them; otherwise up to four queries.
    """
    if not team_ids:
        return {}
    queue_filter = Q(cluster_queue__team_id__in=team_ids, cluster_queue__deleted_at__isnull=True)
    if team_of is None:
        team_of = dict(
            ClusterQueue.objects.present().filter(team_id__in=team_ids).values_list("pk", "team_id")
        )
    if quotas is None:
        quotas = gpu_quotas(queue_filter)
    if samples is None:
        samples = latest_samples(queue_filter, now)
    uses: dict[int, dict[str, FlavorUse]] = defaultdict(dict)
    for queue_id, queue_quotas in quotas.items():
        team_id = team_of.get(queue_id)
        if team_id is None:
            continue
        for quota in queue_quotas:
            use = uses[team_id].setdefault(quota.flavor_name, FlavorUse(quota.flavor_name))
            use.nominal += quota_gpus(quota)
    for queue_id, sample in samples.items():
        team_id = team_of.get(queue_id)
        if team_id is None:
            continue
        for flavor, values in sample.flavors.items():
            use = uses[team_id].setdefault(flavor, FlavorUse(flavor))
            use.borrowed = (use.borrowed or 0.0) + values["borrowed"]
    # Admitted now (quotas.now): the admitted GPUs of the queues' holding workloads, per flavor.
    if holding is None:
        holding = holding_by_flavor(Q(cluster_queue_id__in=list(team_of))) if team_of else {}
    for queue_id, by_flavor in holding.items():
        team_id = team_of.get(queue_id)
        if team_id is None:
            continue
        for flavor, gpus in by_flavor.items():
            if flavor and gpus:
                uses[team_id].setdefault(flavor, FlavorUse(flavor)).admitted += gpus
    return {team_id: list(by_flavor.values()) for team_id, by_flavor in uses.items()}


def pod_gpus_by_team(team_ids: list[int]) -> dict[int, float]:
    """Team id → GPUs held by running pods in each cluster's newest window: 2 queries.

    A few teams (a team page, a lead's teams) are filtered in the query, by the team index; for
    more (a page of the team list) the window's rows are summed per team and the teams kept
    here, since PostgreSQL would AND the window with a bitmap of every retained window's rows
    of those teams (50 teams: 13 times more index entries than the window has rows).
    """
    if not team_ids:
        return {}
    wanted = set(team_ids)
    rows = latest_usage(latest_windows()).filter(allocated=True)
    if len(wanted) <= FEW_TEAMS:
        rows = rows.filter(team_id__in=wanted)
    summed = rows.order_by().values_list("team_id").annotate(gpus=Sum("gpus"))
    return {team_id: float(gpus or 0.0) for team_id, gpus in summed if team_id in wanted}


def admitted_gpus_by_team(team_ids: list[int]) -> dict[int, float]:
    """Team id → GPUs admitted (quota) to its holding workloads: one query."""
    rows = (
        Workload.objects.holding()
        .filter(cluster_queue__team_id__in=team_ids)
        .order_by()
        .values("cluster_queue__team_id")
        .annotate(gpus=Sum("admitted_gpus"))
    )
    return {row["cluster_queue__team_id"]: float(row["gpus"] or 0.0) for row in rows}


@dataclass
class FlavorQuotaUsed:
    """How much of its quota a team used over a range, on one flavor: allocated GPU-hours ÷
    nominal GPU-hours (``Figures.quota_allocation_rate``; above 1 = borrowing)."""

    flavor: str
    figures: Figures

    @property
    def used(self) -> float | None:
        return self.figures.quota_allocation_rate


def quota_used_by_team(team_ids: list[int], span: HourSpan) -> dict[int, list[FlavorQuotaUsed]]:
    """Team id → per flavor over the span, the GPU-hours its pods held against its nominal
    quota's GPU-hours (team-scope rollups, the hours the range counts): one query."""
    if not team_ids:
        return {}
    found: dict[tuple[int, str], Figures] = (
        HourlyRollup.objects.for_scope(RollupScope.TEAM)
        .covering(span)
        .filter(team_id__in=team_ids)
        .figures(group_by=("team_id", "flavor"), order_by=("team_id", "flavor"))
    )
    result: dict[int, list[FlavorQuotaUsed]] = defaultdict(list)
    for (team_id, flavor), figures in found.items():
        if figures.allocated_gpu_hours or figures.nominal_gpu_hours:
            result[team_id].append(FlavorQuotaUsed(flavor, figures))
    return dict(result)


def idle_workload_share() -> float:
    """The idle share from which a holding workload is listed idle (a setting)."""
    return float(settings.GPULEDGER_IDLE_WORKLOAD_SHARE)


def idle_workloads(team: Team, span: HourSpan) -> list[tuple[Workload, Figures]]:
    """The team's holding workloads that sat mostly idle over the span, idlest first."""
    holding = list(
        Workload.objects.filter(cluster_queue__team=team, state__in=HOLDING_STATES)
        .select_related("cluster_queue")
        .order_by("-admitted_at")[:200]
    )
    figures = workload_figures([w.pk for w in holding], span)
    idle = [
        (workload, figures[workload.pk])
        for workload in holding
        if workload.pk in figures
        and (figures[workload.pk].idle_share or 0.0) >= idle_workload_share()
    ]
    idle.sort(key=lambda pair: pair[1].idle_gpu_hours, reverse=True)
    return idle[:CARD_ROWS]


def pending_workloads(team: Team) -> dict[str, Any]:
    """The team's pending workloads: how many, how many GPUs, and the longest-waiting few."""
    now = pending_gpus(Q(cluster_queue__team=team), "cluster_queue__team_id").get(team.pk, Demand())
    pending = Workload.objects.pending().filter(cluster_queue__team=team)
    rows = list(pending.select_related("cluster_queue").order_by("observed_at", "pk")[:CARD_ROWS])
    return {"count": now.workloads, "gpus": now.gpus, "rows": rows}
