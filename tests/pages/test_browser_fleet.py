"""Fleet overview and fleet map in headless Chromium: charts draw, range picker works, no errors."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHARTS_DRAWN = """() => Array.from(document.querySelectorAll('[data-chart-url]'))
    .every(el => el.getAttribute('data-chart-state') === 'ready')"""
NON_NULL_POINTS = """([id, name]) => {
    const trace = document.getElementById(id).data.find(t => t.name === name);
    return trace.y.filter(v => v !== null).length;
}"""


def test_overview_draws_every_chart_and_the_range_picker_changes_the_data(
    page, live_server, staff_user, fleet_data, browser_login, console_errors
):
    browser_login(page, live_server.url, staff_user)

    page.goto(f"{live_server.url}/?range=24h")
    page.wait_for_function(CHARTS_DRAWN, timeout=20000)

    assert page.evaluate("document.querySelector('#capacity-chart').data.length") == 4
    assert page.evaluate("document.querySelector('#team-idle-chart').data[0].y.length") == 2
    assert page.locator("#capacity-chart .main-svg .scatterlayer .trace").count() == 4
    day_url = page.get_attribute("#capacity-chart", "data-chart-loaded-url")
    day_points = page.evaluate(NON_NULL_POINTS, ["capacity-chart", "Allocated"])

    page.click("[data-testid=range-picker] a[data-range='7d']")
    page.wait_for_url("**/?range=7d")
    page.wait_for_function(CHARTS_DRAWN, timeout=20000)

    week_url = page.get_attribute("#capacity-chart", "data-chart-loaded-url")
    week_points = page.evaluate(NON_NULL_POINTS, ["capacity-chart", "Allocated"])
    assert "range=24h" in day_url
    assert "range=7d" in week_url
    assert day_points < week_points == len(fleet_data.complete_hours)
    assert page.locator("[data-testid=capacity] .stat-value").inner_text().startswith("8")
    assert console_errors == []


def test_fleet_map_draws_the_heatmap_and_opens_a_gpu_on_click(
    page, live_server, staff_user, fleet_data, browser_login, console_errors
):
    browser_login(page, live_server.url, staff_user)

    page.goto(f"{live_server.url}/fleet/map/?group=none")
    page.wait_for_function(CHARTS_DRAWN, timeout=20000)

    names = page.evaluate("document.querySelector('#map-chart').data.map(t => t.name)")
    assert names == [
        "State",
        "SM_ACTIVE",
        "Free (not held)",
        "Held · idle (SM_ACTIVE below the idle threshold)",
        "Held · no telemetry",
        "No telemetry (holder unknown; never free or idle)",
        "free (hatched)",
        "held · no telemetry (crossed)",
        "Time-sliced GPU",
    ]
    assert page.locator("#map-chart .heatmaplayer image").count() >= 1
    rows = page.evaluate("document.querySelector('#map-chart').data[0].y")
    assert sorted(rows) == ["node-a1", "node-b1"]

    # Filtering keeps the range and redraws the heatmap for the matching node only.
    page.select_option("select[name=flavor]", "h100")
    page.click("[data-testid=map-filters] button[type=submit]")
    page.wait_for_url("**flavor=h100**")
    page.wait_for_function(CHARTS_DRAWN, timeout=20000)
    assert page.evaluate("document.querySelector('#map-chart').data[0].y") == ["node-a1"]

    # Click the first GPU cell of the only row: the GPU page of node-a1 GPU 0 opens.
    box = page.locator("#map-chart .nsewdrag").first.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] / 8, box["y"] + box["height"] / 2)
    page.wait_for_url(f"**/fleet/gpus/{fleet_data.gpus['a0'].pk}/**")
    page.wait_for_function(CHARTS_DRAWN, timeout=20000)
    assert page.evaluate("document.querySelector('#gpu-activity-chart').data.length") == 4
    assert console_errors == []
