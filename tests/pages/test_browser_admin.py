"""The platform admin's pages in headless Chromium: the fleet map's states and team colours, a
silent node's page, a MIG node's chart, pending while GPUs sit free, and flavor means over the
hours with data. Each page renders, shows the right numbers, logs no console error and asks no
host outside loopback."""

from __future__ import annotations

from decimal import Decimal
from urllib.parse import urlsplit

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHARTS_DRAWN = """() => Array.from(document.querySelectorAll('[data-chart-url]'))
    .every(el => el.getAttribute('data-chart-state') === 'ready')"""
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


@pytest.fixture
def outside_requests(page) -> list[str]:
    """Every request the page makes to a host outside loopback (none may happen)."""
    found: list[str] = []

    def on_request(request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in LOOPBACK:
            found.append(request.url)

    page.on("request", on_request)
    return found


def _open(page, live_server, staff_user, browser_login, path):
    browser_login(page, live_server.url, staff_user)
    page.goto(f"{live_server.url}{path}")
    page.wait_for_function(CHARTS_DRAWN, timeout=20000)


def test_fleet_map_draws_free_idle_and_silent_gpus_apart_and_colours_by_team(
    page, live_server, staff_user, silent, browser_login, console_errors, outside_requests
):
    _open(page, live_server, staff_user, browser_login, "/fleet/map/?group=none&q=node-")

    names = page.evaluate("document.querySelector('#map-chart').data.map(t => t.name)")
    assert names[:2] == ["State", "SM_ACTIVE"]
    assert "Held · no telemetry" in names and "Free (not held)" in names
    # node-silent (8 GPUs held by gang-0, DCGM down) is drawn held · no telemetry, with holder.
    row = page.evaluate(
        """() => { const s = document.querySelector('#map-chart').data[0];
                   const i = s.y.indexOf('node-silent'); return [s.z[i], s.text[i][0]]; }"""
    )
    assert row[0][:8] == [2] * 8
    assert "held · no telemetry" in row[1] and "gang-0" in row[1]
    # The nodes table says the same: 8 held, 8 without telemetry.
    held = page.locator("[data-testid=nodes-table] tr", has_text="node-silent")
    assert held.locator("[data-testid=node-held-now]").inner_text().startswith("8")
    # The time-sliced node (capacity 9 = 8 GPUs + 1 replica) adds no ninth column.
    ticks = page.evaluate("document.querySelector('#map-chart').layout.xaxis.ticktext")
    assert ticks == [f"GPU {i}" for i in range(8)]

    page.select_option("select[name=value]", "team")
    page.click("[data-testid=map-filters] button[type=submit]")
    page.wait_for_url("**value=team**")
    page.wait_for_function(CHARTS_DRAWN, timeout=20000)

    names = page.evaluate("document.querySelector('#map-chart').data.map(t => t.name)")
    assert [name for name in names if name.startswith("team ")] == ["team beta", "team alpha"]
    title = page.evaluate("document.querySelector('#map-chart').layout.title.text")
    assert title == "GPUs by the team holding them now"
    assert console_errors == []
    assert outside_requests == []


def test_a_silent_nodes_page_says_held_with_no_telemetry_and_its_empty_chart_spans_the_range(
    page, live_server, staff_user, silent, browser_login, console_errors, outside_requests
):
    node = silent["node-silent"]
    _open(page, live_server, staff_user, browser_login, f"/fleet/nodes/{node.pk}/?range=24h")

    card = page.locator("[data-testid=node-held]")
    assert card.locator(".stat-value").inner_text().strip().startswith("8")
    assert "8 held with no telemetry" in card.inner_text()
    states = page.locator("[data-testid=gpus-table] [data-testid=gpu-state]").all_inner_texts()
    assert states == ["held · no telemetry"] * 8
    assert page.locator("[data-testid=gpus-table]", has_text="gang-0").count() == 1
    xaxis = page.evaluate("document.querySelector('#node-activity-chart').layout.xaxis")
    assert xaxis["type"] == "date"
    # The drawn axis is the range's (24 hours of milliseconds), not Plotly's default -1…6.
    span = page.evaluate(
        """() => { const r = document.querySelector('#node-activity-chart')._fullLayout.xaxis.range;
                   return new Date(r[1]) - new Date(r[0]); }"""
    )
    assert span == 24 * 3600 * 1000
    assert console_errors == []
    assert outside_requests == []


def test_a_mig_nodes_chart_has_one_legend_entry_per_physical_gpu(
    page, live_server, staff_user, fleet_data, browser_login, console_errors, outside_requests
):
    _open(page, live_server, staff_user, browser_login, f"/fleet/nodes/{fleet_data.node_b.pk}/")

    names = page.evaluate("document.querySelector('#node-activity-chart').data.map(t => t.name)")
    assert names == ["GPU 0", "GPU 1", "GPU 2", "GPU 3 · MIG 3g.40gb, 4g.40gb"]
    assert page.locator("#node-activity-chart .legend .traces").count() == 4
    assert console_errors == []
    assert outside_requests == []


def test_overview_shows_pending_while_gpus_sit_free_and_flavor_means_over_hours_with_data(
    page, live_server, staff_user, fleet_data, browser_login, console_errors, outside_requests
):
    from core.mig import GPU_RESOURCE
    from ledger.models import GpuUsage
    from quotas.models import ClusterQueueQuota
    from tests.pages.conftest import _usage

    # alpha's queue asks l4 first, beta's a100; 3 l4 GPUs are free now, no a100 GPU is.
    ClusterQueueQuota.objects.create(
        cluster_queue=fleet_data.cq_a, flavor_name="l4", resource=GPU_RESOURCE, nominal=Decimal(1)
    )
    ClusterQueueQuota.objects.create(
        cluster_queue=fleet_data.cq_b, flavor_name="a100", resource=GPU_RESOURCE, nominal=Decimal(1)
    )
    GpuUsage.objects.bulk_create(
        _usage(
            fleet_data.cluster,
            fleet_data.now,
            None,
            gpu_key=f"l4-node/GPU-{i}/",
            node_name="l4-node",
            flavor="l4",
            gpus=1.0,
            capacity_gpus=1.0,
            activity=0.0,
        )
        for i in range(3)
    )
    pending = {w.name: w.requested_gpus for w in fleet_data.pending}

    _open(page, live_server, staff_user, browser_login, "/?range=30d")

    section = page.locator("[data-testid=pending-while-free]")
    l4 = section.locator("tr[data-flavor=l4]")
    a100 = section.locator("tr[data-flavor=a100]")
    # waiting-a (alpha, l4) fits the 3 free l4 GPUs: quota-bound; waiting-b (a100) needs capacity.
    assert float(l4.locator("[data-testid=quota-bound]").inner_text()) == pending["waiting-a"]
    assert l4.locator("[data-testid=capacity-bound]").inner_text() == "—"
    assert a100.locator("[data-testid=quota-bound]").inner_text() == "—"
    assert float(a100.locator("[data-testid=capacity-bound]").inner_text()) == pending["waiting-b"]
    assert "quota" in section.locator(".notice").inner_text()
    # The fixture has rollups for a few hours of the 30 days: the mean is over those hours.
    hours = len(fleet_data.complete_hours)
    flavors = page.locator("[data-testid=flavors-table]")
    capacity = flavors.locator("tr", has_text="h100").locator("[data-testid=flavor-mean-capacity]")
    assert capacity.inner_text().split(" GPUs")[0] in ("4", "4.0")
    assert f"over the {hours} of " in capacity.inner_text()
    assert console_errors == []
    assert outside_requests == []


def test_team_rankings_stay_readable_with_one_team_and_with_two_hundred(
    page, live_server, staff_user, fleet_data, browser_login, console_errors, outside_requests
):
    from ledger.choices import RollupScope
    from ledger.models import HourlyRollup
    from quotas.models import Team

    hour = fleet_data.complete_hours[-1]
    _open(page, live_server, staff_user, browser_login, "/?range=24h")

    # Two teams with idle hours: two thin labelled bars.
    one = page.evaluate("document.querySelector('#team-idle-chart').layout")
    bars = page.evaluate("document.querySelector('#team-idle-chart').data[0]")
    assert bars["text"] == [f"{value:,.1f}" for value in bars["x"]]
    assert one["height"] <= 30 * 2 + 150

    teams = Team.objects.bulk_create(Team(name=f"t-{i:03d}") for i in range(200))
    HourlyRollup.objects.bulk_create(
        HourlyRollup(
            cluster=fleet_data.cluster,
            scope=RollupScope.TEAM,
            key=team.name,
            hour=hour,
            team=team,
            allocated_gpu_hours=10.0,
            telemetry_gpu_hours=10.0,
            idle_gpu_hours=1.0 + i,
            windows=60,
        )
        for i, team in enumerate(teams)
    )
    page.reload()
    page.wait_for_function(CHARTS_DRAWN, timeout=20000)

    layout = page.evaluate("document.querySelector('#team-idle-chart').layout")
    bars = page.evaluate("document.querySelector('#team-idle-chart').data[0]")
    assert layout["title"]["text"] == "Idle GPU-hours by team · top 15 of 202 teams"
    assert bars["y"][-1] == "t-199"  # the most idle on top
    assert len(bars["y"]) == 15 and len(bars["text"]) == 15
    assert layout["height"] == 30 * 15 + 150
    assert console_errors == []
    assert outside_requests == []


def test_cohort_page_draws_who_borrowed_from_whom(
    page, live_server, staff_user, flows_scenario, browser_login, console_errors, outside_requests
):
    cohort = flows_scenario.cohort
    _open(page, live_server, staff_user, browser_login, f"/cohorts/{cohort.cluster.name}/lending/")

    matrix = page.locator("[data-testid=borrow-matrix]")
    headers = matrix.locator("thead th").all_inner_texts()
    assert [h.lower() for h in headers[1:-1]] == ["queue-a", "queue-c"]
    b_row = matrix.locator("tr[data-lender=queue-b] td").all_inner_texts()
    assert [float(v) for v in b_row[1:]] == [5.0, 2.0, 7.0]
    pool = matrix.locator("tr", has_text="cohort's own pool").locator("td").all_inner_texts()
    assert float(pool[1]) == 1.0
    total = float(matrix.locator("[data-testid=flows-total]").inner_text())
    assert total == sum(flows_scenario.expected.values())
    assert console_errors == []
    assert outside_requests == []
