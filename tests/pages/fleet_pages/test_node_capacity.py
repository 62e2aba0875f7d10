"""The fleet map's node table and the node pages count a node's GPUs one way, and the map's two
legends draw "free" one way.

Kubernetes advertises ``nvidia.com/gpu`` as the device plugin sees it: node-a1's time-sliced
GPU is advertised once per replica (2 replicas: 3 + 2 = 5), and node-b1, a MIG node in the mixed
strategy, advertises only its 3 whole GPUs (its MIG instances are other resources). DCGM reports
node-a1's 4 GPUs, and node-b1's 3 whole GPUs plus GPU 3 split into a 3g and a 4g instance. By
hand: node-a1 has 4 GPUs on 4 devices; node-b1 3 + 3/7 + 4/7 = 4 GPUs on 5 devices; and with
the 4g instance made a 2g one, 3 + 3/7 + 2/7 = 3.714… GPUs, "3.7".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from dashboard.fleet_map import NO_TELEMETRY, STATE_COLORS
from fleet.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def advertised(fleet_data):
    Node.objects.filter(pk=fleet_data.node_a.pk).update(gpu_capacity=5)  # 2 replicas of GPU 2
    Node.objects.filter(pk=fleet_data.node_b.pk).update(gpu_capacity=3)  # MIG: whole GPUs only
    return fleet_data


def _map_gpus(client) -> dict[str, str]:
    body = client.get(reverse("dashboard:map"), {"group": "none"}).content.decode()
    table = body.split('data-testid="nodes-table"')[1].split("</table>")[0]
    found = re.findall(
        r'<a href="[^"]+">([^<]+)</a>.*?data-testid="node-gpus"[^>]*>([^<]+)</td>', table, re.S
    )
    return dict(found)


def _node_card(client, node) -> dict:
    cards = client.get(reverse("dashboard:node", args=[node.pk])).context["cards"]
    return next(card for card in cards if card["testid"] == "node-gpus")


def test_the_map_table_and_the_node_pages_count_the_same_gpus(staff_client, advertised):
    on_map = _map_gpus(staff_client)
    a1 = _node_card(staff_client, advertised.node_a)
    b1 = _node_card(staff_client, advertised.node_b)

    assert on_map == {"node-a1": "4", "node-b1": "4"}
    assert (a1["value"], b1["value"]) == ("4", "4")
    assert a1["note"].startswith("4 devices")
    assert b1["note"].startswith("5 devices")


def test_a_fractional_mig_node_reads_the_same_on_both_pages(staff_client, advertised):
    mig = advertised.gpus["b3-mig2"]
    mig.slices, mig.mig_profile = 2, "2g.20gb"
    mig.save(update_fields=["slices", "mig_profile"])

    assert _map_gpus(staff_client)["node-b1"] == "3.7"
    assert _node_card(staff_client, advertised.node_b)["value"] == "3.7"


def test_a_node_dcgm_never_reported_counts_what_kubernetes_advertises(staff_client, advertised):
    Node.objects.create(cluster=advertised.cluster, name="node-new", gpu_capacity=8)

    assert _map_gpus(staff_client)["node-new"] == "8"


def test_both_legends_draw_free_as_a_white_cell_crossed_by_one_grey_diagonal(
    staff_client, fleet_data
):
    figure = staff_client.get(reverse("dashboard:chart-map"), {"group": "none"}).json()
    traces = {trace["name"]: trace for trace in figure["data"]}

    legend, cells = traces["Free (not held)"]["marker"], traces["free (hatched)"]["marker"]
    # The chart's legend entry is the mark drawn on the free cells (white: the plot's background).
    assert legend == cells
    assert (legend["symbol"], legend["color"]) == ("line-ne-open", "#9ca3af")
    assert figure["layout"]["plot_bgcolor"] == "#ffffff"
    # The page's legend swatch: one diagonal of the same grey on white, not a hatch.
    css = (Path(settings.BASE_DIR) / "static" / "css" / "app.css").read_text()
    (rule,) = re.findall(r"\.swatch-free \{([^}]*)\}", css)
    assert "repeating" not in rule
    assert "to top right" in rule and "#9ca3af" in rule and "#ffffff" in rule
    # "No telemetry" too: the swatch is the cells' colour.
    (nodata,) = re.findall(r"\.swatch-nodata \{([^}]*)\}", css)
    assert STATE_COLORS[NO_TELEMETRY] in nodata
