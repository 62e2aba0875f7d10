"""Queue service levels for the pages: ``servicelevels.figures.levels`` under the team-visibility
policy, the step a range is charted by, objectives' statuses and the who-preempts-whom matrix.

No figure is computed here: waits, percentiles and counts are the rows ``levels`` returns.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from core.ranges import TimeRange
from quotas.models import ClusterQueue, Workload
from servicelevels.figures import LevelRow, levels
from servicelevels.models import AdmissionRecord, QueueSLO
from servicelevels.objectives import DayJudgement, judge_days

# A range up to this long is charted per hour, a longer one per day.
HOURLY_UP_TO = timedelta(days=2)
METRICS = "metrics"
METRICS_NOTE = "source: metrics (bucket resolution)"
# The preemptor of a queue the user may not see: named by nothing.
HIDDEN_PREEMPTOR = "a queue of another team"
UNKNOWN_PREEMPTOR = "unknown"
# Days of objective status on the queue and team pages.
STATUS_DAYS = 7


def bounds(time_range: TimeRange, now: datetime | None = None) -> tuple[datetime, datetime]:
    """``(start, end]`` of the range, ending now at the latest (nothing after now happened)."""
    now = now or timezone.now()
    end = min(time_range.end, now)
    return time_range.start, max(end, time_range.start)


def step_for(time_range: TimeRange) -> str:
    return "hour" if time_range.end - time_range.start <= HOURLY_UP_TO else "day"


def table(
    time_range: TimeRange,
    allowed: set[int] | None,
    group_by: str = "cluster_queue",
    *,
    cluster: str | None = None,
) -> list[LevelRow]:
    """One row per group over the whole range, of the records of the teams the user sees."""
    start, end = bounds(time_range)
    return list(levels(start, end, group_by=group_by, cluster=cluster, teams=allowed))


def series(
    time_range: TimeRange,
    allowed: set[int] | None,
    group_by: str = "cluster_queue",
    *,
    cluster: str | None = None,
    group: str | None = None,
) -> dict[tuple[str, str], list[LevelRow]]:
    """(cluster, group) → its rows per hour or day of the range (``step_for``); one group only
    when ``group`` is given."""
    start, end = bounds(time_range)
    out: dict[tuple[str, str], list[LevelRow]] = defaultdict(list)
    for row in levels(
        start, end, group_by=group_by, step=step_for(time_range), cluster=cluster, teams=allowed
    ):
        if group is None or row.group == group:
            out[(row.cluster, row.group)].append(row)
    return dict(out)


def visible_queues(allowed: set[int] | None) -> set[tuple[str, str]] | None:
    """(cluster, ClusterQueue) the user may see by name; None = every one."""
    if allowed is None:
        return None
    return set(
        ClusterQueue.objects.filter(team_id__in=allowed).values_list("cluster__name", "name")
    )


@dataclass
class Matrix:
    """Preemptions in the range: rows are the preempted queues, columns the preempting ones."""

    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.rows


def preemption_matrix(rows: Iterable[LevelRow], visible: set[tuple[str, str]] | None) -> Matrix:
    """Who preempted whom, from the ClusterQueue rows' ``preemptions_by_queue``; a preemptor
    the user may not see is counted under one anonymous column."""
    cells: dict[tuple[str, str], dict[str, int]] = {}
    columns: set[str] = set()
    for row in rows:
        if not row.preemptions:
            continue
        counts: dict[str, int] = defaultdict(int)
        for preemptor, count in row.preemptions_by_queue.items():
            if not preemptor:
                name = UNKNOWN_PREEMPTOR
            elif visible is None or (row.cluster, preemptor) in visible:
                name = preemptor
            else:
                name = HIDDEN_PREEMPTOR
            counts[name] += count
            columns.add(name)
        cells[(row.cluster, row.group)] = dict(counts)
    ordered = sorted(
        columns, key=lambda name: (name in (HIDDEN_PREEMPTOR, UNKNOWN_PREEMPTOR), name)
    )
    matrix = Matrix(columns=ordered)
    for (cluster, queue), counts in sorted(cells.items()):
        matrix.rows.append(
            {
                "cluster": cluster,
                "queue": queue,
                "cells": [counts.get(name, 0) for name in ordered],
                "total": sum(counts.values()),
            }
        )
    return matrix


def objectives(queue_ids: Iterable[int]) -> dict[int, QueueSLO]:
    """ClusterQueue id → its objective, for the queues that have one."""
    return {
        slo.cluster_queue_id: slo
        for slo in QueueSLO.objects.filter(cluster_queue_id__in=list(queue_ids)).select_related(
            "cluster_queue", "cluster_queue__cluster"
        )
    }


def recent_days(slo: QueueSLO, now: datetime | None = None) -> list[DayJudgement]:
    """The objective's judgement of each of the last ``STATUS_DAYS`` days, today (so far) last."""
    now = now or timezone.now()
    return judge_days(slo, now - timedelta(days=STATUS_DAYS - 1), now, now)


def slo_status(queues: Iterable[ClusterQueue], now: datetime | None = None) -> list[dict[str, Any]]:
    """Per queue with an objective: its target and each of the last ``STATUS_DAYS`` days'
    judgement (for ``dashboard/partials/queue_slo.html``)."""
    now = now or timezone.now()
    by_id = {queue.pk: queue for queue in queues}
    out = []
    for queue_id, slo in sorted(objectives(by_id).items(), key=lambda i: by_id[i[0]].name):
        queue = by_id[queue_id]
        out.append(
            {
                "queue": queue.name,
                "cluster": queue.cluster.name,
                "slo": slo,
                "days": recent_days(slo, now) if slo.enabled else [],
            }
        )
    return out


def attempts(workload: Workload) -> list[AdmissionRecord]:
    """The workload's admission records, first attempt first (by the workload, or by its UID
    when the record outlived the link)."""
    match = Q(workload=workload)
    if workload.uid:
        match |= Q(cluster_id=workload.cluster_id, workload_uid=workload.uid)
    return list(
        AdmissionRecord.objects.filter(match)
        .select_related("preempted_by", "preempted_by__cluster_queue")
        .order_by("attempt", "queued_at")
    )


def preemptor_team(record: AdmissionRecord) -> int | None:
    """The team of the workload that preempted this admission (by its ClusterQueue)."""
    by = record.preempted_by
    if by is not None and by.cluster_queue is not None:
        return by.cluster_queue.team_id
    if record.preempting_cluster_queue_name:
        return (
            ClusterQueue.objects.filter(
                cluster_id=record.cluster_id, name=record.preempting_cluster_queue_name
            )
            .values_list("team_id", flat=True)
            .first()
        )
    return None


WEEK = timedelta(days=7)


@dataclass
class WeekWaits:
    """A team's p95 wait over the last 7 days and the 7 days before, on one cluster."""

    cluster: str
    this_week: LevelRow | None
    last_week: LevelRow | None


def weekly_waits(teams: Iterable[Any], now: datetime | None = None) -> dict[int, list[WeekWaits]]:
    """Team id → its waits this week (the last 7 days) and last week (the 7 before), per
    cluster its work was admitted on."""
    now = now or timezone.now()
    by_name = {team.name: team.pk for team in teams}
    ids = list(by_name.values())
    found: dict[tuple[int, str], list[LevelRow | None]] = defaultdict(lambda: [None, None])
    for index, (start, end) in enumerate(((now - WEEK, now), (now - 2 * WEEK, now - WEEK))):
        for row in levels(start, end, group_by="team", teams=ids):
            team_id = by_name.get(row.group)
            if team_id is not None:
                found[(team_id, row.cluster)][index] = row
    out: dict[int, list[WeekWaits]] = defaultdict(list)
    for (team_id, cluster), (this_week, last_week) in sorted(found.items()):
        out[team_id].append(WeekWaits(cluster, this_week, last_week))
    return dict(out)
