"""Each rule on a scripted timeline; expected times and hours come from the timeline."""

from __future__ import annotations

from datetime import timedelta

import pytest

from alerts.choices import EpisodeState, Rule, Severity
from alerts.models import AlertThreshold
from fleet.choices import ActivitySource
from ledger.models import GpuUsage
from tests.alerts.conftest import PRICE, T0, World, at

pytestmark = pytest.mark.django_db

BUSY, IDLE = 0.5, 0.002


def test_an_idle_gang_starts_fires_escalates_and_resolves_on_its_minutes(world: World):
    # Given a 2-GPU gang busy for minutes 0-9, idle 10-199 and busy again 200-209
    gang = world.gang(world.workload("train", 2, pods=2))
    world.run(gang, range(210), lambda m, g: IDLE if 10 <= m < 200 else BUSY)

    # When minutes 0-99 are evaluated, the episode is open and not yet critical
    world.evaluate(0, 100)
    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    assert (episode.started_at, episode.fired_at) == (at(10), at(70))
    assert episode.escalated_at is None and episode.severity == Severity.WARNING
    assert episode.state == EpisodeState.OPEN

    # And when the rest is evaluated, it escalated at 120 idle minutes and resolved at minute 200
    world.evaluate(100, 210)
    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    assert episode.escalated_at == at(130) and episode.severity == Severity.CRITICAL
    assert episode.resolved_at == at(200)
    assert episode.state == EpisodeState.RESOLVED
    assert episode.idle_gpu_hours == pytest.approx(2 * 190 / 60)
    assert float(episode.cost) == pytest.approx(float(PRICE) * 2 * 190 / 60, abs=1e-3)
    assert episode.workload_id == gang.workload.pk and episode.team_id == world.team.pk
    assert sorted(episode.gpu_uuids) == [gang.uuid(0), gang.uuid(1)]
    gpu = episode.evidence["gpus"][gang.key(0)]
    assert gpu["telemetry_minutes"] == 190 and gpu["idle_minutes"] == 190
    assert gpu["mean"] == pytest.approx(IDLE)
    assert "SM_ACTIVE" in episode.summary and "GR_ENGINE" not in episode.summary


def test_a_gang_with_one_idle_gpu_of_eight_does_not_alert_at_the_default_fraction(world: World):
    gang = world.gang(world.workload("big", 8, pods=1))
    world.run(gang, range(90), lambda m, g: IDLE if g == 3 else BUSY)
    world.evaluate(0, 90)
    assert world.episodes(Rule.IDLE_WORKLOAD) == []


def test_a_queue_fraction_override_alerts_on_a_partly_idle_gang(world: World):
    AlertThreshold.objects.create(
        scope=AlertThreshold.Scope.CLUSTER_QUEUE,
        cluster_queue=world.cq,
        idle_gpu_fraction=0.5,
        idle_warning_minutes=20,
    )
    gang = world.gang(world.workload("half", 4, pods=1))
    world.run(gang, range(30), lambda m, g: IDLE if g < 2 else BUSY)
    world.evaluate(0, 30)
    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    assert (episode.started_at, episode.fired_at) == (at(0), at(20))
    # Only the idle GPUs count as idle GPU-hours.
    assert episode.idle_gpu_hours == pytest.approx(2 * 30 / 60)


def test_a_queue_with_a_higher_idle_threshold_alerts_above_the_default_one(world: World):
    # 0.05 is busy at the default threshold (0.01) and idle at the queue's (0.1).
    AlertThreshold.objects.create(
        scope=AlertThreshold.Scope.CLUSTER_QUEUE, cluster_queue=world.cq, idle_threshold=0.1
    )
    gang = world.gang(world.workload("slow", 2, pods=1))
    world.run(gang, range(70), 0.05)
    world.evaluate(0, 70)
    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    assert (episode.started_at, episode.fired_at) == (at(0), at(60))
    assert episode.idle_gpu_hours == pytest.approx(2 * 70 / 60)


def test_the_gr_engine_fallback_is_named_on_the_alert(world: World):
    gang = world.gang(world.workload("old-gpu", 1))
    world.run(gang, range(61), IDLE, source=ActivitySource.GR_ENGINE_ACTIVE)
    world.evaluate(0, 61)
    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    assert episode.evidence["fallback"] is True
    assert "GR_ENGINE_ACTIVE" in episode.summary


def test_minutes_without_telemetry_neither_start_extend_nor_end_an_idle_episode(world: World):
    # idle 0-39, no telemetry 40-69, idle 70-99, busy 100-109
    gang = world.gang(world.workload("nb", 1))

    def activity(minute: int, gpu: int) -> float | None:
        if 40 <= minute < 70:
            return None
        return IDLE if minute < 100 else BUSY

    world.run(gang, range(110), activity)
    world.evaluate(0, 110)
    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    # 40 idle minutes before the gap, 20 after it make the 60: the end of minute 89.
    assert (episode.started_at, episode.fired_at, episode.resolved_at) == (at(0), at(90), at(100))
    assert episode.held_seconds == 70 * 60
    assert episode.evidence["gap_minutes"] == 30
    # The 30 dark minutes are not telemetry_missing's 10 minutes of a GPU… they are: 30 ≥ 10.
    [dark] = world.episodes(Rule.TELEMETRY_MISSING)
    assert (dark.started_at, dark.fired_at, dark.resolved_at) == (at(40), at(50), at(70))


def test_a_gang_dark_from_the_start_is_never_idle(world: World):
    gang = world.gang(world.workload("dark", 2, pods=2))
    world.run(gang, range(90), None)
    world.evaluate(0, 90)
    assert world.episodes(Rule.IDLE_WORKLOAD) == []


def test_a_dark_exporter_is_one_node_episode_after_ten_minutes(world: World):
    # Every GPU of node-3 has no series (the collector's rows without a GPU key), node-2 is fine.
    gang = world.gang(world.workload("on-dark-node", 4, pods=2), node="node-3")
    world.run(gang, range(30), None, no_series=True)
    world.spare(range(30))
    world.evaluate(0, 9)
    assert world.episodes(Rule.TELEMETRY_MISSING)[0].fired_at is None  # pending, 9 minutes
    world.evaluate(9, 30)
    [episode] = world.episodes(Rule.TELEMETRY_MISSING)
    assert episode.subject_key == "node:c1/node-3"
    assert (episode.started_at, episode.fired_at, episode.resolved_at) == (at(0), at(10), None)
    assert episode.gpus == 4
    assert world.episodes(Rule.IDLE_WORKLOAD) == []


def test_a_six_minute_nan_gap_makes_no_episode(world: World):
    gang = world.gang(world.workload("nan", 1))
    world.run(gang, range(60), lambda m, g: None if 30 <= m < 36 else BUSY)
    world.evaluate(0, 60)
    assert world.episodes() == []


def test_a_ghost_reservation_fires_after_ten_minutes_and_resolves_when_its_pods_run(
    world: World,
):
    # Quota reserved at minute 5 for 4 pods of 1 GPU; the pods run from minute 30.
    gang = world.gang(world.workload("ghost", 4, pods=4, reserved_at=at(5)))
    world.spare(range(40))
    world.run(gang, range(30, 40), BUSY)
    world.evaluate(0, 20)
    [episode] = world.episodes(Rule.GHOST_RESERVATION)
    assert (episode.started_at, episode.fired_at) == (at(5), at(15))
    assert episode.evidence["pods_running"] == 0 and episode.evidence["pods_expected"] == 4
    assert episode.gpus == 4
    assert "0 of 4 pods running" in episode.summary
    world.evaluate(20, 40)
    [episode] = world.episodes(Rule.GHOST_RESERVATION)
    assert episode.resolved_at == at(30)
    assert episode.held_gpu_hours == pytest.approx(4 * 25 / 60)
    assert float(episode.cost) == pytest.approx(float(PRICE) * 4 * 25 / 60, abs=1e-3)


def test_a_gang_with_some_pods_running_is_still_a_ghost(world: World):
    gang = world.gang(world.workload("half-ghost", 4, pods=4, reserved_at=at(0)))
    world.run(gang, range(20), BUSY, running_pods=2)
    world.evaluate(0, 20)
    [episode] = world.episodes(Rule.GHOST_RESERVATION)
    assert episode.evidence["pods_running"] == 2 and episode.fired_at == at(10)
    assert episode.idle_gpu_hours == pytest.approx(2 * 20 / 60)


@pytest.mark.parametrize(
    ("gpus", "pods", "running", "ghost"),
    [
        (4, 2, 1, True),  # one pod of two, with both its GPUs: its rows name one pod
        (4, 2, 2, False),
        (1, 1, 1, False),
        (6, 3, 2, True),  # three pods or more: always counted exactly
        (6, 3, 3, False),
    ],
)
def test_pods_are_counted_not_gpu_rows(world: World, gpus, pods, running, ghost):
    gang = world.gang(world.workload("gang", gpus, pods=pods, reserved_at=at(0)))
    world.run(gang, range(20), BUSY, running_pods=running)
    world.evaluate(0, 20)
    found = world.episodes(Rule.GHOST_RESERVATION)
    assert bool(found) == ghost
    if ghost:
        assert found[0].evidence["pods_running"] == running
        assert found[0].evidence["pods_expected"] == pods


def test_a_released_reservation_is_no_ghost(world: World):
    world.workload("done", 4, pods=4, reserved_at=at(0), state="succeeded", finished_at=at(3))
    world.spare(range(30))
    world.evaluate(0, 30)
    assert world.episodes(Rule.GHOST_RESERVATION) == []


def test_borrowing_while_idle_names_lenders_and_idle_workloads(world: World):
    gang = world.gang(world.workload("idle-borrower", 4))
    world.run(gang, range(70), IDLE)
    world.sample(world.cq, range(60), nominal=0, borrowed=4, total=4)
    world.sample(world.cq, range(60, 70), nominal=4, borrowed=0, total=4)
    world.sample(world.lender, range(70), nominal=8, lent=4)
    world.evaluate(0, 70)
    [episode] = world.episodes(Rule.BORROWING_WHILE_IDLE)
    assert (episode.started_at, episode.fired_at, episode.resolved_at) == (at(0), at(30), at(60))
    assert episode.evidence["lenders"] == ["cq-blue"]
    assert episode.evidence["idle_workloads"] == ["ns-a/idle-borrower"]
    assert episode.cluster_queue_id == world.cq.pk and episode.gpus == 4
    assert "cq-blue" in episode.summary


def test_a_queue_that_borrows_while_busy_does_not_alert(world: World):
    gang = world.gang(world.workload("busy-borrower", 4))
    world.run(gang, range(60), BUSY)
    world.sample(world.cq, range(60), nominal=0, borrowed=4, total=4)
    world.evaluate(0, 60)
    assert world.episodes(Rule.BORROWING_WHILE_IDLE) == []


def test_borrowing_more_than_its_idle_gpus_does_not_alert(world: World):
    idle = world.gang(world.workload("idle-one", 2))
    busy = world.gang(world.workload("busy-one", 4), node="node-2")
    world.run(idle, range(40), IDLE)
    world.run(busy, range(40), BUSY)
    world.sample(world.cq, range(40), nominal=2, borrowed=4, total=6)
    world.evaluate(0, 40)
    assert world.episodes(Rule.BORROWING_WHILE_IDLE) == []


def test_a_pending_episode_that_ends_before_its_duration_is_dropped(world: World):
    gang = world.gang(world.workload("short-idle", 1))
    world.run(gang, range(100), lambda m, g: IDLE if 10 <= m < 50 else BUSY)
    world.evaluate(0, 100)
    assert world.episodes() == []


def test_windows_after_the_range_are_not_read(world: World):
    gang = world.gang(world.workload("later", 1))
    world.run(gang, range(120), IDLE)
    world.evaluate(0, 50)
    [episode] = world.episodes(Rule.IDLE_WORKLOAD)
    assert episode.fired_at is None and episode.evaluated_until == at(50)
    assert GpuUsage.objects.filter(window_end__gt=T0 + timedelta(minutes=50)).exists()
