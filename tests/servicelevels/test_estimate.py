"""Positions and start estimates of pending workloads, against hand-computed values."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from servicelevels.estimate import (
    POSITION_ORDER,
    POSITION_VISIBILITY,
    erlang_quantile,
    estimate,
    estimates_for,
    estimates_in_queue,
    queue_positions,
)
from tests.servicelevels.helpers import admitted, queue

NOW = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
HOUR = 3600.0


def test_the_next_workload_of_a_queue_admitting_one_an_hour():
    # 24 admissions in 24 h: 1 per hour. The first admission from now is exponential:
    # mean 1 h, 10th percentile -ln(0.9) h = 0.10536 h, 90th -ln(0.1) h = 2.302585 h.
    found = estimate(1, 24, NOW)
    assert found.rate_per_hour == 1.0
    assert found.expected_seconds == pytest.approx(HOUR)
    assert found.low_seconds == pytest.approx(0.1053605 * HOUR, rel=1e-6)
    assert found.high_seconds == pytest.approx(2.3025851 * HOUR, rel=1e-6)
    assert found.expected_at == NOW + timedelta(hours=1)
    assert "last 24 h" in found.method


def test_the_third_workload_of_a_queue_admitting_twelve_a_day():
    # 12 in 24 h: 0.5 per hour; position 3: mean 3 / 0.5 = 6 h. The Erlang(3) CDF in closed form
    # is 1 - e^(-x) (1 + x + x^2 / 2) with x = rate * t: it is 0.1 and 0.9 at the range's ends.
    found = estimate(3, 12, NOW)
    assert found.expected_seconds == pytest.approx(6 * HOUR)
    for seconds, q in ((found.low_seconds, 0.1), (found.high_seconds, 0.9)):
        x = 0.5 * seconds / HOUR
        assert 1 - math.exp(-x) * (1 + x + x * x / 2) == pytest.approx(q, abs=1e-9)
    assert found.low_seconds < found.expected_seconds < found.high_seconds


def test_a_far_position_is_computed_without_overflow():
    # Position 2,000 at 100 per hour: mean 20 h, the range narrows around it (sd ~ 0.45 h).
    seconds = erlang_quantile(2000, 100 / HOUR, 0.9)
    assert 20 * HOUR < seconds < 21 * HOUR


def test_no_admission_in_the_last_day_is_no_estimate():
    found = estimate(2, 0, NOW)
    assert not found.has_estimate
    assert found.expected_at is None and found.low_at is None and found.high_at is None


def test_bad_positions_are_refused():
    with pytest.raises(ValueError):
        estimate(0, 5, NOW)


def _pending(cluster, cq, name, *, priority=0, created, position=None):
    from quotas.models import Workload

    return Workload.objects.create(
        cluster=cluster,
        namespace="ml",
        name=name,
        cluster_queue=cq,
        priority=priority,
        observed_at=created,
        state="pending",
        requested_gpus=8.0,
        pending_position=position,
    )


def test_positions_follow_kueue_when_it_answers_else_priority_then_creation(cluster):
    cq = queue(cluster)
    old_low = _pending(cluster, cq, "old-low", priority=0, created=NOW - timedelta(hours=5))
    new_high = _pending(cluster, cq, "new-high", priority=100, created=NOW - timedelta(hours=1))
    new_low = _pending(cluster, cq, "new-low", priority=0, created=NOW - timedelta(hours=2))
    positions = queue_positions(cq.pk)
    assert positions == {
        new_high.pk: (1, POSITION_ORDER),
        old_low.pk: (2, POSITION_ORDER),
        new_low.pk: (3, POSITION_ORDER),
    }
    # Kueue's visibility API says otherwise (0-based): its word is taken.
    old_low.pending_position = 0
    old_low.save()
    assert queue_positions(cq.pk)[old_low.pk] == (1, POSITION_VISIBILITY)


def test_estimates_take_the_queue_rate_of_the_last_24_hours(cluster):
    cq = queue(cluster)
    other = queue(cluster, "other", team="other")
    # 6 admissions of the queue in the last 24 h, 1 just before them (not counted), 3 of
    # another queue (not counted): 6 per 24 h = 0.25 per hour.
    for n in range(6):
        admitted(cq, f"a{n}", NOW - timedelta(hours=2 + 3 * n), timedelta(minutes=10))
    admitted(cq, "old", NOW - timedelta(hours=24, minutes=1), timedelta(minutes=10))
    for n in range(3):
        admitted(other, f"o{n}", NOW - timedelta(hours=1 + n), timedelta(minutes=1))
    first = _pending(cluster, cq, "first", priority=10, created=NOW - timedelta(hours=3))
    second = _pending(cluster, cq, "second", priority=0, created=NOW - timedelta(hours=3))
    lone = _pending(cluster, queue(cluster, "idle", team="idle"), "lone", created=NOW)
    found = estimates_for([first, second, lone], NOW)
    assert found[first.pk].admissions == 6
    assert found[first.pk].expected_seconds == pytest.approx(4 * HOUR)  # 1 / 0.25 per hour
    assert found[second.pk].position == 2
    assert found[second.pk].expected_seconds == pytest.approx(8 * HOUR)
    assert not found[lone.pk].has_estimate
    # The queue page's one read per queue gives the same.
    in_queue = estimates_in_queue(cq, NOW)
    assert in_queue[first.pk] == found[first.pk]
    assert in_queue[second.pk] == found[second.pk]
