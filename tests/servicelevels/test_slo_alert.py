"""The ``queue_slo_breached`` rule: an episode opened on a breached day, resolved on a met day,
through a real notification route to a webhook on loopback."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from alerts.choices import Rule
from alerts.episodes import EpisodeBook
from alerts.models import Episode, Silence
from alerts.slo import evaluate_queue_slos
from core.deadlines import Deadline
from notifications.models import Receiver, Route
from notifications.notify import run_notifications
from servicelevels.models import QueueSLO
from tests.servicelevels.helpers import admitted, queue

D1 = datetime(2026, 11, 2, tzinfo=UTC)
DAY = timedelta(days=1)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def day_of_waits(cq, day: datetime, waits: list[float], tag: str) -> None:
    for n, wait in enumerate(waits):
        admitted(cq, f"{tag}-{n}", day + timedelta(hours=1 + n), minutes(wait))


@pytest.fixture
def slo_queue(cluster, settings):
    settings.GPULEDGER_ALERT_QUEUE_SLO_DAYS = 1
    settings.GPULEDGER_ALERT_QUEUE_SLO_LOOKBACK_DAYS = 3  # from day 1 on day 4
    cq = queue(cluster)
    QueueSLO.objects.create(cluster_queue=cq, statistic="p95", max_wait_seconds=1800)
    # Day 1 met (p95 10 min); day 2 breached (p95 = rank 3 of 5, 10, 45 → 45 min); day 3 not
    # judged (nothing admitted); day 4 breached (90 min); day 5 met (5 min).
    day_of_waits(cq, D1, [5, 10], "d1")
    day_of_waits(cq, D1 + DAY, [5, 10, 45], "d2")
    day_of_waits(cq, D1 + 3 * DAY, [90], "d4")
    day_of_waits(cq, D1 + 4 * DAY, [5], "d5")
    return cq


def notify(now: datetime) -> None:
    run_notifications(now, Deadline(30, "test deadline"))


def test_an_episode_opens_on_a_breached_day_and_resolves_on_a_met_day(
    slo_queue,
    webhook_server,
    settings,
):
    settings.GPULEDGER_NOTIFY_LOOKBACK_HOURS = 24 * 30
    receiver = Receiver.objects.create(name="hook", kind="webhook", targets=webhook_server.url)
    Route.objects.create(receiver=receiver, rules=[Rule.QUEUE_SLO_BREACHED])
    other = Receiver.objects.create(name="idle-only", kind="webhook", targets=webhook_server.url)
    Route.objects.create(receiver=other, rules=[Rule.IDLE_WORKLOAD])

    # Day 4, midday: days 1-3 are complete; day 2 was breached, day 3 not judged.
    first = evaluate_queue_slos(D1 + 3 * DAY + timedelta(hours=12))
    assert (first.created, first.days) == (1, 3)
    episode = Episode.objects.get(rule=Rule.QUEUE_SLO_BREACHED)
    assert episode.subject_key == "cluster_queue:test/batch"
    assert episode.started_at == D1 + DAY
    assert episode.fired_at == D1 + 2 * DAY  # the end of the breached day
    assert episode.resolved_at is None
    assert episode.evaluated_until == D1 + 3 * DAY  # day 3 seen, not judged
    assert episode.cluster_queue == slo_queue and episode.team == slo_queue.team
    assert episode.evidence["breached_days"] == 1
    assert episode.evidence["worst_seconds"] == 45 * 60
    assert episode.summary == (
        "ClusterQueue batch: p95 wait over its objective of 30 min (worst 45 min) on 1 day."
    )

    notify(D1 + 3 * DAY + timedelta(hours=12))
    assert len(webhook_server.received) == 1  # only the route of this rule
    fired = json.loads(webhook_server.received[0].body)
    assert fired["event"] == "fired"
    assert fired["episode"]["rule"] == "queue_slo_breached"
    assert fired["episode"]["cluster_queue"] == "batch"

    # Day 6: day 4 breached again (the same episode), day 5 met: resolved at day 5's start.
    later = D1 + 5 * DAY + timedelta(minutes=30)
    second = evaluate_queue_slos(later)
    assert (second.created, second.updated, second.days) == (0, 1, 2)
    episode.refresh_from_db()
    assert episode.resolved_at == D1 + 4 * DAY
    assert episode.evaluated_until == D1 + 5 * DAY
    assert episode.held_seconds == 2 * 86400
    assert episode.evidence["breached_days"] == 2
    assert [d["status"] for d in episode.evidence["days"]] == [
        "breached",
        "not_judged",
        "breached",
        "met",
    ]

    notify(later)
    events = [json.loads(r.body)["event"] for r in webhook_server.received]
    assert events == ["fired", "resolved"]

    # Again: every day was seen, nothing changes.
    again = evaluate_queue_slos(later + timedelta(hours=1))
    assert (again.created, again.updated, again.deleted, again.days) == (0, 0, 0, 0)
    assert Episode.objects.count() == 1


def test_a_breach_shorter_than_its_duration_is_never_an_alert(slo_queue, settings):
    settings.GPULEDGER_ALERT_QUEUE_SLO_DAYS = 2
    evaluate_queue_slos(D1 + 2 * DAY + timedelta(hours=1))  # day 2 breached: pending
    pending = Episode.objects.get()
    assert pending.fired_at is None
    # Day 3 not judged, day 4 breached again: the second breached day fires it.
    evaluate_queue_slos(D1 + 4 * DAY + timedelta(hours=1))
    pending.refresh_from_db()
    assert pending.fired_at == D1 + 4 * DAY


def test_a_pending_episode_met_the_next_day_is_dropped(cluster, settings):
    settings.GPULEDGER_ALERT_QUEUE_SLO_DAYS = 2
    cq = queue(cluster)
    QueueSLO.objects.create(cluster_queue=cq, statistic="max", max_wait_seconds=600)
    day_of_waits(cq, D1, [30], "a")  # breached
    day_of_waits(cq, D1 + DAY, [1], "b")  # met
    evaluate_queue_slos(D1 + DAY + timedelta(hours=3))
    assert Episode.objects.get().fired_at is None
    result = evaluate_queue_slos(D1 + 2 * DAY + timedelta(hours=3))
    assert result.deleted == 1
    assert not Episode.objects.exists()


def test_silences_apply_and_the_window_evaluation_leaves_the_rule_alone(slo_queue):
    Silence.objects.create(
        rule=Rule.QUEUE_SLO_BREACHED, cluster_queue=slo_queue, ends_at=D1 + 30 * DAY
    )
    evaluate_queue_slos(D1 + 3 * DAY + timedelta(hours=1))
    episode = Episode.objects.get()
    assert episode.silenced_until == D1 + 30 * DAY
    # The window rules' book neither loads nor resolves it.
    book = EpisodeBook(slo_queue.cluster, D1, live=True)
    assert not any(rule == Rule.QUEUE_SLO_BREACHED for rule, _key in book.by_key)


def test_the_alert_pages_show_a_queue_slo_episode(slo_queue, django_user_model):
    from django.test import Client

    evaluate_queue_slos(D1 + 3 * DAY + timedelta(hours=1))
    episode = Episode.objects.get()
    staff = django_user_model.objects.create_user("staff", password="x", is_staff=True)
    client = Client()
    client.force_login(staff)
    start, end = "2026-11-01T00:00:00Z", "2026-11-06T00:00:00Z"
    listing = client.get(f"/alerts/?start={start}&end={end}&state=all")
    assert listing.status_code == 200
    assert "Queue SLO breached" in listing.content.decode()
    detail = client.get(f"/alerts/{episode.pk}/")
    assert detail.status_code == 200
    assert "p95 wait over its objective of 30 min" in detail.content.decode()
    chart = client.get(f"/alerts/{episode.pk}/charts/evidence.json")
    assert chart.status_code == 200
