"""Which hours a range counts: those that end inside it and have ended (core.ranges)."""

from __future__ import annotations

from datetime import UTC, datetime

import time_machine

from core.ranges import CUSTOM, TimeRange, covered_hours

H10, H11, H12, H13, H14 = (datetime(2026, 3, 2, hour, tzinfo=UTC) for hour in range(10, 15))
NOW = datetime(2026, 3, 2, 13, 20, tzinfo=UTC)


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, 2, hour, minute, tzinfo=UTC)


def test_a_range_starting_mid_hour_counts_that_hour_and_not_the_one_it_ends_in():
    span = covered_hours(at(10, 30), at(13, 20), now=at(15))

    assert span.starts() == [H10, H11, H12]


def test_the_hour_in_progress_counts_once_it_has_ended():
    assert covered_hours(H10, H14, now=at(13, 20)).starts() == [H10, H11, H12]
    assert covered_hours(H10, H14, now=at(13, 59)).starts() == [H10, H11, H12]
    assert covered_hours(H10, H14, now=H14).starts() == [H10, H11, H12, H13]


def test_ranges_that_follow_each_other_share_no_hour_and_miss_none():
    first = covered_hours(at(10, 30), at(12, 30), now=at(15))
    second = covered_hours(at(12, 30), at(14, 30), now=at(15))

    assert first.starts() == [H10, H11]
    assert second.starts() == [H12, H13]


def test_a_range_inside_one_hour_or_in_the_future_counts_nothing():
    assert covered_hours(at(10, 10), at(10, 50), now=at(15)).count == 0
    assert covered_hours(at(16), at(18), now=at(15)).count == 0


def test_a_page_range_counts_the_hours_of_its_chart_axis():
    last_hours = TimeRange(at(10, 30), NOW, CUSTOM)

    with time_machine.travel(NOW, tick=False):
        assert last_hours.complete_hours() == [H10, H11, H12]
        assert last_hours.covered_hours().count == 3
