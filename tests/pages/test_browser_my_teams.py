"""A lead's "My teams" landing in headless Chromium, on a ``build_world`` scenario of its own
(a live-server test needs committed rows; ``test_my_teams.py`` shares one world instead)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from tests.pages.quota_pages.world import build_world


@pytest.fixture
def beta_lead(django_user_model):
    return django_user_model.objects.create_user(username="beta-lead", password="beta-password")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_my_teams_renders_in_chromium(
    page, live_server, browser_login, cluster, lead_user, beta_lead, console_errors,
    outside_requests,
):  # fmt: skip
    world = build_world(cluster, lead_user, beta_lead, timezone.now())
    browser_login(page, live_server.url, lead_user)

    page.goto(f"{live_server.url}/my-teams/")

    cards = page.get_by_test_id("team-card")
    assert cards.count() == 1
    assert cards.first.get_attribute("data-team") == world.alpha.name
    row = page.locator('[data-testid="flavor-table"] tr[data-flavor="h100"]')
    assert row.get_attribute("data-share") == "125.0"
    assert page.get_by_test_id("idle-workloads").get_by_text(world.wl["a2"].name).count() == 1
    page.get_by_test_id("to-overview").click()
    page.wait_for_load_state()
    assert page.url.rstrip("/") == live_server.url
    assert console_errors == []
    assert outside_requests == []
