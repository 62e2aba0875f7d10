"""The Alerts page, the episode page (evidence chart, acknowledging) and the ghost badge on the
workload page in headless Chromium; screenshots go to $ALERTS_SCREENSHOTS when set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from alerts.models import Episode
from tests.alerts.conftest import World, at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RANGE = f"start={at(0):%Y-%m-%dT%H:%M}&end={at(240):%Y-%m-%dT%H:%M}"
IDLE, BUSY = 0.002, 0.5


def shot(page, name: str) -> None:
    folder = os.environ.get("ALERTS_SCREENSHOTS")
    if folder:
        page.set_viewport_size({"width": 1440, "height": 900})
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


@pytest.fixture
def scene(world: World) -> World:
    idle = world.gang(world.workload("notebook-dana", 2, pods=1))
    world.run(idle, range(180), lambda m, g: IDLE if m >= 10 else BUSY)
    world.gang(world.workload("backfill-embeddings", 4, pods=4, reserved_at=at(100)))
    world.evaluate(0, 180)
    return world


def test_the_alerts_page_lists_episodes_by_wasted_gpu_hours_and_filters(
    page, live_server, browser_login, staff_user, scene, console_errors
):
    browser_login(page, live_server.url, staff_user)
    page.goto(f"{live_server.url}{reverse('dashboard:alert-list')}?{RANGE}")
    rows = page.locator("[data-testid=alert-table] tbody tr")
    assert rows.count() == 2
    # The idle notebook wasted 2 GPUs x 170 min; the ghost 4 GPUs x 80 min: idle first.
    assert rows.nth(0).get_attribute("data-rule") == "idle_workload"
    assert rows.nth(1).get_attribute("data-rule") == "ghost_reservation"
    assert page.locator("nav.mainnav a.active").inner_text() == "Alerts"
    shot(page, "alerts-list")
    page.select_option("select[name=rule]", "ghost_reservation")
    page.click("[data-testid=alert-filters] button[type=submit]")
    page.wait_for_url("**rule=ghost_reservation**")
    assert page.locator("[data-testid=alert-table] tbody tr").count() == 1
    assert "start=" in page.url  # the range survives the filter form
    assert console_errors == []


def test_the_episode_page_draws_the_evidence_and_acknowledges(
    page, live_server, browser_login, staff_user, scene, console_errors
):
    episode = Episode.objects.get(rule="idle_workload")
    # Being staff is not enough to acknowledge: the permission is given explicitly.
    staff_user.user_permissions.add(Permission.objects.get(codename="acknowledge_episode"))
    browser_login(page, live_server.url, staff_user)
    page.goto(live_server.url + reverse("dashboard:episode-detail", args=[episode.pk]))
    page.wait_for_function(
        "() => document.getElementById('episode-evidence-chart')"
        ".getAttribute('data-chart-state') === 'ready'",
        timeout=20_000,
    )
    traces = page.evaluate("() => document.getElementById('episode-evidence-chart').data.length")
    assert traces == 2  # one SM_ACTIVE line per GPU of the gang
    assert "idle (SM_ACTIVE < 0.01)" in page.locator("[data-testid=summary]").inner_text()
    shot(page, "alerts-episode")
    page.fill("[data-testid=ack-form] input[name=comment]", "asked dana to stop it")
    page.click("[data-testid=ack-form] button[type=submit]")
    page.wait_for_selector("[data-testid=message]")
    assert "acknowledged by staff" in page.locator("[data-testid=summary]").inner_text()
    episode.refresh_from_db()
    assert episode.acknowledged_by == staff_user
    assert episode.ack_comment == "asked dana to stop it"
    shot(page, "alerts-episode-acknowledged")
    assert console_errors == []


def test_a_ghost_workload_badge_says_how_many_pods_run(
    page, live_server, browser_login, staff_user, scene, console_errors
):
    ghost = Episode.objects.get(rule="ghost_reservation")
    browser_login(page, live_server.url, staff_user)
    page.goto(live_server.url + reverse("dashboard:workload-detail", args=[ghost.workload_id]))
    badge = page.locator("[data-testid=ghost-badge]")
    assert badge.inner_text() == "ghost · 0 of 4 pods running"
    assert page.locator("[data-testid=open-alerts]").count() == 1
    shot(page, "alerts-ghost-badge")
    page.goto(live_server.url + reverse("dashboard:team-detail", args=["red"]))
    assert page.locator("[data-testid=open-alerts] li").count() == 2
    shot(page, "alerts-team-badges")
    assert console_errors == []
