"""A queue's idle GPUs summed in one order however the windows were read (a module of its own:
the tests of ``test_runs.py`` share a stored world, and this one stores another)."""

from __future__ import annotations

import pytest

from tests.alerts.conftest import World
from tests.alerts.test_episodes import snapshot
from tests.alerts.test_runs import MINUTES, window_by_window

pytestmark = pytest.mark.django_db


def test_a_queue_s_idle_gpus_are_summed_in_one_order_however_the_windows_were_read(
    world: World, monkeypatch: pytest.MonkeyPatch
):
    # Three MIG-sized slices idle in a borrowing queue; the last one is busy one minute in four,
    # so a backfill reads it window by window and the other two as runs. 0.1 + 0.2 + 0.4 and
    # 0.4 + 0.1 + 0.2 are two different floats.
    for name, share, busy_every in (("slice-a", 0.1, 0), ("slice-b", 0.2, 0), ("slice-c", 0.4, 4)):
        gang = world.gang(world.workload(name, 1))
        world.run(
            gang,
            range(MINUTES),
            lambda m, g, every=busy_every: 0.5 if every and m % every == 0 else 0.001,
        )
        for row in world.rows[-MINUTES:]:
            row.gpus = share
    world.sample(world.cq, range(MINUTES), borrowed=0.25, total=0.25)
    world.sample(world.lender, range(MINUTES), lent=0.25, nominal=4)
    world.store()
    reference = window_by_window(world, monkeypatch)
    [borrowing] = [row for row in reference if row[0] == "borrowing_while_idle"]
    assert borrowing[13]["idle"] == 0.1 + 0.2 + 0.4  # minute 199: all three idle
    world.evaluate(0, MINUTES)
    assert snapshot(world) == reference
