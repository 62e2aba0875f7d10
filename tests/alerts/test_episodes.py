"""Episodes over re-evaluation, backfill, exemptions and silences."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.choices import WINDOW_RULES, ExemptionKind, Rule, Severity
from alerts.models import Episode, Exemption, Silence
from alerts.tasks import evaluate_alerts
from tests.alerts.conftest import World, at

pytestmark = pytest.mark.django_db

BUSY, IDLE = 0.5, 0.002

SNAPSHOT_FIELDS = (
    "rule",
    "subject_key",
    "severity",
    "started_at",
    "fired_at",
    "escalated_at",
    "resolved_at",
    "held_seconds",
    "idle_gpu_hours",
    "held_gpu_hours",
    "cost",
    "gpus",
    "gpu_uuids",
    "evidence",
    "summary",
    "workload_id",
    "cluster_queue_id",
    "team_id",
)


def snapshot(world: World) -> list[tuple]:
    return sorted(
        Episode.objects.filter(cluster=world.cluster).values_list(*SNAPSHOT_FIELDS),
        key=lambda row: (row[0], row[1], row[3]),
    )


def scenario(world: World) -> None:
    """Every rule at once: an idle gang that escalates and resolves, a ghost, a borrowing queue
    and a pod without series, over 200 minutes."""
    idle = world.gang(world.workload("idle", 2, pods=2))
    world.run(idle, range(200), lambda m, g: IDLE if 5 <= m < 160 else BUSY)
    world.gang(world.workload("ghost", 4, pods=4, reserved_at=at(20)))
    dark = world.gang(world.workload("dark", 1), node="node-2")
    world.run(dark, range(200), lambda m, g: None if 50 <= m < 90 else BUSY)
    world.sample(world.cq, range(100), borrowed=2, total=2)
    world.sample(world.lender, range(100), lent=2, nominal=4)


def test_evaluating_a_range_twice_changes_nothing(world: World):
    scenario(world)
    world.evaluate(0, 200)
    first = snapshot(world)
    assert {row[0] for row in first} == set(WINDOW_RULES)  # queue_slo_breached is judged per day
    world.evaluate(0, 200)
    world.evaluate(50, 120)
    assert snapshot(world) == first


def test_backfill_leaves_the_same_episodes_as_live_evaluation(world: World):
    scenario(world)
    world.evaluate(0, 200, live=False)
    backfilled = snapshot(world)
    assert not Episode.objects.filter(detected_live=True).exists()
    Episode.objects.all().delete()
    world.evaluate_live(0, 200)
    assert snapshot(world) == backfilled
    assert not Episode.objects.filter(detected_live=False).exists()


def test_a_backfill_before_a_live_episode_joins_it(world: World):
    # Live evaluation began at minute 100, while the gang had been idle since minute 10.
    gang = world.gang(world.workload("since-long", 1))
    world.run(gang, range(220), lambda m, g: IDLE if 10 <= m < 200 else BUSY)
    world.evaluate_live(100, 220)
    [live] = world.episodes(Rule.IDLE_WORKLOAD)
    assert live.started_at == at(100)
    # The backfill of minutes 0-99 finds the start of the same episode.
    world.evaluate(0, 100, live=False)
    [joined] = world.episodes(Rule.IDLE_WORKLOAD)
    # It is still the episode first written live (and maybe notified then).
    assert joined.pk == live.pk and joined.detected_live is True
    assert (joined.started_at, joined.fired_at, joined.escalated_at, joined.resolved_at) == (
        at(10),
        at(70),
        at(130),
        at(200),
    )
    assert joined.severity == Severity.CRITICAL
    assert joined.idle_gpu_hours == pytest.approx(190 / 60)


def test_a_recollected_hole_ends_where_the_windows_after_it_no_longer_held(world: World):
    # Busy until minute 30, idle 30-99, busy 100-119, idle again from 120. Minutes 30-99 are
    # collected only later (a Prometheus outage re-collected), after 0-299 were evaluated live.
    gang = world.gang(world.workload("outage", 1))
    world.run(
        gang, [m for m in range(300) if not 30 <= m < 100], lambda m, g: BUSY if m < 120 else IDLE
    )
    world.evaluate(0, 300)
    [later] = world.episodes(Rule.IDLE_WORKLOAD)
    assert (later.started_at, later.fired_at, later.resolved_at) == (at(120), at(180), None)

    # The hole's windows arrive; the collector queues them (start and end of what it wrote).
    world.run(gang, range(30, 100), IDLE)
    world.store()
    evaluate_alerts.apply(args=[world.cluster.pk, at(30).isoformat(), at(100).isoformat(), False])

    hole, again = world.episodes(Rule.IDLE_WORKLOAD)
    # It held 30-99 and no longer at minute 100 (busy): it is not joined across 100-119.
    assert (hole.started_at, hole.fired_at, hole.resolved_at) == (at(30), at(90), at(100))
    assert hole.idle_gpu_hours == pytest.approx(70 / 60)
    assert again.pk == later.pk
    assert (again.started_at, again.fired_at, again.resolved_at) == (at(120), at(180), None)
    assert again.idle_gpu_hours == pytest.approx(later.idle_gpu_hours)


def test_exemptions_mark_episodes_exempt_without_hiding_them(world: World):
    labelled = world.gang(
        world.workload("labelled", 1, labels={"gpuledger.io/hoarding-exempt": "true"})
    )
    notebook = world.gang(world.workload("jupyter", 1, owner_kind="Pod", namespace="ns-b"))
    big_notebook = world.gang(world.workload("jupyter-big", 4, owner_kind="Pod", namespace="ns-b"))
    plain = world.gang(world.workload("plain", 1, namespace="ns-c"))
    Exemption.objects.create(kind=ExemptionKind.INTERACTIVE_BELOW, max_gpus=2, reason="notebooks")
    for gang in (labelled, notebook, big_notebook, plain):
        world.run(gang, range(70), IDLE)
    world.evaluate(0, 70)
    exempt = {e.workload.name: e.exempt_reason for e in world.episodes(Rule.IDLE_WORKLOAD)}
    assert set(exempt) == {"labelled", "jupyter", "jupyter-big", "plain"}
    assert "hoarding-exempt" in exempt["labelled"]
    assert "notebooks" in exempt["jupyter"]
    assert exempt["jupyter-big"] == "" and exempt["plain"] == ""

    # A queue exemption added later applies to the open episodes at the next evaluation.
    Exemption.objects.create(kind=ExemptionKind.CLUSTER_QUEUE, cluster_queue=world.cq)
    for gang in (labelled, notebook, big_notebook, plain):
        world.run(gang, [70], IDLE)
    world.evaluate(70, 71)
    assert all(e.exempt for e in world.episodes(Rule.IDLE_WORKLOAD))


def test_an_expired_exemption_no_longer_applies(world: World):
    Exemption.objects.create(
        kind=ExemptionKind.NAMESPACE,
        namespace="ns-a",
        expires_at=timezone.now() - timedelta(days=1),
    )
    world.run(world.gang(world.workload("w", 1)), range(61), IDLE)
    world.evaluate(0, 61)
    [episode] = world.episodes()
    assert not episode.exempt


def test_a_silence_sets_silenced_until_on_matching_episodes(world: World):
    until = timezone.now() + timedelta(hours=4)
    Silence.objects.create(rule=Rule.IDLE_WORKLOAD, cluster_queue=world.cq, ends_at=until)
    Silence.objects.create(rule=Rule.GHOST_RESERVATION, ends_at=until + timedelta(hours=1))
    world.run(world.gang(world.workload("w", 1)), range(61), IDLE)
    world.evaluate(0, 61)
    [episode] = world.episodes()
    assert episode.silenced_until == until
    assert episode.is_silenced(timezone.now())
