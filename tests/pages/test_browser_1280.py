"""At 1280 px, the narrowest desktop width: the navigation shows every entry (API docs last)
without a scroll bar, and the Teams table shows its last column without scrolling; and the
site has an icon (no ``/favicon.ico`` 404, in the admin either). Headless Chromium."""

from __future__ import annotations

from urllib.parse import urljoin

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from tests.pages.quota_pages.world import build_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def beta_lead(django_user_model):
    return django_user_model.objects.create_user(username="beta-lead", password="beta-password")


@pytest.fixture
def world(cluster, lead_user, beta_lead):
    return build_world(cluster, lead_user, beta_lead, timezone.now())


@pytest.fixture
def quota_staff(staff_user):
    # Staff with the quota permission: the most entries the navigation shows.
    staff_user.user_permissions.add(Permission.objects.get(codename="apply_quota_change"))
    return staff_user


def _fits(page, selector: str) -> dict:
    return page.eval_on_selector(
        selector, "el => ({scroll: el.scrollWidth, client: el.clientWidth})"
    )


def test_at_1280_px_the_nav_keeps_api_docs_and_teams_its_last_column(
    page, live_server, browser_login, quota_staff, world, console_errors, tmp_path
) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    browser_login(page, live_server.url, quota_staff)
    page.goto(f"{live_server.url}/teams/?range=7d")
    page.screenshot(path=str(tmp_path / "teams-1280.png"))

    nav = _fits(page, "nav.mainnav")
    assert nav["scroll"] <= nav["client"], nav
    api_docs = page.locator("nav.mainnav a", has_text="API docs")
    box = api_docs.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280
    assert page.locator("nav.mainnav a", has_text="Quota changes").count() == 1

    table = page.locator(".table-wrap").first
    wrap = table.evaluate("el => ({scroll: el.scrollWidth, client: el.clientWidth})")
    assert wrap["scroll"] <= wrap["client"], wrap
    last = page.locator(".table-wrap table thead th").last
    last_box = last.bounding_box()
    assert last_box is not None and last_box["x"] + last_box["width"] <= 1280
    assert console_errors == []


def test_the_site_has_an_icon(page, live_server, browser_login, quota_staff, console_errors):
    browser_login(page, live_server.url, quota_staff)
    icons = []
    page.on("response", lambda r: icons.append((r.url, r.status)) if "favicon" in r.url else None)
    # The dashboard declares its icon; the admin declares none, so browsers ask /favicon.ico.
    # The browser fetches an icon when it likes: read the declaration and fetch what it names,
    # rather than wait for the browser's own request.
    page.goto(f"{live_server.url}/")
    href = page.locator("link[rel~=icon]").first.get_attribute("href")
    assert href is not None and href.endswith("favicon.svg"), href
    declared = page.request.get(urljoin(page.url, href))
    assert declared.status == 200, href
    assert declared.headers["content-type"].startswith("image/svg+xml")
    page.goto(f"{live_server.url}/admin/")
    answer = page.request.get(f"{live_server.url}/favicon.ico")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("image/svg+xml")
    assert all(status < 400 for _, status in icons), icons
    assert console_errors == []
