"""How the fleet map and the overview read, not only what they show: the reads that made them
slow at 50,000 GPUs (bench/pages.py) must not come back.

- The map builds no ``Gpu`` model instance for its hundreds of GPUs (tuples, ``GpuRef``).
- The map's reads of the newest window take its GPUs by a subquery, not a literal list of ids.
- The map's node table reads GPU states without joining workloads and teams, and its counts are
  those the states with holders give.
- The overview scans pending workloads once (the card and pending-while-free share the scan).
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard.fleet_map import node_summaries, page_states
from dashboard.queries.now import latest_windows
from fleet.models import Gpu, Node

pytestmark = pytest.mark.django_db

MAP_URLS = [
    ("dashboard:map", {}),
    ("dashboard:chart-map", {}),
    ("dashboard:chart-map", {"value": "mean"}),
    ("dashboard:chart-map", {"value": "team"}),
]


def _queries(client, name: str, params: dict) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(reverse(name), params)
    assert response.status_code == 200
    return [query["sql"] for query in captured.captured_queries]


def test_the_map_builds_no_gpu_model_instance(staff_client, silent):
    built: list[Gpu] = []

    def count(sender, instance, **kwargs):
        built.append(instance)

    post_init.connect(count, sender=Gpu)
    try:
        for name, params in MAP_URLS:
            assert staff_client.get(reverse(name), params).status_code == 200
    finally:
        post_init.disconnect(count, sender=Gpu)

    assert built == []


def test_the_map_reads_usage_now_by_a_gpu_subquery_not_a_literal_id_list(staff_client, silent):
    # (The mean over the range keeps its literal ids: PostgreSQL probes the (gpu, window_end)
    # index per GPU for them, where a subquery gets a scan of the whole range.)
    literal_ids = re.compile(r'"gpu_id" IN \(\s*%s|"gpu_id" IN \(\s*\d')

    for name, params in MAP_URLS:
        if params.get("value") == "mean":
            continue
        usage = [sql for sql in _queries(staff_client, name, params) if "fleet_gpuusage" in sql]
        assert usage, name
        assert not [sql for sql in usage if literal_ids.search(sql)], (name, params)


def test_the_map_table_reads_states_without_joining_workloads_or_teams(staff_client, silent):
    usage = [sql for sql in _queries(staff_client, "dashboard:map", {}) if "fleet_gpuusage" in sql]

    assert usage
    assert not [sql for sql in usage if "quotas_workload" in sql or "quotas_team" in sql]


def test_node_counts_are_the_same_read_with_or_without_holders(fleet_data, silent):
    # Both nodes of fleet_data (a time-sliced GPU, a MIG-split GPU, a 2-GPU pod without DCGM
    # series) and the silent, dark and time-sliced nodes.
    nodes = list(Node.objects.select_related("cluster").order_by("name"))
    windows = latest_windows()

    with_holders = page_states(nodes, windows, None)
    counts_only = page_states(nodes, windows, None, holders=False)

    assert len(nodes) == 5
    assert node_summaries(nodes, counts_only) == node_summaries(nodes, with_holders)
    assert {pk: state.state for pk, state in counts_only.items()} == {
        pk: state.state for pk, state in with_holders.items()
    }
    assert all(not state.holders for state in counts_only.values())
    # Not vacuous: the silent node's 8 GPUs are held through the allocation alone.
    silent_gpus = [s for s in with_holders.values() if s.gpu.node_id == silent["node-silent"].pk]
    assert [s.state for s in silent_gpus] == ["held_no_telemetry"] * 8
    assert all(s.holders[0].pod == "gang-0" and not s.placed for s in silent_gpus)


def test_the_overview_scans_pending_workloads_once(staff_client, fleet_data):
    queries = _queries(staff_client, "dashboard:overview", {})

    workload_scans = [sql for sql in queries if re.search(r'FROM "quotas_workload"', sql)]
    assert len(workload_scans) == 1, workload_scans
