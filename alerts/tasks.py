"""Celery tasks of the alerts app: the evaluation of collected windows, out of collection.

``request_evaluation`` is what collection calls once its windows are committed (through
``alerts.hooks``); ``evaluate_alerts`` is the task it publishes (``alerts.dispatch`` keeps the
pending windows, coalesces requests and makes sure one task at a time evaluates a cluster).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from alerts import dispatch
from alerts.dispatch import PendingRange
from alerts.evaluate import evaluate_range
from alerts.overprovisioned import evaluate_serving
from alerts.slo import evaluate_queue_slos as judge_queue_slos
from core.deadlines import Deadline
from fleet.leases import holder_identity
from fleet.models import Cluster
from ledger.models import UsageWindow

logger = logging.getLogger(__name__)

# A taken range is evaluated in slices this long, the deadline checked between them: a slice
# of 6 hours of 60 s windows is a few seconds of evaluation on the bench's fleet
# (bench/alerts.py: a churning week in 99 s), so a slice never runs far past the deadline.
EVALUATION_SLICE = timedelta(hours=6)
# Celery's soft time limit falls this long after the deadline (a slice under way gets to end),
# the hard one after that again; a claim outlives the hard limit, so it never lapses under a
# running task, and a killed worker's claim lapses soon after.
SOFT_LIMIT_AFTER = 30
HARD_LIMIT_AFTER = 60
CLAIM_AFTER = 90
# Transient database errors are retried with backoff, this many times.
MAX_RETRIES = 5
# The evaluation tasks' time limits and retries of transient database errors.
LIMITS: dict[str, Any] = {
    "soft_time_limit": settings.GPULEDGER_ALERTS_DEADLINE_SECONDS + SOFT_LIMIT_AFTER,
    "time_limit": settings.GPULEDGER_ALERTS_DEADLINE_SECONDS + HARD_LIMIT_AFTER,
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "max_retries": MAX_RETRIES,
}


def _deadline_seconds() -> int:
    return int(settings.GPULEDGER_ALERTS_DEADLINE_SECONDS)


def request_evaluation(cluster_id: int, start: datetime, end: datetime, live: bool) -> bool:
    """Queue the windows ending in ``(start, end]`` for evaluation; True when a task was
    published (none was waiting for the cluster). A publish that fails is logged: the windows
    stay pending and the next request publishes again."""
    if not dispatch.merge(cluster_id, PendingRange(start, end, live)):
        return False
    try:
        evaluate_alerts.apply_async(args=[cluster_id, start.isoformat(), end.isoformat(), live])
    except Exception:
        dispatch.unqueue(cluster_id)
        logger.exception("cluster %s: queueing the alert evaluation failed", cluster_id)
        return False
    return True


def _through(cluster_id: int, end: datetime) -> datetime:
    """Where the evaluation of windows written up to ``end`` has to go on to: the newest
    stored window.

    Windows written after others were evaluated (a re-collected hole, a backfill before live
    history) can open an episode that the already-evaluated windows after them would end: it
    must meet what those windows say (resolve where its condition no longer held, join the
    episode of its subject that covers them) and not be joined across them to a later one.
    Windows already evaluated are skipped per subject (``EpisodeBook``); at the live head there
    is no window after ``end`` and this is one index probe."""
    newest = (
        UsageWindow.objects.filter(cluster_id=cluster_id, window_end__gt=end)
        .order_by("-window_end")
        .values_list("window_end", flat=True)
        .first()
    )
    return end if newest is None else newest


def _moment(value: Any) -> datetime | None:
    moment = parse_datetime(value) if isinstance(value, str) else None
    return moment if moment is not None and moment.tzinfo is not None else None


@shared_task(bind=True, name="alerts.tasks.evaluate_alerts", **LIMITS)
def evaluate_alerts(
    self: Task,
    cluster_id: int,
    start: str | None = None,
    end: str | None = None,
    live: bool = True,
) -> dict[str, Any]:
    """Evaluate the cluster's pending windows, the range ``(start, end]`` among them, within
    the deadline (no range: only what is pending).

    The range is first added to the pending windows, so it is never lost: when another task
    holds the cluster, that one evaluates it before letting go, and this one looks again once
    the holder's claim has run out (in case the holder died). Windows left at the deadline are
    queued for a follow-up task. Re-running a range changes nothing (``evaluate_range``)."""
    if not Cluster.objects.filter(pk=cluster_id).exists():
        logger.warning("alert evaluation: cluster %s is gone, skipped", cluster_id)
        return {"cluster": cluster_id, "skipped": "no such cluster"}
    if start is not None or end is not None:
        first, last = _moment(start), _moment(end)
        if first is None or last is None or last <= first:
            logger.error("alert evaluation: bad range (%r, %r) skipped", start, end)
            return {"cluster": cluster_id, "skipped": "bad range"}
        dispatch.merge(cluster_id, PendingRange(first, last, bool(live)))
    holder = holder_identity("alerts")
    seconds = _deadline_seconds()
    if not dispatch.claim(cluster_id, holder, seconds + CLAIM_AFTER):
        return _wait_for_holder(self, cluster_id)
    deadline = Deadline(
        seconds, "the alert evaluation deadline", "GPULEDGER_ALERTS_DEADLINE_SECONDS"
    )
    return _drain(cluster_id, holder, deadline)


def _follow_up(cluster_id: int, countdown: float = 0.0) -> None:
    """A task for what is pending (nothing of its own to add)."""
    evaluate_alerts.apply_async(args=[cluster_id], countdown=countdown)


def _wait_for_holder(self: Task, cluster_id: int) -> dict[str, Any]:
    until = dispatch.claimed_until(cluster_id)
    logger.info(
        "cluster %s: alerts are being evaluated (claimed until %s); range left pending",
        cluster_id,
        until,
    )
    if not self.request.is_eager:
        left = 0.0 if until is None else (until - timezone.now()).total_seconds()
        _follow_up(cluster_id, countdown=max(1.0, left + 1.0))
    return {"cluster": cluster_id, "waiting": True}


def _drain(cluster_id: int, holder: str, deadline: Deadline) -> dict[str, Any]:
    """Take and evaluate pending windows until none is left or the deadline is past."""
    done = {
        "cluster": cluster_id,
        "slices": 0,
        "windows": 0,
        "created": 0,
        "updated": 0,
        "deleted": 0,
    }
    while True:
        taken = dispatch.take(cluster_id, holder)
        if taken is None:
            if dispatch.release(cluster_id, holder) or not dispatch.holds(cluster_id, holder):
                return done
            continue
        try:
            rest = _evaluate(cluster_id, holder, taken, deadline, done)
        except (OperationalError, InterfaceError):
            # The windows were given back; the retry (autoretry_for) finds them pending.
            dispatch.release(cluster_id, holder, handing_over=True)
            raise
        if rest is not None:
            dispatch.give_back(cluster_id, rest)
            dispatch.release(cluster_id, holder, handing_over=True)
            _follow_up(cluster_id)
            logger.warning(
                "cluster %s: %s passed; windows in (%s, %s] left to a follow-up task",
                cluster_id,
                deadline,
                rest.start.isoformat(),
                rest.end.isoformat(),
            )
            done["deferred"] = 1
            return done


def _evaluate(
    cluster_id: int, holder: str, taken: PendingRange, deadline: Deadline, done: dict[str, Any]
) -> PendingRange | None:
    """Evaluate ``taken`` slice by slice; what is left when the deadline passes is returned
    (the task's first slice always runs, so every task moves on). A transient database error
    gives the rest back and is raised for a retry; any other error is logged and its slice
    skipped, as collection always did (one bad window must not block the cluster's alerts), and
    so is a first slice that alone outlasts the soft time limit (it would every time)."""
    end = _through(cluster_id, taken.end)
    cursor = taken.start
    while cursor < end:
        if done["slices"] and deadline.expired():
            return PendingRange(cursor, end, taken.live)
        done["slices"] += 1
        upto = min(end, cursor + EVALUATION_SLICE)
        try:
            result = evaluate_range(cluster_id, cursor, upto, live=taken.live)
        except SoftTimeLimitExceeded:
            if done["slices"] > 1:
                # Past the deadline inside a slice: it rolled back, and waits with the rest.
                return PendingRange(cursor, end, taken.live)
            logger.error(
                "cluster %s: evaluating alerts for (%s, %s] outlasted %s; skipped",
                cluster_id,
                cursor.isoformat(),
                upto.isoformat(),
                deadline,
            )
        except (OperationalError, InterfaceError):
            # Transient: the slice rolled back; it and the rest wait again.
            dispatch.give_back(cluster_id, PendingRange(cursor, end, taken.live))
            raise
        except Exception:
            logger.exception(
                "cluster %s: evaluating alerts for (%s, %s] failed; skipped (manage.py "
                "evaluate_alerts catches up)",
                cluster_id,
                cursor.isoformat(),
                upto.isoformat(),
            )
        else:
            for key in ("windows", "created", "updated", "deleted"):
                done[key] += getattr(result, key)
        dispatch.evaluated(cluster_id, holder, upto, through=end)
        cursor = upto
    return None


@shared_task(name="alerts.tasks.evaluate_queue_slos", ignore_result=True)
def evaluate_queue_slos() -> dict[str, int]:
    """Judge the queues' service-level objectives per complete day (``alerts.slo``): hourly from
    beat; idempotent (a day an episode has seen is skipped)."""
    return judge_queue_slos().as_dict()


@shared_task(name="alerts.tasks.evaluate_serving_overprovisioned", ignore_result=True, **LIMITS)
def evaluate_serving_overprovisioned() -> dict[str, Any]:
    """Judge the serving deployments' complete days (``alerts.overprovisioned``): hourly from
    beat, out of the serving collector; idempotent (a day an episode has seen is skipped), and
    a run that reaches the deadline leaves the remaining deployments to the next one."""
    deadline = Deadline(
        _deadline_seconds(),
        "the serving over-provisioning deadline",
        "GPULEDGER_ALERTS_DEADLINE_SECONDS",
    )
    return evaluate_serving(deadline=deadline).as_dict()
