"""One story per GPU: the node page, the GPU page, the fleet map's cells, tooltips and node table
say the same thing about who holds a GPU (dashboard.queries.gpu_states), also when DCGM is silent.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

HELD_NODATA = 2  # category of the map's state heatmap (Free, Idle, Held · no telemetry, …)
NO_TELEMETRY = 3


def _map(client, **params):
    figure = client.get(reverse("dashboard:chart-map"), {"group": "none", **params}).json()
    return figure, {trace["name"]: trace for trace in figure["data"]}


def test_a_silent_node_held_by_a_pod_is_held_with_no_telemetry_on_every_page(
    staff_client, silent, fleet_data
):
    node = silent["node-silent"]

    page = staff_client.get(reverse("dashboard:node", args=[node.pk]))
    figure, traces = _map(staff_client, q="node-silent")
    table = staff_client.get(reverse("dashboard:map"), {"q": "node-silent"})
    gpu = page.context["gpu_rows"][5]["gpu"]
    gpu_page = staff_client.get(reverse("dashboard:gpu", args=[gpu.pk]))

    held = next(card for card in page.context["cards"] if card["testid"] == "node-held")
    assert (held["value"], held["unit"]) == ("8", "of 8")
    assert "8 held with no telemetry" in held["note"]
    rows = page.context["gpu_rows"]
    assert [row["state"] for row in rows] == ["held_no_telemetry"] * 8
    assert all(row["holders"][0]["holder"].pod == "gang-0" for row in rows)
    # Its pod holds them in the newest window only: the range's table counts the hours that
    # ended (README "Which hours a range counts") and says the hour in progress is left out;
    # when the data was written on the hour, that window closed an hour and is counted.
    holders_note = "the hour in progress counts once it ends" in page.content.decode()
    window_closed_an_hour = fleet_data.now == fleet_data.now.replace(minute=0, second=0)
    assert holders_note is not window_closed_an_hour
    assert gpu_page.context["row"]["state_label"] == "held · no telemetry"
    assert "gang-0" in gpu_page.content.decode()
    state = traces["State"]
    assert state["z"][0] == [HELD_NODATA] * 8
    assert all("held · no telemetry" in text and "gang-0" in text for text in state["text"][0])
    [row] = table.context["rows"]
    assert row["allocated"] == pytest.approx(8.0)
    assert row["no_data"] == pytest.approx(8.0)


def test_a_silent_gpu_nobody_holds_is_no_telemetry_never_free(staff_client, silent):
    node = silent["node-dark"]

    page = staff_client.get(reverse("dashboard:node", args=[node.pk]))
    figure, traces = _map(staff_client, q="node-dark")

    assert [row["state"] for row in page.context["gpu_rows"]] == ["no_telemetry"] * 4
    held = next(card for card in page.context["cards"] if card["testid"] == "node-held")
    assert held["value"] == "0"
    assert traces["State"]["z"][0] == [NO_TELEMETRY] * 4
    assert traces["free (hatched)"]["x"] == []
    assert "free" not in traces["State"]["text"][0][0].split("<br>")[1]


def test_a_lead_sees_another_team_not_its_pod_on_a_silent_gpu(lead_client, silent):
    # Under the default (private) team visibility another team's holder is named only as such.
    node = silent["node-silent"]

    page = lead_client.get(reverse("dashboard:node", args=[node.pk]))
    figure, traces = _map(lead_client, q="node-silent")

    labels = {row["holders"][0]["holder"].label for row in page.context["gpu_rows"]}
    assert labels == {"another team"}
    assert "beta" not in traces["State"]["text"][0][0]
    assert "gang-0" not in page.content.decode()
    assert "gang-0" not in traces["State"]["text"][0][0]


def test_a_time_sliced_node_has_no_empty_replica_column(staff_client, silent):
    figure, traces = _map(staff_client, q="node-sliced")

    assert figure["meta"]["slots"] == 8
    assert figure["layout"]["xaxis"]["ticktext"] == [f"GPU {i}" for i in range(8)]
    assert traces["Time-sliced GPU"]["x"] == [7.0]


def test_colour_by_team_gives_each_holding_team_its_own_colour(staff_client, fleet_data):
    figure, traces = _map(staff_client, value="team")

    state = traces["State"]
    legend = [trace["name"] for trace in figure["data"] if trace["name"].startswith("team ")]
    row_a = state["y"].index("node-a1")
    # Held on the page: alpha a0, a1 and 3/7 of b3 (2.43 GPUs); beta a2, b0, b2 and b1 (taken
    # by its 2-GPU pod without DCGM series): 4 GPUs, so beta ranks first.
    assert legend == ["team beta", "team alpha"]
    beta, alpha = 4, 5  # after the four state categories
    # A MIG node on the page: every GPU is 7 columns wide.
    assert state["z"][row_a][0] == alpha
    assert state["z"][row_a][7] == alpha
    assert state["z"][row_a][14] == beta
    assert state["z"][row_a][21] == 0  # free
    assert traces["SM_ACTIVE"]["showscale"] is False
    colors = {entry[1] for entry in state["colorscale"]}
    assert len(colors) == 6


def test_an_empty_node_chart_spans_the_range_not_minus_one_to_six(staff_client, fleet_data):
    from fleet.models import Node

    node = Node.objects.create(cluster=fleet_data.cluster, name="node-new", gpu_capacity=8)

    figure = staff_client.get(
        reverse("dashboard:chart-node", args=[node.pk]), {"range": "24h"}
    ).json()

    assert figure["meta"]["empty"] is True
    xaxis = figure["layout"]["xaxis"]
    assert xaxis["type"] == "date"
    start, end = (datetime.fromisoformat(value) for value in xaxis["range"])
    assert end - start == timedelta(hours=24)
    assert abs((end - fleet_data.now).total_seconds()) < 3600


def test_a_mig_node_chart_draws_one_line_per_physical_gpu(staff_client, fleet_data):
    figure = staff_client.get(reverse("dashboard:chart-node", args=[fleet_data.node_b.pk])).json()

    names = [trace["name"] for trace in figure["data"]]
    assert names == ["GPU 0", "GPU 1", "GPU 2", "GPU 3 · MIG 3g.40gb, 4g.40gb"]
    # GPU 3: 3g at 60 % and 4g at 0 %, weighted by compute slices.
    assert figure["data"][3]["y"][-1] == pytest.approx(60.0 * 3 / 7, abs=0.01)


def test_an_empty_gpu_chart_spans_the_range_too(staff_client, silent):
    from fleet.models import Gpu

    gpu = Gpu.objects.filter(node=silent["node-silent"]).first()

    for name in ("dashboard:chart-gpu-activity", "dashboard:chart-gpu-memory"):
        figure = staff_client.get(reverse(name, args=[gpu.pk]), {"range": "7d"}).json()
        xaxis = figure["layout"]["xaxis"]
        start, end = (datetime.fromisoformat(value) for value in xaxis["range"])
        assert xaxis["type"] == "date"
        assert end - start == timedelta(days=7)


def test_a_node_dcgm_never_reported_counts_what_its_pods_hold(staff_client, fleet_data):
    """node-unseen: 4 GPUs by kube-state-metrics, no GPU of it ever reported by DCGM, a 4-GPU pod
    on it now. The overview counts those 4 as held; the node table and node page did not."""
    from fleet.models import Node
    from ledger.models import GpuUsage
    from tests.pages.conftest import _usage

    node = Node.objects.create(
        cluster=fleet_data.cluster,
        name="node-unseen",
        flavor="h100",
        gpu_product="NVIDIA-H100-80GB-HBM3",
        gpu_capacity=4,
        gpu_allocatable=4,
    )
    held = _usage(
        fleet_data.cluster,
        fleet_data.now,
        None,
        allocated=True,
        pod="unseen-0",
        activity=None,
        gpus=4.0,
        capacity_gpus=4.0,
        node_name="node-unseen",
        team=fleet_data.team_b,
        cluster_queue=fleet_data.cq_b,
        workload=fleet_data.workload_b,
        namespace="ns-beta",
    )
    GpuUsage.objects.bulk_create([held])

    [row] = staff_client.get(reverse("dashboard:map"), {"q": "node-unseen"}).context["rows"]
    page = staff_client.get(reverse("dashboard:node", args=[node.pk]))

    assert row["allocated"] == pytest.approx(4.0)
    assert (row["cells"]["gpus"], row["cells"]["held"]) == ("4", "4")
    assert row["story"].held_no_telemetry == pytest.approx(4.0)
    card = next(card for card in page.context["cards"] if card["testid"] == "node-held")
    assert "+4 GPUs held that DCGM shows on no GPU" in card["note"]
