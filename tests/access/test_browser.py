"""The team list and a cohort page as aspen's lead in headless Chromium, under both settings:
what the lead reads on screen, the cohort charts' legends, and a screenshot of each."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.urls import reverse

from tests.access.conftest import World, build_world
from tests.pages.test_browser_quotas import chart_info, wait_for_charts

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(transactional_db: None) -> World:
    """Committed, for the live server's threads to read: built for each test."""
    return build_world()


def shoot(page, path, name: str) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    page.screenshot(path=str(path / f"{name}.png"), full_page=True)


@pytest.mark.parametrize("visibility", ["private", "public"])
def test_team_list_as_a_lead(
    visibility, page, live_server, browser_login, world, console_errors, tmp_path
):
    browser_login(page, live_server.url, world.users["lead_a"])
    with override_settings(GPULEDGER_TEAM_VISIBILITY=visibility):
        page.goto(live_server.url + reverse("dashboard:team-list"))
        table = page.locator("[data-testid=team-table]").inner_text()
        shoot(page, tmp_path, f"teams-{visibility}")

    assert "Aspen Team" in table
    if visibility == "private":
        assert "Birch" not in table and "Cedar" not in table
        assert "Other teams (2)" in table
    else:
        assert "Birch Team" in table and "Cedar Team" in table
        assert "Other teams" not in table
    assert console_errors == []


@pytest.mark.parametrize("visibility", ["private", "public"])
def test_cohort_page_as_a_lead(
    visibility, page, live_server, browser_login, world, console_errors, tmp_path
):
    browser_login(page, live_server.url, world.users["lead_a"])
    with override_settings(GPULEDGER_TEAM_VISIBILITY=visibility):
        page.goto(live_server.url + reverse("dashboard:cohort-detail", args=["test", "grove"]))
        wait_for_charts(page, 2)
        usage = chart_info(page, "cohort-usage-chart")
        borrowing = chart_info(page, "cohort-borrowing-chart")
        members = page.locator("[data-testid=member-table]").inner_text()
        shoot(page, tmp_path, f"cohort-{visibility}")

    assert usage["state"] == borrowing["state"] == "ready"
    if visibility == "private":
        assert set(usage["names"]) == {"cq-aspen", "Other members (2)", "Nominal quota (members)"}
        assert {"Other members (2) borrowed", "Other members (2) lent"} <= set(borrowing["names"])
        assert "cq-birch" not in members and "Other members (2)" in members
    else:
        assert {"cq-aspen", "cq-birch", "cq-cedar"} <= set(usage["names"])
        assert "cq-birch borrowed" in borrowing["names"]
        assert "cq-birch" in members
    assert console_errors == []


PAGES = {
    "overview": lambda w: reverse("dashboard:overview"),
    "busy": lambda w: reverse("dashboard:busy"),
    "map": lambda w: reverse("dashboard:map"),
    "gpu": lambda w: reverse("dashboard:gpu", args=[w.gpus[1].pk]),
    "queues": lambda w: reverse("dashboard:cluster-queue-list"),
    "workload": lambda w: reverse(
        "dashboard:workload-detail", args=[w.workloads["aspen-victim"].pk]
    ),
}


@pytest.mark.parametrize("name", sorted(PAGES))
def test_other_pages_show_a_private_lead_no_other_team(
    name, page, live_server, browser_login, world, console_errors, tmp_path
):
    browser_login(page, live_server.url, world.users["lead_a"])
    page.goto(live_server.url + PAGES[name](world))
    charts = page.locator("[data-chart-url]").count()
    if charts:
        wait_for_charts(page, charts)
    shoot(page, tmp_path, name)

    text = page.locator("main").inner_text().lower()
    assert "birch" not in text and "cedar" not in text
    assert console_errors == []
