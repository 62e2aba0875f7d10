"""The capacity planner page in headless Chromium: the seed plan, a plan typed into the form
(and its link), a value refused at its field; no console error, nothing from outside. The 1280 px
screenshot goes to $PLANNER_SCREENSHOTS when set."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def shot(page, name: str) -> None:
    folder = os.environ.get("PLANNER_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def stat(page, testid: str) -> str:
    return page.get_by_test_id(testid).locator(".stat-value").inner_text()


def test_the_planner_plans_the_example_then_a_typed_plan_and_refuses_bad_input(
    page, live_server, browser_login, console_errors, outside_requests
):
    page.set_viewport_size({"width": 1280, "height": 900})
    browser_login(page, live_server.url, User.objects.create_user("planner"))

    # The first visit: the worked example, 3 replicas.
    page.goto(f"{live_server.url}/serving/planner/")
    assert stat(page, "plan-replicas") == "3"
    assert stat(page, "plan-slots") == "72 %"
    assert page.get_by_test_id("bound-throughput").locator(".stat-value").inner_text() == (
        "1.45 replicas"
    )
    page.wait_for_selector("#planner-chart[data-chart-state=ready]")
    shot(page, "planner-seed-1280")

    # A typed plan: 2 req/s × 400 = 800 ÷ 138 = 5.80 (throughput and concurrency);
    # 5.80 × 1.3 = 7.54 → 8, + 1 spare = 9 replicas × TP 2 = 18 GPUs.
    page.get_by_test_id("input-request_rate").fill("2")
    page.get_by_test_id("input-tensor_parallel").fill("2")
    page.get_by_test_id("plan-button").click()
    page.wait_for_load_state("load")
    assert stat(page, "plan-replicas") == "9"
    assert stat(page, "plan-gpus") == "18"
    steps = page.get_by_test_id("plan-steps").locator("li").all_inner_texts()
    assert steps[4] == "GPUs: 9 replicas × tensor-parallel 2 = 18 GPUs."
    query = parse_qs(urlsplit(page.url).query)
    assert query["request_rate"] == ["2"] and query["tensor_parallel"] == ["2"]
    page.wait_for_selector("#planner-chart[data-chart-state=ready]")
    shot(page, "planner-typed-1280")

    # The link opens the same plan.
    page.goto(page.url)
    assert stat(page, "plan-replicas") == "9"

    # Bad values: each shown at its field, the rest kept, no plan.
    page.get_by_test_id("input-headroom").fill("-0.5")
    page.get_by_test_id("input-kv_cache_tokens").fill("many")
    page.get_by_test_id("plan-button").click()
    page.wait_for_load_state("load")
    assert page.get_by_test_id("error-kv_cache_tokens").inner_text() == (
        "A valid integer is required."
    )
    assert page.get_by_test_id("error-headroom").inner_text() == "must be at least 0"
    assert page.get_by_test_id("input-kv_cache_tokens").input_value() == "many"
    assert page.get_by_test_id("input-request_rate").input_value() == "2"
    assert page.get_by_test_id("plan-result").count() == 0
    shot(page, "planner-error-1280")

    # Fixed, it plans again.
    page.get_by_test_id("input-kv_cache_tokens").fill("57000")
    page.get_by_test_id("input-headroom").fill("0.3")
    page.get_by_test_id("plan-button").click()
    page.wait_for_load_state("load")
    assert stat(page, "plan-replicas") == "9"
    assert page.locator(".field-error").count() == 0

    assert console_errors == []
    assert outside_requests == []
