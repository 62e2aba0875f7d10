"""Hoarding alerts exist only where per-window rows exist: hours flagged ``usage_pruned`` (a
prune cut into them, or the deep backfill wrote them straight into rollups) are never evaluated,
even while some of their windows are still stored."""

from __future__ import annotations

from alerts.choices import Rule
from ledger.rollup.completeness import mark_pruned
from tests.alerts.conftest import World, at

IDLE = 0.002


def test_an_idle_gang_is_not_claimed_in_hours_without_per_window_rows(world: World):
    # T0 is 08:00: idle from 08:00 to 12:00, every window stored.
    gang = world.gang(world.workload("idle-long", 2))
    world.run(gang, range(240), IDLE)
    world.store()
    # The deep backfill flags the hours before 10:00 (their partition is not dropped yet).
    mark_pruned(world.cluster.pk, at(0), at(120))

    world.evaluate(0, 240, live=False)

    episodes = world.episodes(Rule.IDLE_WORKLOAD)
    assert len(episodes) == 1
    episode = episodes[0]
    # Its first window is the one ending at 10:01, which starts at 10:00.
    assert episode.started_at == at(120)
    assert episode.held_gpu_hours <= 2 * 2.0 + 1e-9  # 2 GPUs over 10:00-12:00 at most
    assert not world.episodes() or min(e.started_at for e in world.episodes()) >= at(120)


def test_live_evaluation_of_a_flagged_hour_claims_nothing(world: World):
    gang = world.gang(world.workload("idle-flagged", 1))
    world.run(gang, range(180), IDLE)
    world.store()
    mark_pruned(world.cluster.pk, at(0), at(180))

    world.evaluate_live(0, 180)

    assert world.episodes() == []
