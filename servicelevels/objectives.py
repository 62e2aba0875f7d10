"""Each UTC day of a ClusterQueue judged against its service-level objective (``QueueSLO``).

A day is judged from the queue's figures of that day (``servicelevels.figures.levels`` with
``step="day"``): the objective's statistic of the day's waits (p50, p90, p95 nearest rank, or
the maximum), over the admissions whose ``admitted_at`` falls in the day, is

- ``met`` when it is at or under ``max_wait_seconds``;
- ``breached`` when it is over;
- ``not judged`` when the day had fewer admissions than ``min_admissions`` (a day with no
  admission at all included), or the objective is disabled.

A day still under way is judged on what it has so far and marked ``partial``; the alert rule
(``alerts.slo``) only takes complete days.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from core.timewindows import floor_time
from servicelevels.figures import LevelRow, levels
from servicelevels.models import QueueSLO

MET = "met"
BREACHED = "breached"
NOT_JUDGED = "not_judged"
DAY = timedelta(days=1)

STATUS_LABELS = {MET: "met", BREACHED: "breached", NOT_JUDGED: "not judged"}


@dataclass(frozen=True)
class DayJudgement:
    """One UTC day of one queue against its objective."""

    day: datetime  # the day's start (UTC midnight)
    status: str  # MET, BREACHED or NOT_JUDGED
    admissions: int
    value: float | None  # the statistic of the day's waits (s); None without admissions
    target: float  # max_wait_seconds
    statistic: str
    partial: bool = False  # the day is still under way

    @property
    def end(self) -> datetime:
        return self.day + DAY

    @property
    def label(self) -> str:
        return STATUS_LABELS[self.status]


def statistic_of(row: LevelRow | None, statistic: str) -> float | None:
    if row is None:
        return None
    name = "wait_seconds_max" if statistic == "max" else f"wait_seconds_{statistic}"
    value = getattr(row, name)
    return None if value is None else float(value)


def judge(slo: QueueSLO, row: LevelRow | None, day: datetime, now: datetime) -> DayJudgement:
    """The day's judgement from its figures row (None: no record that day)."""
    admissions = row.admissions if row is not None else 0
    value = statistic_of(row, slo.statistic)
    if not slo.enabled or admissions < max(slo.min_admissions, 1) or value is None:
        status = NOT_JUDGED
    elif value <= slo.max_wait_seconds:
        status = MET
    else:
        status = BREACHED
    return DayJudgement(
        day=day,
        status=status,
        admissions=admissions,
        value=value,
        target=float(slo.max_wait_seconds),
        statistic=slo.statistic,
        partial=day + DAY > now,
    )


def judge_days(slo: QueueSLO, start: datetime, end: datetime, now: datetime) -> list[DayJudgement]:
    """Every UTC day that meets ``(start, end]``, oldest first, each judged on its whole day
    (clipped at ``now`` for the day under way); days after ``now`` are left out."""
    queue = slo.cluster_queue
    first = floor_time(start, int(DAY.total_seconds()))
    last = min(end, now)
    if last <= first:
        return []
    days: list[datetime] = []
    moment = first
    while moment < last:
        days.append(moment)
        moment += DAY
    until = min(days[-1] + DAY, now)
    rows = {
        row.period_start: row
        for row in levels(
            first, until, step="day", cluster=queue.cluster.name, cluster_queue=queue.name
        )
        if row.group == queue.name
    }
    return [judge(slo, rows.get(day), day, now) for day in days]


def latest_status(slo: QueueSLO, now: datetime) -> DayJudgement | None:
    """The newest complete day that was judged (met or breached) in the last week, if any."""
    days = judge_days(slo, now - 7 * DAY, floor_time(now, int(DAY.total_seconds())), now)
    judged = [day for day in days if day.status != NOT_JUDGED and not day.partial]
    return judged[-1] if judged else None
