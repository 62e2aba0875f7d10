"""Notifications to a real Prometheus Alertmanager (Debian's prometheus-alertmanager) on loopback.

With CI=true a missing binary fails these tests; elsewhere it skips them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from core.deadlines import Deadline
from notifications.models import Delivery, Receiver, Route
from notifications.notify import run_notifications

pytestmark = pytest.mark.django_db


def run() -> None:
    run_notifications(timezone.now(), Deadline(30, "test deadline"))


def parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)


@pytest.fixture
def am_receiver(alertmanager) -> Receiver:
    receiver = Receiver.objects.create(name="am", kind="alertmanager", targets=alertmanager.url)
    Route.objects.create(receiver=receiver)
    return receiver


def test_a_fired_episode_appears_in_alertmanager_with_its_labels_and_link(
    alertmanager, am_receiver, make_episode, settings
):
    settings.GPULEDGER_BASE_URL = "https://ledger.example.test"
    settings.GPULEDGER_ALERTMANAGER_RESEND_SECONDS = 60
    settings.GPULEDGER_ALERTMANAGER_RESENDS_AHEAD = 3
    episode = make_episode()
    before = timezone.now()

    run()

    assert Delivery.objects.get().outcome == "sent"
    alerts = alertmanager.alerts()
    assert len(alerts) == 1
    alert = alerts[0]
    assert alert["labels"] == {
        "alertname": "GpuIdleWorkload",
        "severity": "warning",
        "cluster": "east",
        "team": "vision",
        "cluster_queue": "vision-cq",
        "namespace": "ml",
        "workload": "train",
    }
    assert alert["status"]["state"] == "active"
    assert alert["generatorURL"] == f"https://ledger.example.test/alerts/{episode.pk}/"
    assert alert["annotations"]["summary"] == "Workload ml/train: 4 of 4 GPUs idle for 60 min."
    assert "description" in alert["annotations"]
    assert parse(alert["startsAt"]) == episode.fired_at
    # endsAt three resend intervals ahead of the send.
    ends = parse(alert["endsAt"])
    assert before + timedelta(seconds=170) <= ends <= timezone.now() + timedelta(seconds=181)


def test_a_resolved_episode_disappears_from_alertmanager(alertmanager, am_receiver, make_episode):
    episode = make_episode()
    run()
    assert len(alertmanager.alerts()) == 1

    episode.resolved_at = timezone.now().replace(microsecond=0)
    episode.save()
    run()

    assert Delivery.objects.filter(event="resolved", outcome="sent").count() == 1
    assert alertmanager.alerts() == []
    # Asked for everything, Alertmanager no longer has it as active either.
    everything = alertmanager.alerts(active="true", silenced="true", inhibited="true")
    assert [a for a in everything if a["status"]["state"] == "active"] == []


def test_an_escalation_ends_the_warning_alert_and_raises_the_critical_one(
    alertmanager, am_receiver, make_episode
):
    episode = make_episode()
    run()
    episode.severity = "critical"
    episode.escalated_at = timezone.now().replace(microsecond=0)
    episode.save()

    run()

    alerts = alertmanager.alerts()
    assert [a["labels"]["severity"] for a in alerts] == ["critical"]
    assert parse(alerts[0]["startsAt"]) == episode.escalated_at


def test_open_alerts_are_re_sent_with_a_later_ends_at(
    alertmanager, am_receiver, make_episode, settings
):
    settings.GPULEDGER_ALERTMANAGER_RESEND_SECONDS = 10
    settings.GPULEDGER_ALERTMANAGER_RESENDS_AHEAD = 3
    make_episode()
    run()
    first_ends = parse(alertmanager.alerts()[0]["endsAt"])
    # As if the last refresh was an interval ago.
    Receiver.objects.filter(pk=am_receiver.pk).update(
        last_refresh_at=timezone.now() - timedelta(seconds=11)
    )

    run()

    am_receiver.refresh_from_db()
    assert (am_receiver.last_refresh_alerts, am_receiver.last_refresh_error) == (1, "")
    alerts = alertmanager.alerts()
    assert len(alerts) == 1
    assert parse(alerts[0]["endsAt"]) > first_ends


def test_an_unreachable_alertmanager_is_retried_and_says_which(alertmanager, make_episode):
    from tests.prometheus_server import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    receiver = Receiver.objects.create(
        name="two", kind="alertmanager", targets=f"{alertmanager.url}\n{dead}"
    )
    Route.objects.create(receiver=receiver)
    make_episode()

    run()

    delivery = Delivery.objects.get()
    assert delivery.outcome == "retrying"
    assert dead in delivery.error
    # The reachable one has it all the same.
    assert len(alertmanager.alerts()) == 1
