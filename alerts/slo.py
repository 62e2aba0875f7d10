"""The ``queue_slo_breached`` rule: episodes of a ClusterQueue missing its wait objective
(docs/architecture.md "Hoarding alerts").

The rule is judged per complete UTC day, not per collection window: each day of an enabled
``QueueSLO`` is met, breached or not judged (``servicelevels.objectives``). Per queue, oldest day
first, from the newest day an episode of the queue has seen (``evaluated_until``) or, the first
time, from ``GPULEDGER_ALERT_QUEUE_SLO_LOOKBACK_DAYS`` back:

- a breached day opens an episode at the day's start (pending), or extends the open one; the
  episode fires at the end of its ``GPULEDGER_ALERT_QUEUE_SLO_DAYS``-th breached day;
- a met day resolves the open episode at the day's start (the first day the objective held
  again), or drops it if it never fired: it was never an alert;
- a day not judged (too few admissions) leaves the open episode as it is but for the days it
  has seen, like a collection gap of the window rules.

The episodes are ordinary ``Episode`` rows: the Alerts pages, silences, exemptions of the
ClusterQueue and the notification routes (``notifications``) take them like any other. Running a
day twice changes nothing: a day an episode of the queue has seen is skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts.choices import Rule, Severity
from alerts.daily import DAY, EVIDENCE_DAYS, save_day_episode
from alerts.exemptions import Subject
from alerts.models import Episode
from core.timewindows import floor_time
from servicelevels.models import QueueSLO
from servicelevels.objectives import BREACHED, MET, DayJudgement, judge_days

logger = logging.getLogger(__name__)


@dataclass
class SloEvaluation:
    queues: int = 0
    days: int = 0
    created: int = 0
    updated: int = 0
    deleted: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "queues": self.queues,
            "days": self.days,
            "created": self.created,
            "updated": self.updated,
            "deleted": self.deleted,
        }


def subject_key(cluster: str, queue: str) -> str:
    return f"cluster_queue:{cluster}/{queue}"


def evaluate_queue_slos(now: datetime | None = None) -> SloEvaluation:
    """Judge every enabled objective's complete days not seen yet and move its episodes on."""
    now = now or timezone.now()
    result = SloEvaluation()
    slos = QueueSLO.objects.filter(enabled=True).select_related(
        "cluster_queue", "cluster_queue__cluster"
    )
    for slo in slos.order_by("pk"):
        result.queues += 1
        with transaction.atomic():
            _evaluate_queue(slo, now, result)
    if result.created or result.updated or result.deleted:
        logger.info(
            "queue SLOs: %d queues, %d days judged: %d episodes created, %d updated, %d dropped",
            result.queues,
            result.days,
            result.created,
            result.updated,
            result.deleted,
        )
    return result


def _evaluate_queue(slo: QueueSLO, now: datetime, result: SloEvaluation) -> None:
    queue = slo.cluster_queue
    key = subject_key(queue.cluster.name, queue.name)
    today = floor_time(now, int(DAY.total_seconds()))
    episodes = Episode.objects.select_for_update().filter(
        rule=Rule.QUEUE_SLO_BREACHED, subject_key=key
    )
    newest = episodes.order_by("-evaluated_until").first()
    lookback = settings.GPULEDGER_ALERT_QUEUE_SLO_LOOKBACK_DAYS
    start = newest.evaluated_until if newest is not None else today - lookback * DAY
    start = max(floor_time(start, int(DAY.total_seconds())), today - lookback * DAY)
    if start >= today:
        return
    days = [day for day in judge_days(slo, start, today, now) if not day.partial]
    active = episodes.filter(resolved_at__isnull=True).first()
    touched = False
    for day in days:
        if newest is not None and day.end <= newest.evaluated_until:
            continue
        result.days += 1
        if day.status == BREACHED:
            if active is None:
                active = _open(slo, key, day)
            _extend(active, day)
            touched = True
        elif day.status == MET:
            if active is None:
                continue
            if active.fired_at is None:
                if active.pk is not None:
                    active.delete()
                    result.deleted += 1
                active, touched = None, False
                continue
            active.resolved_at = day.day
            _note(active, day)
            _save(active, now, result)
            active, touched = None, False
        elif active is not None:
            _note(active, day)
            touched = True
    if active is not None and touched:
        _save(active, now, result)


def _open(slo: QueueSLO, key: str, day: DayJudgement) -> Episode:
    queue = slo.cluster_queue
    return Episode(
        rule=Rule.QUEUE_SLO_BREACHED,
        severity=Severity.WARNING,
        cluster=queue.cluster,
        team_id=queue.team_id,
        cluster_queue=queue,
        subject_key=key,
        started_at=day.day,
        evaluated_until=day.day,
        detected_live=True,
        evidence={
            "statistic": slo.statistic,
            "target_seconds": slo.max_wait_seconds,
            "min_admissions": slo.min_admissions,
            "breached_days": 0,
            "days": [],
        },
    )


def _extend(episode: Episode, day: DayJudgement) -> None:
    episode.held_seconds += int(DAY.total_seconds())
    episode.last_held_at = day.end
    evidence = episode.evidence
    evidence["breached_days"] = int(evidence.get("breached_days", 0)) + 1
    fire_after = settings.GPULEDGER_ALERT_QUEUE_SLO_DAYS
    evidence["fire_after_days"] = fire_after
    if episode.fired_at is None and evidence["breached_days"] >= fire_after:
        episode.fired_at = day.end
    worst = evidence.get("worst_seconds")
    if day.value is not None and (worst is None or day.value > worst):
        evidence["worst_seconds"] = day.value
    _note(episode, day)


def _note(episode: Episode, day: DayJudgement) -> None:
    """The day is the episode's newest seen, and listed in its evidence."""
    episode.evaluated_until = day.end
    entry: dict[str, Any] = {
        "day": day.day.date().isoformat(),
        "status": day.status,
        "admissions": day.admissions,
        "value_seconds": day.value,
    }
    days = [item for item in episode.evidence.get("days", []) if item.get("day") != entry["day"]]
    episode.evidence["days"] = [*days, entry][-EVIDENCE_DAYS:]


def _save(episode: Episode, now: datetime, result: SloEvaluation) -> None:
    """Exemptions of the queue and silences apply as to every rule (``alerts.daily``)."""
    if save_day_episode(episode, Subject(cluster_queue_id=episode.cluster_queue_id), now):
        result.created += 1
    else:
        result.updated += 1
