"""Read APIs: fields, filters, ordering, pagination and bounded query counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from fleet.models import Cluster, Gpu, IngestRun, Node
from quotas.models import (
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    Team,
    TeamNamespace,
    Workload,
    WorkloadTransition,
)

T0 = datetime(2026, 2, 1, tzinfo=UTC)


@pytest.fixture
def fleet(db):
    """Many of everything, so N+1 queries would show in the counts."""
    cluster = Cluster.objects.create(name="big")
    teams = [Team.objects.create(name=f"team-{i}") for i in range(6)]
    cohort = Cohort.objects.create(cluster=cluster, name="pool")
    for team in teams:
        TeamNamespace.objects.create(team=team, cluster=cluster, namespace=f"{team.name}-ns")
    for i in range(6):
        node = Node.objects.create(cluster=cluster, name=f"node-{i}", gpu_capacity=2)
        for index in range(2):
            Gpu.objects.create(
                cluster=cluster, node=node, host=node.name, uuid=f"GPU-{i}-{index}", index=index
            )
        IngestRun.objects.create(cluster=cluster, source="dcgm", status="success",
                                 started_at=T0 + timedelta(minutes=i))  # fmt: skip
    for i, team in enumerate(teams):
        queue = ClusterQueue.objects.create(
            cluster=cluster, name=f"cq-{i}", cohort=cohort, cohort_name="pool", team=team
        )
        ClusterQueueQuota.objects.create(
            cluster_queue=queue, flavor_name="h100", resource="nvidia.com/gpu", nominal=8
        )
        for minutes, total in ((1, 2), (2, 5)):
            ClusterQueueSample.objects.create(
                cluster_queue=queue,
                flavor_name="h100",
                sampled_at=T0 + timedelta(minutes=minutes),
                total=Decimal(total),
                nominal=Decimal(8),
            )
        local = LocalQueue.objects.create(
            cluster=cluster,
            namespace=f"{team.name}-ns",
            name="lq",
            cluster_queue=queue,
            cluster_queue_name=queue.name,
        )
        for j in range(3):
            workload = Workload.objects.create(
                cluster=cluster,
                namespace=local.namespace,
                name=f"job-{j}",
                queue_name="lq",
                local_queue=local,
                cluster_queue=queue,
                state="admitted" if j else "succeeded",
                finished_at=None if j else T0 - timedelta(days=2),
            )
            WorkloadTransition.objects.create(workload=workload, kind="created", at=T0)
            WorkloadTransition.objects.create(
                workload=workload, kind="admitted", at=T0 + timedelta(seconds=5)
            )
    return cluster


@pytest.mark.parametrize(
    ("url", "count", "max_queries"),
    [
        ("/api/v1/clusters/", 1, 3),
        ("/api/v1/nodes/", 6, 3),
        ("/api/v1/gpus/", 12, 3),
        ("/api/v1/ingest-runs/", 6, 3),
        ("/api/v1/teams/", 6, 5),
        ("/api/v1/cohorts/", 1, 4),
        ("/api/v1/cluster-queues/", 6, 5),
        ("/api/v1/local-queues/", 6, 3),
        ("/api/v1/workloads/", 18, 4),
    ],
)
def test_list_endpoints_run_a_bounded_number_of_queries(
    staff_client, fleet, django_assert_max_num_queries, url, count, max_queries
):
    # Sessions, auth and the visibility check are not part of the budget: force_authenticate.
    with django_assert_max_num_queries(max_queries + 1):
        response = staff_client.get(url)

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == count
    assert len(body["results"]) == count


def test_cluster_queues_carry_quotas_and_the_latest_usage_per_flavor(staff_client, fleet):
    # Usage is "now" (quotas.now): asked a minute after the newest sample, which is fresh.
    with time_machine.travel(T0 + timedelta(minutes=3), tick=False):
        response = staff_client.get("/api/v1/cluster-queues/", {"name": "cq-0"})
    item = response.json()["results"][0]

    assert item["team"]["name"] == "team-0"
    assert item["quotas"][0]["nominal"] == "8.000000"
    assert len(item["usage"]) == 1
    assert item["usage"][0]["total"] == "5.000000"  # the newer sample, not the first
    assert item["usage"][0]["sampled_at"] == "2026-02-01T00:02:00Z"


def test_workloads_carry_their_transitions(staff_client, fleet):
    item = staff_client.get("/api/v1/workloads/", {"limit": 1}).json()["results"][0]

    assert [t["kind"] for t in item["transitions"]] == ["created", "admitted"]
    assert item["team"] == "team-0"
    assert item["cluster"] == "big"


@pytest.mark.parametrize(
    ("params", "count"),
    [
        ({"state": "admitted"}, 12),
        ({"state": ["admitted", "succeeded"]}, 18),
        ({"team": "team-1"}, 3),
        ({"queue": "cq-2"}, 3),
        ({"namespace": "team-3-ns"}, 3),
        ({"since": "2026-01-31T00:00:00Z"}, 12),
        ({"since": "2026-01-01T00:00:00Z"}, 18),
        ({"cluster": "nope"}, 0),
    ],
)
def test_workload_filters(staff_client, fleet, params, count):
    response = staff_client.get("/api/v1/workloads/", params)

    assert response.status_code == 200
    assert response.json()["count"] == count


def test_a_bad_filter_value_is_a_400_naming_it(staff_client, fleet):
    response = staff_client.get("/api/v1/workloads/", {"state": "napping"})

    assert response.status_code == 400
    assert "state" in response.json()


def test_lists_are_ordered_and_paginated(staff_client, fleet):
    first = staff_client.get("/api/v1/nodes/", {"ordering": "-name", "limit": 2}).json()
    second = staff_client.get(
        "/api/v1/nodes/", {"ordering": "-name", "limit": 2, "offset": 2}
    ).json()

    assert [n["name"] for n in first["results"]] == ["node-5", "node-4"]
    assert [n["name"] for n in second["results"]] == ["node-3", "node-2"]
    assert first["next"] is not None


def test_clusters_count_present_nodes_and_gpus(staff_client, fleet):
    Node.objects.filter(name="node-0").update(deleted_at=T0)

    item = staff_client.get("/api/v1/clusters/").json()["results"][0]

    assert item["node_count"] == 5
    assert item["gpu_count"] == 12
    assert "prometheus_secret_env" not in item


def test_gpu_and_ingest_run_filters(staff_client, fleet):
    gpus = staff_client.get("/api/v1/gpus/", {"node": "node-2"}).json()
    runs = staff_client.get(
        "/api/v1/ingest-runs/", {"since": "2026-02-01T00:03:00Z", "source": "dcgm"}
    ).json()

    assert gpus["count"] == 2
    assert {g["node"]["name"] for g in gpus["results"]} == {"node-2"}
    assert runs["count"] == 3
