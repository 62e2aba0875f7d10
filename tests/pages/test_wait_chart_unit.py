"""The wait chart's unit: minutes, and hours once a plotted p95 wait passes three hours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.ranges import TimeRange
from dashboard.charts.queue_levels import waits_figure
from servicelevels.figures import LevelRow

START = datetime(2026, 3, 2, tzinfo=UTC)
RANGE = TimeRange(START, START + timedelta(days=2), "custom")


def rows(*p95_minutes: float) -> list[LevelRow]:
    return [
        LevelRow(
            group="cq",
            cluster="c",
            period_start=START + timedelta(hours=n),
            period_end=START + timedelta(hours=n + 1),
            admissions=2,
            wait_seconds_p50=minutes * 30,  # half the p95
            wait_seconds_p95=minutes * 60,
        )
        for n, minutes in enumerate(p95_minutes)
    ]


def traces(figure: dict) -> dict[str, list]:
    return {trace["name"]: trace["y"] for trace in figure["data"]}


def test_waits_up_to_three_hours_are_plotted_in_minutes():
    figure = waits_figure(RANGE, {("c", "cq"): rows(12, 180)}, "waits")

    assert figure["layout"]["yaxis"]["title"]["text"] == "Wait for quota (minutes)"
    assert traces(figure) == {"cq p95": [12.0, 180.0], "cq p50": [6.0, 90.0]}


def test_longer_waits_are_plotted_in_hours():
    figure = waits_figure(RANGE, {("c", "cq"): rows(12, 1080)}, "waits")

    assert figure["layout"]["yaxis"]["title"]["text"] == "Wait for quota (hours)"
    assert traces(figure) == {"cq p95": [0.2, 18.0], "cq p50": [0.1, 9.0]}
    assert all(" h<extra>" in trace["hovertemplate"] for trace in figure["data"])
