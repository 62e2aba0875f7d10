"""A ghost reservation's episode page in headless Chromium: its pods never ran, so no GPU sample
backs its evidence chart. The chart still draws the episode's band on a date axis, says it has
no samples, and the browser logs no error (a band read as numbers drew ``NaN`` paths)."""

from __future__ import annotations

import math
import re

import pytest
from django.urls import reverse

from alerts.models import Episode
from tests.alerts.conftest import World, at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

READY = (
    "() => document.getElementById('episode-evidence-chart')"
    ".getAttribute('data-chart-state') === 'ready'"
)
# Every SVG path the chart drew: its "d" attribute.
PATHS = """() => Array.from(document.querySelectorAll('#episode-evidence-chart svg path'))
    .map(el => el.getAttribute('d') || '')"""
# The episode band (the first layout shape) as drawn: its path and its screen box.
BAND = """() => {
    const el = document.querySelector('#episode-evidence-chart .shapelayer path');
    if (!el) return null;
    const box = el.getBoundingClientRect();
    return {d: el.getAttribute('d'), width: box.width, height: box.height};
}"""
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


@pytest.fixture
def ghost(world: World) -> Episode:
    # Admitted for 4 GPUs at minute 100; its 4 pods never start, so no usage row names it.
    world.gang(world.workload("backfill-embeddings", 4, pods=4, reserved_at=at(100)))
    world.spare(range(180))  # an unallocated GPU with telemetry: every minute has a window
    world.evaluate(0, 180)
    return Episode.objects.get(rule="ghost_reservation")


def test_the_ghost_episode_draws_a_finite_band_and_logs_no_error(
    page, live_server, browser_login, staff_user, ghost, console_errors
):
    browser_login(page, live_server.url, staff_user)

    page.goto(live_server.url + reverse("dashboard:episode-detail", args=[ghost.pk]))
    page.wait_for_function(READY, timeout=20_000)

    chart = page.evaluate(
        "() => { const el = document.getElementById('episode-evidence-chart');"
        " return {traces: el.data.length, xtype: el._fullLayout.xaxis.type,"
        " text: el.innerText}; }"
    )
    assert chart["traces"] == 0  # no GPU sample: no line
    assert chart["xtype"] == "date"
    assert "No stored per-GPU samples for this episode" in chart["text"]
    paths = page.evaluate(PATHS)
    assert paths, "the chart drew no SVG path at all"
    assert not [d for d in paths if "NaN" in d or "Infinity" in d]
    band = page.evaluate(BAND)
    assert band is not None
    numbers = [float(n) for n in NUMBER.findall(band["d"])]
    assert numbers and all(math.isfinite(n) for n in numbers)
    # The band covers the episode (80 of the 140 minutes shown, with 30 minutes either side).
    assert band["width"] > 10 and band["height"] > 10
    assert console_errors == []
