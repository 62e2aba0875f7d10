"""Workloads moved through stretches of a chunk's windows at once (``RuleSet.split``,
``EpisodeBook.apply``) leave exactly the episodes that window-by-window evaluation leaves."""

from __future__ import annotations

import copy
import random
import threading
from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

import alerts.reading
from alerts.episodes import EpisodeBook
from alerts.models import Episode
from alerts.rules import RuleSet
from fleet.choices import ActivitySource
from ledger.choices import RateKind
from ledger.models import GpuUsage, RateCard
from quotas.models import Workload
from tests.alerts.conftest import T0, World, build_world
from tests.alerts.test_episodes import snapshot
from tests.databases import kept_for_the_module

pytestmark = pytest.mark.django_db

MINUTES = 200


def noisy_scenario(world: World) -> None:
    """Idle GPUs whose activity wanders below the threshold, gangs that change state, a gang
    with one GPU on both sides of the threshold, a fallback source, dark minutes, a ghost
    whose one running pod idles, a borrowing queue, and a price change at 02:00."""
    rng = random.Random(20261201)

    def idle() -> float:
        return rng.uniform(0.0, 0.0099)

    def busy() -> float:
        return rng.uniform(0.2, 0.9)

    # Idle all along (long runs, fires at 60 and escalates at 120 idle minutes inside chunks).
    world.run(world.gang(world.workload("always-idle", 2, pods=2)), range(MINUTES), idle_of(idle))
    # Idle, busy for a while, idle again.
    switch = world.gang(world.workload("switching", 1))
    world.run(switch, range(MINUTES), lambda m, g: busy() if 70 <= m < 95 else idle())
    # One GPU of four is busy one minute in three: never steady; idle for two minutes at a
    # time, so its episodes start and are dropped before they fire.
    mixed = world.gang(world.workload("mixed", 4))
    world.run(mixed, range(MINUTES), lambda m, g: busy() if g == 0 and m % 3 == 0 else idle())
    # GR_ENGINE_ACTIVE where SM_ACTIVE is not exported.
    fallback = world.gang(world.workload("fallback", 1, namespace="ns-b"), node="node-2")
    world.run(fallback, range(MINUTES), idle_of(idle), source=ActivitySource.GR_ENGINE_ACTIVE)
    # Idle with two dark stretches (a 6-minute gap and a 15-minute one).
    dark = world.gang(world.workload("dark", 1), node="node-2")
    world.run(dark, range(MINUTES), lambda m, g: None if 40 <= m < 46 or 120 <= m < 135 else idle())
    # Admitted for two pods, one runs (idle): a ghost and an idle workload at once.
    world.run(
        world.gang(world.workload("half-ghost", 2, pods=2)), range(MINUTES), idle_of(idle),
        running_pods=1,
    )  # fmt: skip
    # Busy all along: never a candidate.
    world.run(world.gang(world.workload("busy", 2)), range(MINUTES), lambda m, g: busy())
    # Appears at minute 30, disappears at minute 150.
    late = world.gang(world.workload("late", 1))
    world.run(late, range(30, 150), idle_of(idle))
    world.sample(world.cq, range(MINUTES), borrowed=1, total=1)
    world.sample(world.lender, range(MINUTES), lent=1, nominal=4)
    RateCard.objects.create(
        kind=RateKind.ALLOCATED,
        flavor="h100",
        price_per_gpu_hour=Decimal("3.10"),
        currency="USD",
        effective_from=T0 + timedelta(hours=2),
    )


def idle_of(value):
    return lambda m, g: value()


def without_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every window of every workload into the windows' rows, none as a run."""
    monkeypatch.setattr(
        RuleSet, "_runs", lambda self, workload_id, group, count, *args: ([], set(range(count)))
    )


def count_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = EpisodeBook._extend_run

    def counted(self, episode, finding, windows, gpus):
        calls.append(len(windows))
        return original(self, episode, finding, windows, gpus)

    monkeypatch.setattr(EpisodeBook, "_extend_run", counted)
    return calls


def record_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """(workload id, first, last) of every run ``split`` makes."""
    made: list[tuple[int, int, int]] = []
    original = RuleSet._run

    def recorded(self, workload_id, group, columns, first, last):
        made.append((workload_id, first, last))
        return original(self, workload_id, group, columns, first, last)

    monkeypatch.setattr(RuleSet, "_run", recorded)
    return made


def window_by_window(world: World, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    with monkeypatch.context() as patch:
        without_runs(patch)
        world.evaluate_live(0, MINUTES)
    reference = snapshot(world)
    Episode.objects.all().delete()
    return reference


@pytest.fixture(scope="module")
def shared_noisy(django_db_setup: None, django_db_blocker: Any) -> Iterator[tuple[World, list]]:
    """The noisy scenario stored, and the episodes its window-by-window evaluation leaves (then
    deleted), built once for the module: 200 evaluations that every test compares against."""
    with kept_for_the_module(django_db_blocker):
        world = build_world()
        noisy_scenario(world)
        world.store()
        with pytest.MonkeyPatch.context() as patch:
            reference = window_by_window(world, patch)
        yield world, reference


@pytest.fixture
def noisy(shared_noisy: tuple[World, list], db: None) -> tuple[World, list]:
    """The stored noisy scenario and its window-by-window episodes; no episode stored yet. What
    a test writes is rolled back after it."""
    return copy.deepcopy(shared_noisy)


@pytest.mark.parametrize("windows_per_chunk", [1, 7, 45, 1000])
def test_a_backfill_in_chunks_leaves_the_episodes_of_window_by_window_evaluation(
    noisy: tuple[World, list], monkeypatch: pytest.MonkeyPatch, windows_per_chunk: int
):
    world, reference = noisy
    assert {row[1].split("/")[-1] for row in reference if row[0] == "idle_workload"} >= {
        "always-idle",
        "switching",
        "fallback",
        "dark",
        "half-ghost",
        "late",
    }
    per_window = GpuUsage.objects.filter(window_end=T0 + timedelta(minutes=100)).count()
    monkeypatch.setattr(alerts.reading, "ROWS_PER_READ", per_window * windows_per_chunk)
    runs = count_runs(monkeypatch)
    world.evaluate(0, MINUTES, live=True)
    assert snapshot(world) == reference
    # The steady workloads did move through whole chunks at once.
    assert runs and max(runs) >= min(windows_per_chunk, MINUTES)


def test_a_workload_that_changes_within_a_chunk_runs_through_each_stretch(
    noisy: tuple[World, list], monkeypatch: pytest.MonkeyPatch
):
    world, reference = noisy
    made = record_runs(monkeypatch)
    world.evaluate(0, MINUTES)  # one chunk of 200 windows
    assert snapshot(world) == reference
    runs = defaultdict(list)
    for workload_id, first, last in made:
        runs[Workload.objects.get(pk=workload_id).name].append((first, last))
    # Idle 0-69 and 95-199; busy in between, so no candidate and no rows there.
    assert runs["switching"] == [(0, 70), (95, 200)]
    # Idle all along but for two stretches without telemetry (40-45, 120-134).
    assert runs["dark"] == [(0, 40), (46, 120), (135, 200)]
    # Rows from minute 30 to 149 only.
    assert runs["late"] == [(30, 150)]
    assert runs["always-idle"] == [(0, 200)]
    # A GPU crossing its threshold every third minute: a run at each crossing (one busy
    # minute, then two idle ones).
    assert runs["mixed"][:4] == [(0, 1), (1, 3), (3, 4), (4, 6)]


def test_runs_continue_episodes_of_an_earlier_evaluation(
    noisy: tuple[World, list], monkeypatch: pytest.MonkeyPatch
):
    world, reference = noisy
    # Live up to minute 80, then a catch-up of the rest in one call.
    world.evaluate_live(0, 80)
    runs = count_runs(monkeypatch)
    world.evaluate(80, MINUTES)
    assert runs
    assert snapshot(world) == reference


def test_a_re_evaluation_over_runs_changes_nothing(
    noisy: tuple[World, list], monkeypatch: pytest.MonkeyPatch
):
    world, _ = noisy
    world.evaluate(0, MINUTES)
    first = snapshot(world)
    per_window = GpuUsage.objects.filter(window_end=T0 + timedelta(minutes=100)).count()
    monkeypatch.setattr(alerts.reading, "ROWS_PER_READ", per_window * 13)
    world.evaluate(0, MINUTES)
    world.evaluate(37, 151)
    assert snapshot(world) == first


def test_a_failing_grouping_of_a_later_chunk_fails_the_evaluation_and_writes_nothing(
    noisy: tuple[World, list], monkeypatch: pytest.MonkeyPatch
):
    world, _ = noisy
    per_window = GpuUsage.objects.filter(window_end=T0 + timedelta(minutes=100)).count()
    monkeypatch.setattr(alerts.reading, "ROWS_PER_READ", per_window * 20)
    original = alerts.reading._identities
    threads: list[str] = []

    def failing_third(*args, **kwargs):
        threads.append(threading.current_thread().name)
        if len(threads) == 3:
            raise RuntimeError("the connection broke")
        return original(*args, **kwargs)

    monkeypatch.setattr(alerts.reading, "_identities", failing_third)
    with pytest.raises(RuntimeError, match="the connection broke"):
        world.evaluate(0, MINUTES)
    assert not Episode.objects.exists()
    assert threads[0] == threading.current_thread().name
    if connection.vendor == "postgresql":
        # The next chunks are grouped on the worker thread while the chunk before is evaluated.
        assert all(name.startswith("alerts-grouping") for name in threads[1:])
    else:
        # SQLite has no second session to group on: every chunk is grouped in turn, here.
        assert threads == [threading.current_thread().name] * 3


def test_an_evaluation_failing_mid_range_leaves_nothing_behind(
    noisy: tuple[World, list], monkeypatch: pytest.MonkeyPatch
):
    world, reference = noisy
    per_window = GpuUsage.objects.filter(window_end=T0 + timedelta(minutes=100)).count()
    monkeypatch.setattr(alerts.reading, "ROWS_PER_READ", per_window * 20)
    original = RuleSet.split
    chunks: list[int] = []

    def failing_second(self, chunk, highest):
        chunks.append(len(chunk.windows))
        if len(chunks) == 2:
            raise ValueError("a rule broke")
        return original(self, chunk, highest)

    with monkeypatch.context() as patch:
        patch.setattr(RuleSet, "split", failing_second)
        with pytest.raises(ValueError, match="a rule broke"):
            world.evaluate(0, MINUTES)
    # The grouping started for the third chunk has ended with the failed evaluation, which
    # wrote nothing; the next evaluation of the range leaves the reference episodes.
    assert not [t for t in threading.enumerate() if t.name.startswith("alerts-grouping")]
    assert not Episode.objects.exists()
    world.evaluate(0, MINUTES)
    assert snapshot(world) == reference
