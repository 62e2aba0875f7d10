"""Team, cohort, ClusterQueue and workload pages in headless Chromium: charts render with their
traces, the range picker changes the data, and nothing logs an error.

The data is ``build_world`` from the client tests, built relative to the real clock because the
live server and Playwright's event loop must not run on frozen time.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.pages.quota_pages.world import build_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHART_TIMEOUT_MS = 20_000


@pytest.fixture
def beta_lead(django_user_model):
    return django_user_model.objects.create_user(username="beta-lead", password="beta-password")


@pytest.fixture
def world(cluster, lead_user, beta_lead):
    return build_world(cluster, lead_user, beta_lead, timezone.now())


def wait_for_charts(page, count: int) -> None:
    """Wait until the page has at least ``count`` charts and static/js/charts.js has drawn (or
    failed) every one of them: a page with more charts than ``count`` is not caught half-drawn."""
    page.wait_for_function(
        """n => {
            const charts = Array.from(document.querySelectorAll('[data-chart-url]'));
            return charts.length >= n && charts.every(
                el => ['ready', 'error'].includes(el.getAttribute('data-chart-state')));
        }""",
        arg=count,
        timeout=CHART_TIMEOUT_MS,
    )


def chart_info(page, element_id: str) -> dict:
    return page.evaluate(
        """id => {
            const el = document.getElementById(id);
            return {
                state: el.getAttribute('data-chart-state'),
                url: el.getAttribute('data-chart-loaded-url'),
                traces: (el.data || []).length,
                drawn: el.querySelectorAll('.scatterlayer .trace, .barlayer .trace').length,
                names: (el.data || []).map(t => t.name),
                points: (el.data || []).map(t => (t.x || []).length),
                title: el.layout && el.layout.title ? el.layout.title.text : null,
            };
        }""",
        element_id,
    )


def test_team_page_charts_render_and_follow_the_range_picker(
    page, live_server, browser_login, lead_user, world, console_errors
):
    browser_login(page, live_server.url, lead_user)
    page.goto(live_server.url + reverse("dashboard:team-detail", args=["alpha"]))
    wait_for_charts(page, 2)

    allocation = chart_info(page, "team-allocation-chart")
    queues = chart_info(page, "team-queues-chart")
    assert allocation["state"] == "ready"
    assert allocation["drawn"] >= 4
    assert "Allocated" in allocation["names"]
    assert allocation["title"].startswith("Alpha")
    assert queues["state"] == "ready" and queues["drawn"] >= 1
    day_points = allocation["points"][allocation["names"].index("Allocated")]
    assert (
        page.locator("[data-testid=stat-allocated-now] .stat-value").inner_text().startswith("20")
    )

    page.click("[data-testid=range-picker] a[data-range='7d']")
    page.wait_for_url("**range=7d**")
    wait_for_charts(page, 2)

    week = chart_info(page, "team-allocation-chart")
    assert "range=7d" in week["url"]
    week_points = week["points"][week["names"].index("Allocated")]
    assert (day_points, week_points) == (24, 7 * 24)
    assert page.locator("[data-testid=workload-table]").is_visible()
    assert console_errors == []


def test_team_page_state_filter_submits_on_change(
    page, live_server, browser_login, lead_user, world, console_errors
):
    browser_login(page, live_server.url, lead_user)
    page.goto(live_server.url + reverse("dashboard:team-detail", args=["alpha"]) + "?range=7d")

    page.select_option("select[name=state]", "pending")
    page.wait_for_url("**state=pending**")

    rows = page.locator("[data-testid=workload-table] tbody tr")
    names = sorted(rows.nth(i).get_attribute("data-workload") for i in range(rows.count()))
    expected = sorted(
        f"{w.namespace}/{w.name}"
        for w in world.wl.values()
        if w.cluster_queue == world.cq_a and w.state == "pending"
    )
    assert names == expected
    assert "range=7d" in page.url
    assert console_errors == []


def test_cohort_page_charts_render_and_show_the_reclaim_estimate(
    page, live_server, browser_login, staff_user, world, console_errors
):
    browser_login(page, live_server.url, staff_user)
    page.goto(live_server.url + reverse("dashboard:cohort-detail", args=["test", "research"]))
    wait_for_charts(page, 2)

    usage = chart_info(page, "cohort-usage-chart")
    borrowing = chart_info(page, "cohort-borrowing-chart")
    assert usage["state"] == "ready"
    assert {"team-a", "team-b", "Nominal quota (members)"} <= set(usage["names"])
    assert usage["drawn"] >= 3
    assert borrowing["state"] == "ready"
    assert {"team-a borrowed", "team-b lent"} <= set(borrowing["names"])
    assert borrowing["drawn"] >= 2
    answer = page.locator("[data-lender=team-b] [data-testid=reclaim-answer]").inner_text()
    assert answer.startswith("≈")

    page.click("[data-testid=range-picker] a[data-range='30d']")
    page.wait_for_url("**range=30d**")
    wait_for_charts(page, 2)

    month = chart_info(page, "cohort-borrowing-chart")
    assert "range=30d" in month["url"]
    assert max(month["points"]) == 30 * 24 > max(borrowing["points"])
    assert console_errors == []


def test_queue_and_workload_pages_draw_every_chart_without_errors(
    page, live_server, browser_login, staff_user, world, console_errors
):
    browser_login(page, live_server.url, staff_user)
    page.goto(live_server.url + reverse("dashboard:cluster-queue-detail", args=["test", "team-a"]))
    wait_for_charts(page, 2)
    assert chart_info(page, "queue-usage-chart")["drawn"] >= 3
    assert chart_info(page, "queue-evictions-chart")["traces"] == 2

    page.goto(live_server.url + reverse("dashboard:workload-detail", args=[world.wl["a5"].pk]))
    wait_for_charts(page, 3)
    timeline = chart_info(page, "workload-timeline-chart")
    assert timeline["state"] == "ready"
    assert {"Pending", "Admitted", "Evicted"} <= set(timeline["names"])

    page.goto(live_server.url + reverse("dashboard:workload-detail", args=[world.wl["a1"].pk]))
    wait_for_charts(page, 3)
    activity = chart_info(page, "workload-sm-chart")
    assert activity["state"] == "ready"
    assert activity["drawn"] >= len(world.gpus)
    assert console_errors == []


def test_queue_page_notes_where_quota_history_starts(
    page, live_server, browser_login, staff_user, world, console_errors
):
    browser_login(page, live_server.url, staff_user)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server.url + reverse("dashboard:cluster-queue-detail", args=["test", "team-a"]))
    wait_for_charts(page, 2)

    note = page.locator("[data-testid=quota-history-start]")
    note.scroll_into_view_if_needed()
    assert "Quota history starts at the first sync" in note.inner_text()
    page.screenshot(path="/tmp/history-queue-page.png")
    assert console_errors == []
