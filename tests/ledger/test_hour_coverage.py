"""The hours a range counts (tests/core/test_ranges.py) in the read layer, the chargeback and
OpenCost. Data in tests/ledger/conftest.py: red holds 4, 9, 2 GPU-hours at 10:00, 11:00, 12:00
and 1 so far in the 13:00 hour, in progress at 13:20.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from ledger.chargeback import build_report
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.opencost import build_sets, envelope, parse_window
from tests.ledger.conftest import H10, H14, NOW


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, 2, hour, minute, tzinfo=UTC)


def red_allocated(start: datetime, end: datetime, now: datetime) -> float:
    rows = HourlyRollup.objects.for_scope(RollupScope.TEAM).filter(key="red")
    return rows.covering(start, end, now=now).total().allocated_gpu_hours


def test_the_read_layer_leaves_out_the_hour_in_progress(rollups):
    assert red_allocated(H10, H14, now=NOW) == pytest.approx(4 + 9 + 2)
    assert red_allocated(H10, H14, now=H14) == pytest.approx(4 + 9 + 2 + 1)


def test_the_read_layer_counts_the_hour_a_range_starts_in(rollups):
    # 10:30-12:30 counts 10:00 and 11:00, not 12:00.
    assert red_allocated(at(10, 30), at(12, 30), now=H14) == pytest.approx(4 + 9)


def chargeback_red(now: datetime) -> float:
    with time_machine.travel(now, tick=False):
        report = build_report(start=H10, end=H14, group_by="team")
    return next(row for row in report.rows if row.group == "red").figures.allocated_gpu_hours


def test_the_chargeback_leaves_out_the_hour_in_progress(rollups):
    assert chargeback_red(NOW) == pytest.approx(15)
    assert chargeback_red(H14) == pytest.approx(16)


def test_opencost_states_and_counts_only_the_hours_that_have_ended(rollups):
    with time_machine.travel(NOW, tick=False):
        start, end = parse_window("2026-03-02T10:00:00Z,2026-03-02T14:00:00Z", NOW)
        sets = build_sets(
            start=start, end=end, keys=["team"], step=None, accumulate=False, team_ids=None
        )
    red = envelope(sets)["data"][0]["red"]

    assert red["window"] == {"start": "2026-03-02T10:00:00Z", "end": "2026-03-02T13:00:00Z"}
    assert red["minutes"] == 180
    assert red["gpuHours"] == 15
    assert red["gpuCount"] == 5  # 15 GPU-hours over the 3 hours that ended


def test_opencost_answers_an_empty_set_while_its_only_hour_is_in_progress(rollups):
    with time_machine.travel(NOW, tick=False):
        start, end = parse_window("2026-03-02T13:00:00Z,2026-03-02T14:00:00Z", NOW)
        sets = build_sets(
            start=start, end=end, keys=["team"], step=None, accumulate=False, team_ids=None
        )

    assert envelope(sets)["data"] == [{}]
