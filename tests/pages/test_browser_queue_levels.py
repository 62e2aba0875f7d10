"""Queue service levels in headless Chromium: the Queue levels page, the workload page's
admission attempts and start estimate, the wait chart and objective on the ClusterQueue and team
pages, and My teams' weekly p95 (``queue_levels_world`` computes the expected figures by hand).

Set ``GPULEDGER_SCREENSHOTS`` to a directory to keep a PNG of each page.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.utils import timezone

from tests.pages.queue_levels_world import build

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def shot(page, name: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("GPULEDGER_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def wait_for_charts(page, *ids: str) -> None:
    for chart_id in ids:
        page.wait_for_selector(f"#{chart_id} .main-svg", timeout=15000)


def row(page, group: str):
    return page.locator(f'[data-testid="levels-row"][data-group="{group}"]')


def test_queue_levels_page_for_staff(
    page, live_server, browser_login, cluster, lead_user, staff_user, console_errors, tmp_path
):
    build(cluster, lead_user, timezone.now())
    browser_login(page, live_server.url, staff_user)

    page.goto(f"{live_server.url}/queue-levels/?range=7d")

    assert page.get_by_role("link", name="Queue levels").get_attribute("aria-current") == "page"
    alpha, beta = row(page, "alpha-cq"), row(page, "beta-cq")
    assert alpha.locator("td").nth(1).inner_text() == "12"
    assert alpha.get_by_test_id("wait-p50").inner_text() == "12 min"
    assert alpha.get_by_test_id("wait-p95").inner_text() == "24 min"
    assert beta.locator("td").nth(1).inner_text() == "4"
    assert beta.get_by_test_id("wait-p50").inner_text() == "30 min"
    assert beta.get_by_test_id("wait-p95").inner_text() == "1 h 30 min"
    assert "p95 ≤ 20 min" in alpha.get_by_test_id("levels-slo").inner_text()
    matrix = page.get_by_test_id("preemption-matrix")
    assert matrix.locator("thead th").all_text_contents()[1:] == ["alpha-cq", "beta-cq", "Total"]
    cells = {
        r.locator("th").text_content(): r.locator("td").all_inner_texts()
        for r in matrix.locator("tbody tr").all()
    }
    assert cells == {"alpha-cq": ["0", "1", "1"], "beta-cq": ["1", "0", "1"]}
    wait_for_charts(
        page, "levels-waits-chart", "levels-evictions-chart", "levels-preemptions-chart"
    )
    legend = page.locator("#levels-waits-chart .legendtext").all_text_contents()
    assert {"alpha-cq p95", "alpha-cq p50", "beta-cq p95", "beta-cq p50"} <= set(legend)
    shot(page, "queue-levels", tmp_path)

    page.get_by_test_id("levels-group-by").select_option("team")
    page.get_by_role("button", name="Show").click()
    page.wait_for_load_state()
    assert "group_by=team" in page.url and "range=7d" in page.url
    assert row(page, "alpha").get_by_test_id("wait-p95").inner_text() == "24 min"
    assert console_errors == []


def test_queue_levels_page_for_a_lead_shows_only_their_team(
    page, live_server, browser_login, cluster, lead_user, console_errors, tmp_path
):
    build(cluster, lead_user, timezone.now())
    browser_login(page, live_server.url, lead_user)

    page.goto(f"{live_server.url}/queue-levels/?range=7d")

    assert page.locator('[data-testid="levels-row"]').count() == 1
    assert row(page, "alpha-cq").get_by_test_id("wait-p95").inner_text() == "24 min"
    matrix = page.get_by_test_id("preemption-matrix")
    assert matrix.locator("thead th").all_text_contents()[1:] == [
        "a queue of another team",
        "Total",
    ]
    wait_for_charts(page, "levels-waits-chart")
    assert "beta" not in page.content()
    shot(page, "queue-levels-lead", tmp_path)
    assert console_errors == []


def test_workload_page_lists_attempts_and_estimates_the_start(
    page, live_server, browser_login, cluster, lead_user, console_errors, tmp_path
):
    world = build(cluster, lead_user, timezone.now())
    browser_login(page, live_server.url, lead_user)

    page.goto(f"{live_server.url}/workloads/{world.workloads['alpha-wait'].pk}/")

    attempts = page.locator('[data-testid="attempt-row"]')
    assert attempts.count() == 2
    first, second = attempts.nth(0), attempts.nth(1)
    assert first.get_by_test_id("attempt-wait").inner_text() == "2 min"
    assert "Preempted (InCohortReclamation)" in first.inner_text()
    assert "after 3.0 h running" in first.inner_text()  # 22 h 58 min - 20 h = 2.97 h
    # beta-main is another team's workload: not named to alpha's lead.
    assert "beta" not in first.inner_text()
    assert "waiting" in second.inner_text()
    assert second.get_by_test_id("attempt-wait").inner_text() == "—"
    # Position 2 (alpha-first has the higher priority); 12 admissions in 24 h = 0.5 per hour:
    # mean 2 / 0.5 = 4 h; Erlang(2) 10th-90th percentile: 1.06 h (64 min) to 7.78 h.
    estimate = page.get_by_test_id("start-estimate").inner_text()
    assert "mean 4 h" in estimate
    assert "in 64 min to 7 h 46 min" in estimate
    assert "position 2 (the product's order (priority, then creation))" in estimate
    assert "12 admissions of the queue in the last 24 h" in estimate
    assert "Poisson" in page.get_by_test_id("estimate-method").inner_text()
    shot(page, "workload-attempts", tmp_path)
    assert console_errors == []


def test_queue_team_and_my_teams_pages_show_waits_and_the_objective(
    page, live_server, browser_login, cluster, lead_user, console_errors, tmp_path
):
    build(cluster, lead_user, timezone.now())
    browser_login(page, live_server.url, lead_user)

    page.goto(f"{live_server.url}/queues/test/alpha-cq/?range=7d")
    wait_for_charts(page, "queue-waits-chart")
    status = page.get_by_test_id("slo-status")
    assert status.locator('[data-testid="slo-day"]').count() == 7
    statuses = status.locator('[data-testid="slo-day"]').evaluate_all(
        "cells => cells.map(c => c.dataset.status)"
    )
    assert {"met", "breached"} & set(statuses)
    shot(page, "cluster-queue", tmp_path)

    page.goto(f"{live_server.url}/teams/alpha/?range=7d")
    wait_for_charts(page, "team-waits-chart")
    assert page.get_by_test_id("slo-status").locator('[data-testid="slo-row"]').count() == 1
    shot(page, "team", tmp_path)

    page.goto(f"{live_server.url}/my-teams/")
    waits = page.get_by_test_id("team-waits").inner_text()
    assert "Our work waited p95 24 min this week (last week no admission)" in waits
    shot(page, "my-teams", tmp_path)
    assert console_errors == []
