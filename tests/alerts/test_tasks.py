"""``alerts.tasks.evaluate_alerts``: evaluates the pending windows once, within its deadline,
one task per cluster at a time, and retries transient database errors."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from alerts import dispatch, tasks
from alerts.choices import Rule
from alerts.dispatch import PendingRange
from alerts.evaluate import EvaluationResult
from alerts.models import AlertEvaluation
from alerts.tasks import evaluate_alerts, request_evaluation
from tests.alerts.conftest import World, at

pytestmark = pytest.mark.django_db

IDLE = 0.002


def _idle_gang(world: World, minutes: int = 200) -> None:
    gang = world.gang(world.workload("idle", 2))
    world.run(gang, range(minutes), IDLE)
    world.store()


def _run(world: World, start: float, end: float, live: bool = True) -> dict:
    return evaluate_alerts.apply(
        args=[world.cluster.pk, at(start).isoformat(), at(end).isoformat(), live]
    ).get()


def test_the_task_evaluates_its_range_and_lets_go(world: World):
    _idle_gang(world)

    answer = _run(world, 0, 200)

    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    # Idle from minute 0: warning after 60 min, critical after 120, open at minute 200.
    assert (episode.started_at, episode.fired_at, episode.escalated_at) == (at(0), at(60), at(120))
    assert episode.resolved_at is None and episode.detected_live
    assert (answer["windows"], answer["created"]) == (200, 1)
    row = AlertEvaluation.objects.get(cluster=world.cluster)
    assert (row.pending_start, row.claimed_by, row.claimed_until) == (None, "", None)
    assert row.evaluated_until == at(200)


def test_running_a_range_again_changes_nothing(world: World):
    _idle_gang(world)
    _run(world, 0, 200)
    before = list(world.episodes()[0].__class__.objects.values_list("pk", "updated_at"))

    answer = _run(world, 0, 200)

    assert (answer["created"], answer["updated"], answer["deleted"]) == (0, 0, 0)
    assert list(world.episodes()[0].__class__.objects.values_list("pk", "updated_at")) == before


def test_at_the_deadline_the_rest_is_left_to_a_follow_up(world: World, settings, monkeypatch):
    _idle_gang(world)
    settings.GPULEDGER_ALERTS_DEADLINE_SECONDS = 0
    monkeypatch.setattr(tasks, "EVALUATION_SLICE", timedelta(minutes=50))
    follow_ups = []
    monkeypatch.setattr(
        tasks, "_follow_up", lambda cluster_id, countdown=0.0: follow_ups.append(cluster_id)
    )

    answer = _run(world, 0, 200)

    # One slice (minutes 0-49), then the deadline: the rest waits for the follow-up.
    assert answer["windows"] == 50 and answer["deferred"] == 1
    assert follow_ups == [world.cluster.pk]
    row = AlertEvaluation.objects.get(cluster=world.cluster)
    assert (row.pending_start, row.pending_end, row.claimed_by) == (at(50), at(200), "")
    assert row.queued_at is not None
    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    assert episode.escalated_at is None

    # The follow-up (no range of its own) takes what is pending.
    settings.GPULEDGER_ALERTS_DEADLINE_SECONDS = 600
    evaluate_alerts.apply(args=[world.cluster.pk]).get()
    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    assert (episode.fired_at, episode.escalated_at) == (at(60), at(120))
    assert AlertEvaluation.objects.get(cluster=world.cluster).pending_start is None


def test_a_second_task_leaves_its_range_to_the_one_evaluating(world: World, monkeypatch):
    _idle_gang(world)
    assert dispatch.claim(world.cluster.pk, "first-worker", 600)
    calls = []
    monkeypatch.setattr(tasks, "evaluate_range", lambda *a, **kw: calls.append(a))

    answer = _run(world, 0, 200)

    # It evaluated nothing; its range waits, and the holder cannot let go before taking it.
    assert answer["waiting"] is True and calls == []
    assert not dispatch.release(world.cluster.pk, "first-worker")
    taken = dispatch.take(world.cluster.pk, "first-worker")
    assert taken == PendingRange(at(0), at(200), True)
    assert dispatch.release(world.cluster.pk, "first-worker")


def test_requests_while_a_task_waits_join_its_range(world: World, monkeypatch):
    published = []
    monkeypatch.setattr(evaluate_alerts, "apply_async", lambda **kw: published.append(kw["args"]))

    assert request_evaluation(world.cluster.pk, at(10), at(11), True)
    assert not request_evaluation(world.cluster.pk, at(0), at(5), False)
    assert not request_evaluation(world.cluster.pk, at(11), at(12), True)

    assert published == [[world.cluster.pk, at(10).isoformat(), at(11).isoformat(), True]]
    row = AlertEvaluation.objects.get(cluster=world.cluster)
    assert (row.pending_start, row.pending_end, row.pending_live) == (at(0), at(12), False)


def test_a_failed_publish_leaves_the_range_pending_for_the_next_request(world: World, monkeypatch):
    def broker_down(**kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(evaluate_alerts, "apply_async", broker_down)
    assert not request_evaluation(world.cluster.pk, at(0), at(1), True)
    published = []
    monkeypatch.setattr(evaluate_alerts, "apply_async", lambda **kw: published.append(kw["args"]))

    assert request_evaluation(world.cluster.pk, at(1), at(2), True)

    assert len(published) == 1
    row = AlertEvaluation.objects.get(cluster=world.cluster)
    assert (row.pending_start, row.pending_end) == (at(0), at(2))


def test_a_transient_database_error_is_retried(world: World, eager_celery, monkeypatch):
    _idle_gang(world)
    real = tasks.evaluate_range
    failures = [OperationalError("server closed the connection unexpectedly")]

    def flaky(*args, **kwargs):
        if failures:
            raise failures.pop()
        return real(*args, **kwargs)

    monkeypatch.setattr(tasks, "evaluate_range", flaky)

    evaluate_alerts.delay(world.cluster.pk, at(0).isoformat(), at(200).isoformat(), True)

    assert failures == []
    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    assert episode.escalated_at == at(120)
    row = AlertEvaluation.objects.get(cluster=world.cluster)
    assert (row.pending_start, row.claimed_by) == (None, "")


def test_a_bad_range_or_a_missing_cluster_is_skipped_with_a_reason(world: World):
    bad = evaluate_alerts.apply(args=[world.cluster.pk, "yesterday", at(1).isoformat()]).get()
    gone = evaluate_alerts.apply(args=[999_999, at(0).isoformat(), at(1).isoformat()]).get()

    assert bad["skipped"] == "bad range" and gone["skipped"] == "no such cluster"
    assert not AlertEvaluation.objects.filter(pending_start__isnull=False).exists()


@pytest.mark.django_db(transaction=True)
def test_two_tasks_at_once_never_evaluate_one_cluster_together(world: World, monkeypatch):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("two connections writing at once: PostgreSQL")
    inside, most, ranges = [0], [0], []
    lock = threading.Lock()

    def slow(cluster_id, start, end, **kwargs):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.5)
        with lock:
            inside[0] -= 1
            ranges.append((start, end))
        return EvaluationResult(cluster="c1")

    monkeypatch.setattr(tasks, "evaluate_range", slow)

    def task(start: int, end: int) -> None:
        try:
            _run(world, start, end)
        finally:
            connection.close()

    threads = [threading.Thread(target=task, args=span) for span in ((0, 60), (60, 120))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # One evaluated at a time; the one that found the cluster taken left its range pending,
    # and the holder evaluated it before letting go: both ranges, nothing skipped.
    assert most[0] == 1
    assert sorted(ranges) == [(at(0), at(60)), (at(60), at(120))] or sorted(ranges) == [
        (at(0), at(120))
    ]
    row = AlertEvaluation.objects.get(cluster=world.cluster)
    assert (row.pending_start, row.claimed_by) == (None, "")


def test_windows_a_killed_holder_had_taken_are_evaluated_by_the_next_task(world: World):
    _idle_gang(world)
    dispatch.merge(world.cluster.pk, PendingRange(at(0), at(200), True))
    # A holder whose claim has run out by now took the windows, then its worker was killed.
    an_hour_ago = timezone.now() - timedelta(hours=1)
    assert dispatch.claim(world.cluster.pk, "killed-worker", 60, now=an_hour_ago)
    assert dispatch.take(world.cluster.pk, "killed-worker") == PendingRange(at(0), at(200), True)
    assert AlertEvaluation.objects.get(cluster=world.cluster).pending_start is None

    answer = evaluate_alerts.apply(args=[world.cluster.pk]).get()

    assert answer["windows"] == 200
    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    assert (episode.fired_at, episode.escalated_at) == (at(60), at(120))
    row = AlertEvaluation.objects.get(cluster=world.cluster)
    assert (row.pending_start, row.taken_start, row.claimed_by) == (None, None, "")
