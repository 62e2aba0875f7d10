"""The GPU and workload pages in headless Chromium on a world whose older day was pruned: the
note is shown and the charts draw both the per-window lines and the hourly ones before them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.pages.pruned_world import END, START, build_pruned_world, since

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RANGE = f"?start={START:%Y-%m-%dT%H:%M}&end={END:%Y-%m-%dT%H:%M}"
CHARTS_DRAWN = """() => Array.from(document.querySelectorAll('[data-chart-url]'))
    .every(el => el.getAttribute('data-chart-state') === 'ready')"""
POINTS = """([id, name]) => {
    const trace = document.getElementById(id).data.find(t => t.name === name);
    return trace ? trace.y.filter(v => v !== null).length : -1;
}"""
# Where the screenshots go, to be looked at (GPULEDGER_SCREENSHOTS, else the test's tmp_path).
SHOTS = os.environ.get("GPULEDGER_SCREENSHOTS", "")


def shoot(page, tmp_path: Path, name: str) -> None:
    folder = Path(SHOTS) if SHOTS else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def test_gpu_and_workload_pages_show_the_note_and_both_kinds_of_lines(
    page, live_server, staff_user, browser_login, console_errors, settings, tmp_path
):
    settings.GPULEDGER_USAGE_RETENTION_DAYS = 1
    world = build_pruned_world()
    browser_login(page, live_server.url, staff_user)
    before = f"Before {since():%Y-%m-%d %H:%M} UTC"

    page.goto(f"{live_server.url}/fleet/gpus/{world.gpus[0].pk}/{RANGE}")
    page.wait_for_function(CHARTS_DRAWN, timeout=20000)
    note = page.get_by_test_id("per-window-note")
    assert note.is_visible()
    assert before in note.inner_text()
    assert page.evaluate(POINTS, ["gpu-activity-chart", "SM_ACTIVE"]) > 0
    assert page.evaluate(POINTS, ["gpu-activity-chart", "SM_ACTIVE, node mean (hourly)"]) > 0
    chart_notice = page.locator('[data-notice-for="gpu-activity-chart"]')
    assert chart_notice.is_visible() and before in chart_notice.inner_text()
    shoot(page, tmp_path, "gpu-pruned")

    page.goto(f"{live_server.url}/workloads/{world.workload.pk}/{RANGE}")
    page.wait_for_function(CHARTS_DRAWN, timeout=20000)
    assert before in page.get_by_test_id("per-window-note").inner_text()
    hourly = page.evaluate(POINTS, ["workload-sm-chart", "Workload mean (hourly rollup)"])
    assert hourly > 0
    per_gpu = page.evaluate(
        "() => document.getElementById('workload-sm-chart').data"
        ".filter(t => !t.name.includes('hourly')).map(t => t.y.filter(v => v !== null).length)"
    )
    assert len(per_gpu) == 2 and min(per_gpu) > 0
    shoot(page, tmp_path, "workload-pruned")
    assert console_errors == []
