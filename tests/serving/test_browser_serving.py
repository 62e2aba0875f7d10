"""The Serving list and a deployment's page in headless Chromium, on
tests/serving/deployments_world.py: the table and its over-provisioned badge, the link to the
deployment, its four charts drawn (the knee and half-knee lines on the throughput chart), the
link to the planner prefilled with it, and the team page's section; no console error, nothing
from outside. Screenshots go to $SERVING_SCREENSHOTS when set."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.serving.deployments_world import RANGE, build_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUERY = urlencode(RANGE)
CHARTS = ("throughput", "activity", "latency", "saturation")


def shot(page, name: str) -> None:
    folder = os.environ.get("SERVING_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def trace_names(page, chart_id: str) -> list[str]:
    return page.evaluate(f"document.getElementById('{chart_id}').data.map(t => t.name)")


def test_the_list_leads_to_a_deployment_whose_charts_draw_its_knee(
    page, live_server, browser_login, console_errors, outside_requests
):
    world = build_world()
    page.set_viewport_size({"width": 1280, "height": 900})
    browser_login(page, live_server.url, world.alice)

    page.goto(f"{live_server.url}/serving/?{QUERY}")
    rows = page.get_by_test_id("serving-row")
    assert rows.count() == 2
    llama = page.locator("tr[data-deployment='chat/llama']")
    assert llama.get_by_test_id("overprovisioned").is_visible()
    assert llama.get_by_test_id("tokens-per-gpu-hour").inner_text() == "1,836,000"
    assert page.locator("tr[data-deployment='search/ranker']").count() == 0
    shot(page, "serving-list-1280")

    llama.get_by_role("link", name="chat/llama").click()
    page.wait_for_load_state("load")
    assert urlsplit(page.url).path == f"/serving/{world.llama.pk}/"
    for name in CHARTS:
        page.wait_for_selector(f"#serving-{name}-chart[data-chart-state=ready]")
    names = trace_names(page, "serving-throughput-chart")
    assert names[0] == "Output tokens/s per replica"
    assert names[1].startswith("Knee 800.0") and names[2].startswith("Half the knee 400.0")
    assert page.get_by_test_id("knee-value").inner_text() == "800 tokens/s per replica"
    shot(page, "serving-detail-1280")

    page.get_by_test_id("plan-link").click()
    page.wait_for_load_state("load")
    assert parse_qs(urlsplit(page.url).query)["workload"] == ["east/chat/Deployment/llama"]
    assert page.get_by_test_id("input-workload").input_value() == "east/chat/Deployment/llama"
    assert "not measured" in page.get_by_test_id("error-kv_cache_tokens").inner_text()

    page.goto(f"{live_server.url}/teams/aspen/?{QUERY}")
    section = page.get_by_test_id("team-serving")
    assert (
        section.locator("tr[data-deployment='chat/llama']")
        .get_by_test_id("overprovisioned")
        .is_visible()
    )
    section.get_by_role("link", name="chat/llama").click()
    page.wait_for_load_state("load")
    assert urlsplit(page.url).path == f"/serving/{world.llama.pk}/"

    assert console_errors == []
    assert outside_requests == []
