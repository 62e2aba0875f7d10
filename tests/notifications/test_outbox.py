"""The outbox scanner: which deliveries episodes get, and never twice."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.models import Silence
from notifications.models import Delivery, Receiver, Route
from notifications.outbox import scan

pytestmark = pytest.mark.django_db


def events(episode=None, receiver=None) -> list[tuple[str, int, str]]:
    rows = Delivery.objects.all()
    if episode is not None:
        rows = rows.filter(episode=episode)
    if receiver is not None:
        rows = rows.filter(receiver=receiver)
    return sorted(rows.values_list("event", "sequence", "severity"))


@pytest.fixture
def hook(db) -> Receiver:
    receiver = Receiver.objects.create(name="hook", kind="webhook", targets="http://127.0.0.1:1/")
    Route.objects.create(receiver=receiver)
    return receiver


def test_a_fired_open_episode_gets_one_fired_delivery_however_often_it_is_scanned(
    make_episode, hook
):
    episode = make_episode()
    now = timezone.now()

    scan(now)
    scan(now)
    scan(now + timedelta(minutes=1))

    assert events(episode) == [("fired", 0, "warning")]
    delivery = Delivery.objects.get()
    assert delivery.receiver == hook
    assert delivery.outcome == "pending"
    assert delivery.next_attempt_at == now


def test_pending_exempt_and_silenced_episodes_get_nothing(make_episode, hook, world):
    now = timezone.now()
    pending = make_episode(fired_at=None)
    exempt = make_episode(exempt=True, exempt_reason="label gpuledger.io/hoarding-exempt=true")
    silenced = make_episode(silenced_until=now + timedelta(hours=1))
    by_silence = make_episode(namespace="muted")
    Silence.objects.create(namespace="muted", ends_at=now + timedelta(hours=1))

    scan(now)

    for episode in (pending, exempt, silenced, by_silence):
        assert events(episode) == []


def test_a_silence_that_ended_lets_the_fired_delivery_out(make_episode, hook):
    now = timezone.now()
    episode = make_episode(silenced_until=now + timedelta(minutes=10))
    scan(now)
    assert events(episode) == []

    scan(now + timedelta(minutes=11))

    assert events(episode) == [("fired", 0, "warning")]


def test_backfilled_episodes_resolved_when_written_never_notify(make_episode, hook):
    now = timezone.now()
    resolved_in_history = make_episode(
        detected_live=False,
        started_at=now - timedelta(days=3),
        fired_at=now - timedelta(days=3) + timedelta(hours=1),
        resolved_at=now - timedelta(days=3) + timedelta(hours=5),
    )
    # Even one that resolved minutes ago, if a backfill wrote it: it was never live to us.
    resolved_lately = make_episode(detected_live=False, resolved_at=now - timedelta(minutes=5))

    scan(now)

    assert events(resolved_in_history) == []
    assert events(resolved_lately) == []


def test_a_backfilled_episode_still_open_fires_and_later_resolves(make_episode, hook):
    now = timezone.now()
    episode = make_episode(detected_live=False)
    scan(now)
    assert events(episode) == [("fired", 0, "warning")]

    episode.resolved_at = now + timedelta(minutes=3)
    episode.save()
    scan(now + timedelta(minutes=4))

    assert events(episode) == [("fired", 0, "warning"), ("resolved", 0, "warning")]


def test_a_live_episode_that_resolved_between_scans_is_announced_and_closed(make_episode, hook):
    now = timezone.now()
    Receiver.objects.update(created_at=now - timedelta(hours=1))  # set up before it all
    episode = make_episode(resolved_at=now - timedelta(minutes=2))

    scan(now)

    assert events(episode) == [("fired", 0, "warning"), ("resolved", 0, "warning")]


def test_live_history_older_than_the_lookback_is_not_announced(make_episode, hook, settings):
    settings.GPULEDGER_NOTIFY_LOOKBACK_HOURS = 24
    now = timezone.now()
    old = make_episode(
        started_at=now - timedelta(days=3),
        fired_at=now - timedelta(days=3) + timedelta(hours=1),
        resolved_at=now - timedelta(days=2),
    )

    scan(now)

    assert events(old) == []


def test_an_escalation_is_sent_once_to_receivers_told_of_the_warning(make_episode, hook):
    now = timezone.now()
    episode = make_episode()
    scan(now)

    episode.severity = "critical"
    episode.escalated_at = now + timedelta(minutes=1)
    episode.save()
    scan(now + timedelta(minutes=2))
    scan(now + timedelta(minutes=3))

    assert events(episode) == [("escalated", 0, "critical"), ("fired", 0, "warning")]


def test_a_critical_only_route_hears_first_at_the_escalation_as_fired(make_episode, world):
    now = timezone.now()
    pager = Receiver.objects.create(name="pager", kind="slack", targets="http://127.0.0.1:1/")
    Route.objects.create(receiver=pager, severities=["critical"])
    episode = make_episode()
    scan(now)
    assert events(episode, pager) == []

    episode.severity = "critical"
    episode.escalated_at = now
    episode.save()
    scan(now + timedelta(minutes=1))

    assert events(episode, pager) == [("fired", 0, "critical")]


def test_routes_filter_by_rule_team_and_cluster(make_episode, world):
    from fleet.models import Cluster
    from quotas.models import Team

    now = timezone.now()
    other_team = Team.objects.create(name="nlp")
    other_cluster = Cluster.objects.create(name="west")
    ghosts = Receiver.objects.create(name="ghosts", kind="slack", targets="http://127.0.0.1:1/")
    Route.objects.create(receiver=ghosts, rules=["ghost_reservation"])
    vision = Receiver.objects.create(name="vision", kind="slack", targets="http://127.0.0.1:1/")
    Route.objects.create(receiver=vision).teams.add(world.team)
    nlp = Receiver.objects.create(name="nlp", kind="slack", targets="http://127.0.0.1:1/")
    Route.objects.create(receiver=nlp).teams.add(other_team)
    west = Receiver.objects.create(name="west", kind="slack", targets="http://127.0.0.1:1/")
    Route.objects.create(receiver=west).clusters.add(other_cluster)
    idle = make_episode()
    ghost = make_episode(rule="ghost_reservation")

    scan(now)

    assert events(idle, ghosts) == []
    assert events(ghost, ghosts) == [("fired", 0, "warning")]
    assert len(events(idle, vision)) == 1 and len(events(ghost, vision)) == 1
    assert events(receiver=nlp) == []
    assert events(receiver=west) == []


def test_renotify_after_the_interval_unless_acknowledged_and_never_to_alertmanager(
    make_episode, world, time_machine
):
    now = timezone.now()
    time_machine.move_to(now, tick=False)
    hook = Receiver.objects.create(name="hook", kind="webhook", targets="http://127.0.0.1:1/")
    Route.objects.create(receiver=hook, renotify_interval=timedelta(hours=24))
    # A second, shorter route to the same receiver: the shortest interval wins.
    Route.objects.create(receiver=hook, renotify_interval=timedelta(hours=12))
    am = Receiver.objects.create(name="am", kind="alertmanager", targets="http://127.0.0.1:1")
    Route.objects.create(receiver=am, renotify_interval=timedelta(hours=1))
    episode = make_episode()
    acked = make_episode(
        acknowledged_by=world.lead, acknowledged_at=now, ack_comment="on it, needed for eval"
    )
    scan(now)

    time_machine.move_to(now + timedelta(hours=11), tick=False)
    scan(timezone.now())
    assert events(episode, hook) == [("fired", 0, "warning")]

    time_machine.move_to(now + timedelta(hours=12, minutes=1), tick=False)
    scan(timezone.now())
    time_machine.move_to(now + timedelta(hours=12, minutes=2), tick=False)
    scan(timezone.now())
    assert events(episode, hook) == [("fired", 0, "warning"), ("renotify", 1, "warning")]
    assert events(acked, hook) == [("fired", 0, "warning")]
    assert events(episode, am) == [("fired", 0, "warning")]


def test_a_receiver_told_of_an_episode_hears_it_resolve_even_if_its_route_changed(
    make_episode, hook
):
    now = timezone.now()
    episode = make_episode()
    scan(now)
    Route.objects.filter(receiver=hook).update(rules=["ghost_reservation"])

    episode.resolved_at = now + timedelta(minutes=1)
    episode.save()
    scan(now + timedelta(minutes=2))

    assert events(episode) == [("fired", 0, "warning"), ("resolved", 0, "warning")]


def test_nothing_is_written_for_a_disabled_receiver_or_route(make_episode, hook):
    hook.enabled = False
    hook.save()
    episode = make_episode()

    scan(timezone.now())

    assert events(episode) == []
