"""Below the knee, hour by hour, and "over-provisioned": under half the knee most of the range."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from serving.figures import below_knee, below_knee_share, is_overprovisioned, per_replica
from serving.knee import OUTPUT_TOKENS, REQUESTS, Knee

KNEE = Knee(hour=None, per_replica=800.0, unit=OUTPUT_TOKENS, replicas=2.0)


@dataclass
class Hour:
    replica_hours: float
    output_tokens_per_second: float | None
    requests_per_second: float | None = None
    mean_waiting: float | None = 0.0
    ttft_p95_seconds: float | None = None
    itl_p95_seconds: float | None = None


def test_an_hour_is_below_the_knee_under_half_of_it_per_replica():
    assert below_knee(Hour(2.0, 799.0), KNEE) is True  # 399.5 a replica < 400
    assert below_knee(Hour(2.0, 800.0), KNEE) is False  # exactly half is not below
    assert below_knee(Hour(4.0, 1500.0), KNEE) is True  # 375 a replica
    assert below_knee(Hour(1.0, 300.0), KNEE, fraction=0.25) is False


def test_missing_telemetry_is_not_judged():
    assert below_knee(Hour(2.0, None), KNEE) is None
    assert below_knee(Hour(0.0, 100.0), KNEE) is None
    assert per_replica(Hour(0.0, 100.0), OUTPUT_TOKENS) is None


def test_the_knee_unit_decides_which_figure_is_read():
    by_requests = Knee(hour=None, per_replica=10.0, unit=REQUESTS, replicas=1.0)

    assert below_knee(Hour(1.0, None, requests_per_second=4.0), by_requests) is True
    assert below_knee(Hour(1.0, 1.0, requests_per_second=6.0), by_requests) is False


def test_the_share_counts_only_judged_hours():
    hours = [Hour(2.0, 100.0), Hour(2.0, 1000.0), Hour(2.0, None), Hour(2.0, 700.0)]

    share, judged = below_knee_share(hours, KNEE)

    assert judged == 3
    assert share == pytest.approx(2 / 3)
    assert below_knee_share([Hour(1.0, None)], KNEE) == (None, 0)


@pytest.mark.parametrize(
    ("per_hour", "expected"),
    [
        ([100.0, 100.0, 1000.0], True),  # 2 of 3 below half
        ([100.0, 1000.0], False),  # half of the range is not most of it
        ([1000.0, 1200.0, 100.0], False),
        ([None, None, 100.0], True),  # the one judged hour
        ([None, None], False),  # nothing judged: nothing said
    ],
)
def test_overprovisioned_is_below_half_the_knee_in_most_judged_hours(per_hour, expected):
    hours = [Hour(2.0, tokens) for tokens in per_hour]

    assert is_overprovisioned(hours, KNEE) is expected


def test_without_a_knee_nothing_is_overprovisioned():
    assert is_overprovisioned([Hour(2.0, 1.0)], None) is False
    assert is_overprovisioned([Hour(2.0, 1.0)], Knee(None, 0.0, OUTPUT_TOKENS, 1.0)) is False
