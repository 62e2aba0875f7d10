"""Fleet pages and their chart JSON views, through the Django test client.

Expected numbers are computed here from the rows ``fleet_data`` created (tests/pages/conftest.py).
"""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from core.ranges import RangeError, parse_range
from core.timewindows import floor_time
from fleet.choices import IngestSource, IngestStatus
from fleet.models import Gpu, IngestRun, Node
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup
from tests.pages.conftest import PrometheusStub

PAGES = ["dashboard:overview", "dashboard:map", "dashboard:busy"]
CHARTS = [
    "dashboard:chart-capacity",
    "dashboard:chart-team-idle",
    "dashboard:chart-team-active",
    "dashboard:chart-map",
    "dashboard:chart-busy-teams",
    "dashboard:chart-busy-time",
]


def all_urls(data) -> list[str]:
    node, gpu = data.node_a.pk, data.gpus["a0"].pk
    return [
        *(reverse(name) for name in PAGES + CHARTS),
        reverse("dashboard:node", args=[node]),
        reverse("dashboard:gpu", args=[gpu]),
        reverse("dashboard:chart-node", args=[node]),
        reverse("dashboard:chart-gpu-activity", args=[gpu]),
        reverse("dashboard:chart-gpu-memory", args=[gpu]),
    ]


def allocated(rows):
    return [row for row in rows if row.allocated]


def assert_labelled(figure: dict) -> None:
    """Every chart has a title, axis titles and a legend (ISSUE 5)."""
    layout = figure["layout"]
    assert layout["title"]["text"]
    assert layout["xaxis"]["title"]["text"]
    assert layout["yaxis"]["title"]["text"]
    assert layout["showlegend"] is True
    assert all(trace.get("name") for trace in figure["data"])


# --- Access -------------------------------------------------------------------------------------


def test_every_page_redirects_anonymous_users_to_login(client, fleet_data):
    for name in PAGES:
        url = reverse(name)
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(f"{settings.LOGIN_URL}?next=")


def test_chart_views_answer_401_to_anonymous_users(client, fleet_data):
    for url in all_urls(fleet_data):
        if "/charts/" not in url:
            continue
        response = client.get(url)
        assert response.status_code == 401, url
        assert response.json()["error"]


def test_every_page_and_chart_answers_a_signed_in_team_lead(lead_client, fleet_data):
    for url in all_urls(fleet_data):
        response = lead_client.get(url)
        assert response.status_code == 200, url


def test_pages_refuse_post(staff_client, fleet_data):
    assert staff_client.post(reverse("dashboard:overview")).status_code == 405


def test_login_page_renders_the_form(client, db):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b'name="username"' in response.content
    assert b'name="password"' in response.content


# --- Overview -----------------------------------------------------------------------------------


def test_overview_numbers_come_from_the_newest_window_only(staff_client, fleet_data):
    rows = fleet_data.latest_rows
    held = allocated(rows)
    with_data = [row for row in held if row.activity is not None]
    capacity = sum(row.capacity_gpus for row in rows)
    allocated_gpus = sum(row.gpus for row in held)
    utilization = sum(row.activity * row.gpus for row in with_data) / sum(
        row.gpus for row in with_data
    )
    idle = sum(row.gpus for row in held if row.activity is not None and row.activity < 0.01)
    no_data = sum(row.gpus for row in held if row.activity is None) + sum(
        row.capacity_gpus for row in rows if not row.allocated and row.activity is None
    )
    pending = sum(workload.requested_gpus for workload in fleet_data.pending)

    response = staff_client.get(reverse("dashboard:overview"))

    now = response.context["now"]
    assert now.capacity == pytest.approx(capacity)
    assert now.allocated == pytest.approx(allocated_gpus)
    assert now.utilization == pytest.approx(utilization)
    assert now.idle == pytest.approx(idle)
    assert now.no_telemetry == pytest.approx(no_data)
    assert now.pending_gpus == pytest.approx(pending)
    assert now.pending_workloads == len(fleet_data.pending)
    html = response.content.decode()
    assert f"{utilization * 100:.1f}" in html
    assert f"{allocated_gpus / capacity * 100:.1f} % of capacity" in html
    assert "Data collected" in html


def test_overview_team_table_sums_team_rollups_over_the_range(staff_client, fleet_data):
    time_range = parse_range({"range": "24h"})
    team_rows = [
        r
        for r in fleet_data.rollups
        if r.scope == RollupScope.TEAM and time_range.hour_start <= r.hour < fleet_data.now
    ]

    response = staff_client.get(reverse("dashboard:overview"), {"range": "24h"})

    teams = {team.key: team for team in response.context["teams"]}
    for name in ("alpha", "beta"):
        mine = [r for r in team_rows if r.key == name]
        found = teams[name].figures
        assert found.allocated_gpu_hours == pytest.approx(sum(r.allocated_gpu_hours for r in mine))
        assert found.idle_gpu_hours == pytest.approx(sum(r.idle_gpu_hours for r in mine))
        assert found.active_gpu_hours == pytest.approx(sum(r.active_gpu_hours for r in mine))


def test_team_lead_sees_other_teams_only_summed(lead_client, staff_client, fleet_data):
    alpha_url = reverse("dashboard:team-detail", args=["alpha"])
    beta_url = reverse("dashboard:team-detail", args=["beta"])

    lead = lead_client.get(reverse("dashboard:overview"))
    staff_html = staff_client.get(reverse("dashboard:overview")).content.decode()

    lead_html = lead.content.decode()
    assert f'href="{alpha_url}"' in lead_html
    assert f'href="{beta_url}"' not in lead_html
    assert "Beta" not in lead_html
    others = lead.context["teams"][-1]
    assert (others.name, others.url) == ("Other teams (1)", None)
    assert others.figures.idle_gpu_hours == pytest.approx(
        sum(
            r.idle_gpu_hours
            for r in fleet_data.rollups
            if r.scope == "team"
            and r.key == "beta"
            and parse_range({"range": "24h"}).hour_start <= r.hour
        )
    )
    assert f'href="{beta_url}"' in staff_html
    with override_settings(GPULEDGER_TEAM_VISIBILITY="public"):
        public_html = lead_client.get(reverse("dashboard:overview")).content.decode()
    assert f'href="{beta_url}"' in public_html
    assert "Other teams" not in public_html


def test_capacity_chart_plots_fleet_rollups_per_complete_hour(staff_client, fleet_data):
    response = staff_client.get(reverse("dashboard:chart-capacity"), {"range": "7d"})

    figure = response.json()
    assert_labelled(figure)
    traces = {trace["name"]: trace for trace in figure["data"]}
    allocated_trace = traces["Allocated"]
    by_hour = {}
    for rollup in fleet_data.rollups:
        if rollup.scope == RollupScope.FLEET:
            by_hour[rollup.hour] = by_hour.get(rollup.hour, 0.0) + rollup.allocated_gpu_hours
    plotted = {
        datetime.fromisoformat(x): y
        for x, y in zip(allocated_trace["x"], allocated_trace["y"], strict=True)
        if y is not None
    }
    assert plotted == pytest.approx(by_hour)
    active = dict(
        zip(
            traces["Active (SM_ACTIVE-weighted)"]["x"],
            traces["Active (SM_ACTIVE-weighted)"]["y"],
            strict=True,
        )
    )
    first = fleet_data.complete_hours[0]
    expected = sum(
        r.active_gpu_hours for r in fleet_data.rollups if r.scope == "fleet" and r.hour == first
    )
    assert active[first.isoformat()] == pytest.approx(expected)


def test_range_picker_changes_the_chart_data(staff_client, fleet_data):
    day = staff_client.get(reverse("dashboard:chart-capacity"), {"range": "24h"}).json()
    week = staff_client.get(reverse("dashboard:chart-capacity"), {"range": "7d"}).json()

    def points(figure):
        return sum(1 for y in figure["data"][1]["y"] if y is not None)

    # The first hour overlapping the range counts (rollups are keyed on hour starts).
    day_start = parse_range({"range": "24h"}).hour_start
    hours_in_day = sum(1 for hour in fleet_data.complete_hours if hour >= day_start)
    assert points(day) == hours_in_day
    assert points(week) == len(fleet_data.complete_hours)


def test_range_picker_links_keep_other_parameters(staff_client, fleet_data):
    response = staff_client.get(reverse("dashboard:map"), {"flavor": "h100", "page": "1"})

    links = {link["key"]: link["query"] for link in response.context["range_links"]}
    assert links["7d"] == "flavor=h100&range=7d"


def test_team_rankings_order_teams_by_idle_and_by_active_hours(staff_client, fleet_data):
    idle = staff_client.get(reverse("dashboard:chart-team-idle"), {"range": "7d"}).json()
    active = staff_client.get(reverse("dashboard:chart-team-active"), {"range": "7d"}).json()

    def total(team, field):
        return sum(
            getattr(r, field) for r in fleet_data.rollups if r.scope == "team" and r.key == team
        )

    for figure in (idle, active):
        assert_labelled(figure)
    # Horizontal bars: the last category is drawn on top, so it is the biggest.
    idle_bar = idle["data"][0]
    assert idle_bar["y"][-1] == "Beta"
    assert idle_bar["x"][-1] == pytest.approx(total("beta", "idle_gpu_hours"))
    active_bar = active["data"][0]
    assert active_bar["y"][-1] == "Alpha"
    assert active_bar["x"][-1] == pytest.approx(total("alpha", "active_gpu_hours"))


# --- Bad parameters -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, message",
    [
        ({"range": "1y"}, "range='1y'"),
        ({"start": "yesterday"}, "start='yesterday'"),
        ({"start": "2025-02-01", "end": "2025-01-01"}, "start must be before end"),
        ({"range": "custom"}, "needs a start"),
        ({"start": "2020-01-01", "end": "2025-01-01"}, "at most"),
    ],
)
def test_bad_ranges_answer_400_with_the_reason(staff_client, fleet_data, params, message):
    page = staff_client.get(reverse("dashboard:overview"), params)
    chart = staff_client.get(reverse("dashboard:chart-capacity"), params)

    assert page.status_code == 400
    assert message in html.unescape(page.content.decode())
    assert chart.status_code == 400
    assert message in chart.json()["error"]


@pytest.mark.parametrize(
    "params",
    [{"page": "two"}, {"page": "0"}, {"group": "rack"}, {"value": "max"}, {"team": "alpha"}],
)
def test_bad_map_filters_answer_400(staff_client, fleet_data, params):
    assert staff_client.get(reverse("dashboard:map"), params).status_code == 400
    assert staff_client.get(reverse("dashboard:chart-map"), params).status_code == 400


def test_unknown_node_and_gpu_answer_404(staff_client, fleet_data):
    missing = Gpu.objects.order_by("-pk").first().pk + 100
    assert staff_client.get(reverse("dashboard:node", args=[missing])).status_code == 404
    assert staff_client.get(reverse("dashboard:gpu", args=[missing])).status_code == 404
    assert staff_client.get(reverse("dashboard:chart-node", args=[missing])).status_code == 404


def test_custom_range_parses_dates_as_utc_and_includes_the_end_day():
    now = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)

    time_range = parse_range({"start": "2025-03-01", "end": "2025-03-02"}, now=now)
    naive = parse_range({"start": "2025-03-01T06:30"}, now=now)

    assert time_range.start == datetime(2025, 3, 1, tzinfo=UTC)
    assert time_range.end == datetime(2025, 3, 3, tzinfo=UTC)
    assert naive.start == datetime(2025, 3, 1, 6, 30, tzinfo=UTC)
    assert naive.end == now
    with pytest.raises(RangeError):
        parse_range({"start": "2025-03-11"}, now=now)


# --- Fleet map ----------------------------------------------------------------------------------


def test_fleet_map_filters_nodes_by_flavor_pool_team_and_name(staff_client, fleet_data):
    def names(params):
        response = staff_client.get(reverse("dashboard:map"), params)
        return [row["node"].name for row in response.context["rows"]]

    assert names({}) == ["node-b1", "node-a1"]  # grouped by flavor: a100 before h100
    assert names({"flavor": "h100"}) == ["node-a1"]
    assert names({"pool": "pool-b"}) == ["node-b1"]
    assert names({"q": "A1"}) == ["node-a1"]
    # beta holds GPUs on both nodes, alpha too (MIG instance on node-b1).
    assert set(names({"team": fleet_data.team_b.pk})) == {"node-a1", "node-b1"}
    GpuUsage.objects.filter(team=fleet_data.team_a, node_name="node-b1").delete()
    assert names({"team": fleet_data.team_a.pk}) == ["node-a1"]


def test_fleet_map_paginates_nodes_server_side(staff_client, fleet_data):
    Node.objects.bulk_create(
        Node(cluster=fleet_data.cluster, name=f"bulk-{i:03d}", flavor="l4", gpu_capacity=8)
        for i in range(150)
    )
    total = Node.objects.filter(gpu_capacity__gt=0).count()

    first = staff_client.get(reverse("dashboard:map"), {"group": "none"})
    last = staff_client.get(reverse("dashboard:map"), {"group": "none", "page": "2"})
    beyond = staff_client.get(reverse("dashboard:map"), {"group": "none", "page": "99"})
    chart = staff_client.get(reverse("dashboard:chart-map"), {"group": "none", "page": "2"}).json()

    assert len(first.context["rows"]) == 100
    assert len(last.context["rows"]) == total - 100
    assert beyond.context["page_obj"].number == 2
    assert len(chart["data"][0]["y"]) == total - 100


def _traces(figure):
    return {trace["name"]: trace for trace in figure["data"]}


def test_map_chart_draws_states_mig_as_fractions_and_marks_time_slicing(staff_client, fleet_data):
    figure = staff_client.get(reverse("dashboard:chart-map"), {"group": "none"}).json()

    traces = _traces(figure)
    state, heat = traces["State"], traces["SM_ACTIVE"]
    free, sliced = traces["free (hatched)"], traces["Time-sliced GPU"]
    # Category indexes of the state heatmap, in the order of its legend entries.
    free_, idle, held_nodata, nodata = 0, 1, 2, 3
    assert [t["name"] for t in figure["data"][2:6]] == [
        "Free (not held)",
        "Held · idle (SM_ACTIVE below the idle threshold)",
        "Held · no telemetry",
        "No telemetry (holder unknown; never free or idle)",
    ]
    assert figure["layout"]["title"]["text"]
    # MIG on the page: each GPU is 7 columns; rows are bottom-up (node-b1 is the top row).
    assert len(heat["x"]) == 4 * 7
    row_b = heat["y"].index("node-b1")
    row_a = heat["y"].index("node-a1")
    gpus = fleet_data.gpus
    assert heat["customdata"][row_b][0:7] == [gpus["b0"].pk] * 7
    # b0 (allocated, no samples) and b1 (the 2-GPU pod with no DCGM series takes the GPU DCGM
    # reports without a pod): held, no telemetry, never a 0 colour.
    assert heat["z"][row_b][0:14] == [None] * 14
    assert state["z"][row_b][0:14] == [held_nodata] * 14
    assert "lost-labels" in state["text"][row_b][7]
    assert "held · no telemetry" in state["text"][row_b][7]
    # MIG 3g then 4g: 3 and 4 sevenths of GPU 3; the 4g instance is free.
    mig = heat["customdata"][row_b][21:28]
    assert mig == [gpus["b3-mig1"].pk] * 3 + [gpus["b3-mig2"].pk] * 4
    assert heat["z"][row_b][21] == pytest.approx(60.0)
    assert state["z"][row_b][27] == free_
    # Held and idle (SM_ACTIVE 0.5 % < 1 %): red, not a dark end of the activity scale.
    assert heat["z"][row_a][7] is None
    assert state["z"][row_a][7] == idle
    assert heat["z"][row_a][0] == pytest.approx(80.0)
    assert nodata not in {z for row in state["z"] for z in row}
    assert sliced["y"] == ["node-a1"]
    assert len(free["x"]) == 2  # a3, MIG 4g
    assert "train-b-0" in heat["text"][row_a][14]


def test_map_chart_hides_pods_of_teams_the_lead_does_not_lead(lead_client, fleet_data):
    figure = lead_client.get(reverse("dashboard:chart-map"), {"group": "none"}).json()

    heat = figure["data"][0]
    row_a = heat["y"].index("node-a1")
    assert "train-a-0" in heat["text"][row_a][0]
    assert "train-b-0" not in heat["text"][row_a][14]
    assert "beta" not in heat["text"][row_a][14]
    assert "another team" in heat["text"][row_a][14]


def counted(rows: list) -> list:
    """The rows of the hours "last 24 hours" counts: ended hours only (the hour in progress is
    left out, README "Which hours a range counts")."""
    stop = floor_time(timezone.now(), 3600)
    return [r for r in rows if stop - timedelta(hours=24) < r.window_end <= stop]


def test_map_mean_mode_averages_the_range_from_stored_windows(staff_client, fleet_data):
    rows = counted(
        [
            r
            for r in fleet_data.history_rows + fleet_data.latest_rows
            if r.gpu == fleet_data.gpus["a0"]
        ]
    )
    mean = sum(r.activity for r in rows) / len(rows)

    figure = staff_client.get(
        reverse("dashboard:chart-map"), {"group": "none", "value": "mean"}
    ).json()

    heat = _traces(figure)["SM_ACTIVE"]
    assert heat["z"][heat["y"].index("node-a1")][0] == pytest.approx(mean * 100, abs=0.01)


# --- Node and GPU pages -------------------------------------------------------------------------


def test_node_page_lists_gpus_now_and_holders_over_the_range(staff_client, fleet_data):
    rows = counted(
        [
            r
            for r in fleet_data.history_rows + fleet_data.latest_rows
            if r.gpu == fleet_data.gpus["a0"]
        ]
    )
    gpu_hours = sum(r.gpus * (r.window_end - r.window_start).total_seconds() / 3600 for r in rows)

    response = staff_client.get(reverse("dashboard:node", args=[fleet_data.node_a.pk]))

    assert response.status_code == 200
    gpu_rows = response.context["gpu_rows"]
    assert [row["gpu"].index for row in gpu_rows] == [0, 1, 2, 3]
    assert gpu_rows[0]["activity_pct"] == pytest.approx(80.0)
    assert len(gpu_rows[2]["holders"]) == 2  # time-sliced between two pods
    history = {(h["gpu_id"], h["holder"].pod): h for h in response.context["history"]}
    a0 = history[(fleet_data.gpus["a0"].pk, "train-a-0")]
    assert a0["gpu_hours"] == pytest.approx(gpu_hours)
    assert a0["windows"] == len(rows)
    assert "no Prometheus URL" in response.content.decode()


def test_node_chart_uses_stored_windows_without_prometheus(staff_client, fleet_data):
    figure = staff_client.get(reverse("dashboard:chart-node", args=[fleet_data.node_a.pk])).json()

    assert_labelled(figure)
    assert figure["meta"]["source"] == "stored windows"
    gpu0 = next(trace for trace in figure["data"] if trace["name"] == "GPU 0")
    expected = sorted(
        (r.window_end, r.activity)
        for r in fleet_data.history_rows + fleet_data.latest_rows
        if r.gpu == fleet_data.gpus["a0"]
    )
    assert gpu0["y"] == pytest.approx([round(value * 100, 3) for _, value in expected])


def test_node_chart_falls_back_to_stored_windows_when_prometheus_fails(staff_client, fleet_data):
    fleet_data.cluster.prometheus_url = "http://127.0.0.1:9"  # discard port: refused
    fleet_data.cluster.prometheus_timeout_seconds = 2
    fleet_data.cluster.save()

    figure = staff_client.get(reverse("dashboard:chart-node", args=[fleet_data.node_a.pk])).json()

    assert figure["meta"]["source"] == "stored windows"
    assert "Prometheus could not be queried" in figure["meta"]["notice"]
    assert any(trace["name"] == "GPU 0" for trace in figure["data"])


def test_node_chart_reads_live_from_prometheus_when_configured(
    staff_client, fleet_data, prometheus_stub
):
    fleet_data.cluster.prometheus_url = prometheus_stub
    fleet_data.cluster.save()

    figure = staff_client.get(reverse("dashboard:chart-node", args=[fleet_data.node_a.pk])).json()

    assert figure["meta"]["source"] == "live from Prometheus"
    assert [trace["name"] for trace in figure["data"]] == ["GPU 1"]
    assert figure["data"][0]["y"] == pytest.approx([25.0, 26.0, 27.0])
    assert 'Hostname="node-a1"' in PrometheusStub.queries[0]
    assert 'hostname="node-a1"' in PrometheusStub.queries[0]


def test_gpu_page_and_charts_show_every_metric_in_consistent_units(staff_client, fleet_data):
    gpu = fleet_data.gpus["a0"]
    latest = next(r for r in fleet_data.latest_rows if r.gpu == gpu)

    page = staff_client.get(reverse("dashboard:gpu", args=[gpu.pk]))
    activity = staff_client.get(reverse("dashboard:chart-gpu-activity", args=[gpu.pk])).json()
    memory = staff_client.get(reverse("dashboard:chart-gpu-memory", args=[gpu.pk])).json()

    assert page.status_code == 200
    assert page.context["row"]["fb_used_gib"] == pytest.approx(latest.fb_used_mib / 1024)
    assert_labelled(activity)
    assert_labelled(memory)
    names = [trace["name"] for trace in activity["data"]]
    assert names == ["SM_ACTIVE", "Tensor pipe active", "DRAM active", "GPU_UTIL"]
    assert activity["layout"]["yaxis"]["title"]["text"] == "Activity (%)"
    assert activity["data"][0]["y"][-1] == pytest.approx(latest.sm_active * 100)
    assert activity["data"][3]["y"][-1] == pytest.approx(latest.gpu_util)
    assert memory["data"][0]["y"][-1] == pytest.approx(latest.fb_used_mib / 1024, abs=0.001)
    assert "GiB" in memory["layout"]["yaxis"]["title"]["text"]


def test_gpu_page_hides_other_teams_pods_from_a_lead(lead_client, fleet_data):
    response = lead_client.get(reverse("dashboard:gpu", args=[fleet_data.gpus["b2"].pk]))

    html = response.content.decode()
    assert "train-b-3" not in html
    assert "beta" not in html.lower()
    assert "another team" in html


# --- Busy but not working -----------------------------------------------------------------------


def test_busy_page_counts_gpus_now_and_gpu_hours_from_rollups(staff_client, fleet_data):
    util_min, sm_max = settings.GPULEDGER_BUSY_GPU_UTIL, settings.GPULEDGER_BUSY_SM_ACTIVE
    busy_now = sum(
        r.gpus
        for r in allocated(fleet_data.latest_rows)
        if r.gpu_util is not None
        and r.gpu_util >= util_min
        and r.activity is not None
        and r.activity < sm_max
    )
    time_range = parse_range({"range": "24h"})
    fleet_busy = sum(
        r.busy_not_working_gpu_hours
        for r in fleet_data.rollups
        if r.scope == "fleet" and time_range.hour_start <= r.hour
    )

    response = staff_client.get(reverse("dashboard:busy"), {"range": "24h"})

    cards = {card["testid"]: card for card in response.context["cards"]}
    assert float(cards["busy-now"]["value"]) == pytest.approx(busy_now)
    assert float(cards["busy-hours"]["value"].replace(",", "")) == pytest.approx(
        fleet_busy, abs=0.05
    )
    assert {g["gpu_id"] for g in response.context["gpus_now"]} == {
        fleet_data.gpus["a1"].pk,
        fleet_data.gpus["b2"].pk,
    }
    teams = {t.key: t.figures.busy_not_working_gpu_hours for t in response.context["teams"]}
    assert teams["beta"] == pytest.approx(
        sum(
            r.busy_not_working_gpu_hours
            for r in fleet_data.rollups
            if r.scope == "team" and r.key == "beta" and time_range.hour_start <= r.hour
        )
    )


def test_busy_team_table_sums_only_what_its_partial_index_carries(staff_client, fleet_data):
    """busy_by_team is an index-only scan of fleet_rollup_team_busy on PostgreSQL: every figure
    the team table shows (busy, its share of allocated, GPU_UTIL, utilization) is in it."""
    from dashboard.queries.busy import BUSY_TEAM_FIGURES
    from ledger.models import HourlyRollup

    [index] = [i for i in HourlyRollup._meta.indexes if i.name == "fleet_rollup_team_busy"]
    assert BUSY_TEAM_FIGURES and set(BUSY_TEAM_FIGURES) <= set(index.include)
    response = staff_client.get(reverse("dashboard:busy"), {"range": "24h"})
    team = next(t for t in response.context["teams"] if t.key == "beta")
    assert team.figures.busy_share is not None
    assert team.figures.mean_gpu_util is not None
    assert team.figures.utilization is not None


def test_busy_page_shows_a_lead_only_their_workloads_and_a_hidden_total(lead_client, fleet_data):
    response = lead_client.get(reverse("dashboard:busy"), {"range": "24h"})

    keys = [w.key for w in response.context["workloads"]]
    assert keys == ["ns-alpha/train-a"]
    time_range = response.context["time_range"]
    hidden = sum(
        r.busy_not_working_gpu_hours
        for r in fleet_data.rollups
        if r.scope == "workload"
        and r.team_id == fleet_data.team_b.pk
        and time_range.hour_start <= r.hour
    )
    assert response.context["hidden_busy"] == pytest.approx(hidden)
    assert "train-b-3" not in response.content.decode()


def test_busy_charts_have_titles_axes_and_legends(staff_client, fleet_data):
    for name in ("dashboard:chart-busy-teams", "dashboard:chart-busy-time"):
        figure = staff_client.get(reverse(name), {"range": "7d"}).json()
        assert_labelled(figure)
        assert figure["meta"]["empty"] is False


# --- Freshness ----------------------------------------------------------------------------------


def test_banner_says_when_data_was_collected(staff_client, fleet_data):
    html = staff_client.get(reverse("dashboard:map")).content.decode()

    assert "Data collected just now" in html
    assert "freshness-stale" not in html


def test_banner_warns_when_collection_is_stale_or_failing(staff_client, fleet_data):
    IngestRun.objects.update(
        started_at=fleet_data.now - timedelta(hours=2),
        finished_at=fleet_data.now - timedelta(hours=2),
    )
    stale = staff_client.get(reverse("dashboard:busy")).content.decode()
    IngestRun.objects.create(
        cluster=fleet_data.cluster,
        source=IngestSource.DCGM,
        status=IngestStatus.FAILED,
        started_at=fleet_data.now,
        error="HTTP 503 from Prometheus",
    )
    failing = staff_client.get(reverse("dashboard:busy")).content.decode()

    assert "freshness-stale" in stale
    assert "Stale:" in stale
    assert "freshness-failing" in failing
    assert "HTTP 503 from Prometheus" in failing


def test_freshness_counts_cluster_less_runs_and_reuses_its_statements(fleet_data):
    from fleet.freshness import current_freshness

    IngestRun.objects.create(
        source=IngestSource.SIMULATION,
        status=IngestStatus.FAILED,
        started_at=fleet_data.now,
        error="simulator crashed",
    )
    current_freshness(fleet_data.now)  # compiles the statements
    with CaptureQueriesContext(connection) as queries:
        freshness = current_freshness(fleet_data.now)

    assert len(queries) == 2
    everywhere = [s for s in freshness.sources if s.cluster == "all clusters"]
    assert [(s.source, s.last_status, s.failing) for s in everywhere] == [
        (IngestSource.SIMULATION.value, IngestStatus.FAILED.value, True)
    ]
    assert any(s.cluster == fleet_data.cluster.name for s in freshness.sources)


# --- Query counts -------------------------------------------------------------------------------


def _grow(data) -> None:
    """Ten times more nodes, GPUs, usage rows, teams' rollups: no page may need more queries."""
    from quotas.models import Team

    nodes = Node.objects.bulk_create(
        Node(cluster=data.cluster, name=f"extra-{i}", flavor="h100", gpu_capacity=8)
        for i in range(20)
    )
    gpus = Gpu.objects.bulk_create(
        Gpu(cluster=data.cluster, node=node, host=node.name, uuid=f"U-{node.name}-{i}", index=i)
        for node in nodes
        for i in range(8)
    )
    team = Team.objects.create(name="gamma")
    GpuUsage.objects.bulk_create(
        GpuUsage(
            cluster=data.cluster,
            window_start=data.now - timedelta(minutes=1),
            window_end=data.now,
            gpu=gpu,
            gpu_key=gpu.key,
            node_name=gpu.host,
            allocated=True,
            gpus=1.0,
            capacity_gpus=1.0,
            activity=0.1,
            gpu_util=90.0,
            team=team,
            namespace="ns-gamma",
            pod=f"p-{gpu.pk}",
        )
        for gpu in gpus
    )
    HourlyRollup.objects.bulk_create(
        HourlyRollup(
            cluster=data.cluster,
            scope=RollupScope.TEAM,
            key=team.name,
            team=team,
            hour=hour,
            allocated_gpu_hours=160.0,
            idle_gpu_hours=3.0,
            busy_not_working_gpu_hours=5.0,
        )
        for hour in data.complete_hours
    )


def test_query_counts_are_bounded_and_do_not_grow_with_data(
    staff_client, fleet_data, django_assert_max_num_queries
):
    urls = all_urls(fleet_data)

    def counts() -> dict[str, int]:
        result = {}
        for url in urls:
            with CaptureQueriesContext(connection) as queries:
                assert staff_client.get(url, {"range": "7d"}).status_code == 200
            result[url] = len(queries)
        return result

    before = counts()
    _grow(fleet_data)
    after = counts()

    assert after == before
    # The overview's heaviest: its figures, pending-while-free and the open alerts' short list.
    for url in urls:
        with django_assert_max_num_queries(16):
            staff_client.get(url)
