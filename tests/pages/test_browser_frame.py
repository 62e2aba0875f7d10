"""What every page shares, in headless Chromium: the login title, the 404 inside the frame (the
same for a missing object and another team's), the custom-range and Sources popovers inside the
viewport, the footer's link to the figures.

Every test also asserts no console error and no request to a host that is not loopback.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import timezone

from tests.pages.quota_pages.world import build_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def beta_lead(django_user_model):
    return django_user_model.objects.create_user(username="beta-lead", password="beta-password")


@pytest.fixture
def world(cluster, lead_user, beta_lead):
    return build_world(cluster, lead_user, beta_lead, timezone.now())


def test_the_login_page_title_is_the_site_name_not_the_host(page, live_server, outside_requests):
    page.goto(f"{live_server.url}/login/")

    assert page.title() == f"Sign in · {settings.SITE_NAME}"
    assert "127.0.0.1" not in page.title()
    assert outside_requests == []


def test_another_teams_object_is_the_same_404_as_a_missing_one(
    page, live_server, browser_login, lead_user, world, outside_requests
):
    browser_login(page, live_server.url, lead_user)

    texts = []
    for path in (
        "/teams/beta/",
        "/teams/no-such-team/",
        f"/queues/{world.cluster.name}/{world.cq_b.name}/",
        f"/queues/{world.cluster.name}/no-such-queue/",
    ):
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None and response.status == 404, path
        assert page.locator("nav.mainnav a").count() >= 3  # inside the frame, with navigation
        assert page.locator("h1").inner_text() == "Page not found"
        texts.append(page.get_by_test_id("error-page").inner_text())

    assert len(set(texts)) == 1
    assert "Not found, or not yours to see." in texts[0]
    assert "beta" not in texts[0].lower() and "deleted" in texts[0]
    assert outside_requests == []


@pytest.mark.parametrize("width", [1280, 1440])
def test_the_custom_range_and_sources_panels_stay_in_the_viewport_below_the_title(
    page, live_server, browser_login, lead_user, world, console_errors, outside_requests, width
):
    page.set_viewport_size({"width": width, "height": 900})
    browser_login(page, live_server.url, lead_user)
    page.goto(f"{live_server.url}/teams/alpha/")

    page.click(".range-custom summary")
    page.click(".freshness-details summary")

    title = page.locator("h1").bounding_box()
    for selector in (".range-form", ".freshness-details table"):
        box = page.locator(selector).bounding_box()
        assert box is not None, selector
        assert box["x"] >= 0, selector
        assert box["x"] + box["width"] <= width, selector
        overlaps_title = not (
            box["y"] >= title["y"] + title["height"]
            or box["y"] + box["height"] <= title["y"]
            or box["x"] >= title["x"] + title["width"]
            or box["x"] + box["width"] <= title["x"]
        )
        assert not overlaps_title, selector
    assert console_errors == []
    assert outside_requests == []


def test_the_footer_links_to_the_definition_of_the_figures(
    page, live_server, browser_login, lead_user, world, outside_requests
):
    browser_login(page, live_server.url, lead_user)
    page.goto(f"{live_server.url}/teams/")

    footer = page.locator("footer.footer")
    assert "DESIGN" not in footer.inner_text()
    link = footer.get_by_role("link", name="What the numbers mean")
    link.click()
    page.wait_for_load_state()
    assert page.locator("h1").inner_text() == "What the numbers mean"
    # The page is the README's section: its table defines allocated_gpu_hours.
    assert page.locator("table").filter(has_text="allocated_gpu_hours").count() == 1
    assert outside_requests == []
