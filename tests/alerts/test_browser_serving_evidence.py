"""An over-provisioned serving deployment's episode page in headless Chromium: the evidence chart
draws the throughput per replica hour by hour against the knee and half of it, the days table
lists each judged day, and the browser logs no error."""

from __future__ import annotations

import pytest
from django.urls import reverse

from alerts.choices import Rule
from alerts.models import Episode
from alerts.overprovisioned import evaluate_serving
from tests.alerts.serving_days import HOUR, write_day
from tests.alerts.test_overprovisioned import chat, day

__all__ = ["chat"]

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

READY = (
    "() => document.getElementById('episode-evidence-chart')"
    ".getAttribute('data-chart-state') === 'ready'"
)


@pytest.fixture
def episode(chat) -> Episode:
    for n in (1, 2, 3):
        write_day(chat, day(n), per_replica=150.0)
    evaluate_serving(day(4) + 2 * HOUR)
    return Episode.objects.get(rule=Rule.SERVING_OVERPROVISIONED)


def test_the_serving_episode_draws_its_throughput_against_the_knee(
    page, live_server, browser_login, staff_user, episode, console_errors
):
    browser_login(page, live_server.url, staff_user)

    page.goto(live_server.url + reverse("dashboard:episode-detail", args=[episode.pk]))
    page.wait_for_function(READY, timeout=20_000)

    chart = page.evaluate(
        "() => { const el = document.getElementById('episode-evidence-chart');"
        " return {traces: el.data.length, points: el.data[0].y.filter(v => v !== null).length,"
        " levels: el._fullLayout.shapes.filter(s => s.type === 'line')"
        " .map(s => s.y0).sort((a, b) => a - b),"
        " xtype: el._fullLayout.xaxis.type}; }"
    )
    # Day 0 (the knee, 1000 per replica) and days 1-3 (150): 4 days of hours in the margins.
    assert chart == {"traces": 1, "points": 4 * 24, "levels": [500, 1000], "xtype": "date"}
    rows = page.locator("[data-testid=serving-days] tbody tr")
    assert rows.count() == 3
    link = page.get_by_test_id("serving-workload")
    assert link.inner_text() == "ml-serving/Deployment/chat"
    link.click()
    page.wait_for_load_state()
    assert page.url.endswith(f"/serving/{episode.serving_workload_id}/")
    assert console_errors == []
