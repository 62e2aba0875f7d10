"""ledger.store.write_window: idempotent, set-based writes of one window."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.timewindows import Window
from fleet.choices import ActivitySource
from fleet.constants import GPU_SEEN_REFRESH_SECONDS
from fleet.ingest import WindowInput, build_window
from fleet.models import Gpu, Node
from ledger import partitions
from ledger.models import GpuUsage
from ledger.store import close_missing_allocations, write_window
from quotas.models import Allocation, ClusterQueue, LocalQueue, Team, TeamNamespace, Workload
from tests.fleet.test_ingest import (
    A100,
    H100,
    WINDOW,
    fixture_input,
    instant_items,
    ksm_inputs,
)

pytestmark = pytest.mark.django_db

NEXT = Window(WINDOW.end, WINDOW.end + timedelta(minutes=1))


def usage_snapshot(cluster):
    return sorted(
        GpuUsage.objects.filter(cluster=cluster).values_list(
            "window_end",
            "gpu_key",
            "gpu_id",
            "namespace",
            "pod",
            "container",
            "node_name",
            "flavor",
            "gpu_model",
            "workload_id",
            "local_queue_id",
            "cluster_queue_id",
            "team_id",
            "allocated",
            "gpus",
            "capacity_gpus",
            "shared",
            "sm_active",
            "activity",
            "activity_source",
            "samples",
        )
    )


def snapshot(model, cluster):
    return sorted(
        tuple(sorted(row.items())) for row in model.objects.filter(cluster=cluster).values()
    )


def links(cluster):
    return sorted(
        Allocation.gpu_devices.through.objects.filter(allocation__cluster=cluster).values_list(
            "allocation__pod", "gpu__uuid", "gpu__gi_id"
        )
    )


def synthetic_input(gpus: int, window: Window = WINDOW) -> WindowInput:
    """``gpus`` GPUs on 8-GPU hosts, every other one held by a one-GPU pod with a request."""
    items, requests = [], []
    for n in range(gpus):
        labels = {
            "gpu": str(n % 8),
            "UUID": f"GPU-{n:08d}",
            "modelName": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": f"00000000:{n % 8:02X}:00.0",
            "Hostname": f"node-{n // 8:04d}",
        }
        if n % 2 == 0:
            labels.update(exported_namespace=f"ns-{n % 3}", exported_pod=f"pod-{n}")
            requests.append(
                {
                    "metric": {
                        "namespace": f"ns-{n % 3}",
                        "pod": f"pod-{n}",
                        "uid": f"uid-{n}",
                        "container": "main",
                        "node": labels["Hostname"],
                        "resource": "nvidia_com_gpu",
                    },
                    "value": [window.end.timestamp(), "1"],
                }
            )
        items.append({"metric": labels, "value": [window.end.timestamp(), "0.5"]})
    return WindowInput(
        window=window,
        dcgm_avg={"sm_active": items, "gr_engine_active": items},
        gpu_requests=requests,
    )


def test_writing_the_same_window_twice_leaves_identical_rows(cluster):
    batch = build_window(fixture_input())

    first = write_window(cluster, batch)
    usage, gpus, allocations = (
        usage_snapshot(cluster),
        snapshot(Gpu, cluster),
        snapshot(Allocation, cluster),
    )
    nodes, gpu_links = snapshot(Node, cluster), links(cluster)
    second = write_window(cluster, build_window(fixture_input()))

    assert (first.gpus_created, first.gpus_updated) == (19, 0)
    assert (second.gpus_created, second.gpus_updated) == (0, 19)
    assert first.usage_rows == second.usage_rows == GpuUsage.objects.count() == 19
    assert first.allocations == second.allocations == Allocation.objects.count() == 8
    assert usage_snapshot(cluster) == usage
    assert snapshot(Gpu, cluster) == gpus
    assert snapshot(Allocation, cluster) == allocations
    assert snapshot(Node, cluster) == nodes
    assert links(cluster) == gpu_links
    assert len(gpu_links) == 10  # 6 H100s + 4 MIG instances held


def test_the_written_rows_keep_the_fixture_figures(cluster):
    write_window(cluster, build_window(fixture_input()))

    usage = GpuUsage.objects.filter(cluster=cluster, window_end=WINDOW.end)
    held = {}
    for row in usage.allocated().filter(gpu__gi_id=""):
        held[row.namespace] = held.get(row.namespace, 0) + row.gpus
    assert held == {"team-a": 4, "team-b": 2}
    assert usage.idle().count() == 2
    assert sorted(usage.idle().values_list("pod", flat=True)) == [
        "notebook-alice-0",
        "notebook-bob-0",
    ]
    assert set(usage.values_list("gpu_model", flat=True)) == {
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A100-SXM4-80GB",
    }
    assert usage.filter(gpu__isnull=True).count() == 0
    alice = usage.get(pod="notebook-alice-0")
    assert alice.gpu.uuid.startswith("GPU-e07a4c35-")
    assert alice.activity_source == ActivitySource.SM_ACTIVE
    assert alice.window_start == WINDOW.start
    pretrain = Allocation.objects.get(pod="llm-pretrain-0-8vw5d")
    assert pretrain.gpu_devices.count() == 2
    assert pretrain.node.name == H100
    assert (pretrain.started_at, pretrain.ended_at, pretrain.last_seen_at) == (
        WINDOW.start,
        None,
        WINDOW.end,
    )
    assert Gpu.objects.filter(cluster=cluster, host=A100).exclude(gi_id="").count() == 11


def test_a_recollected_window_replaces_its_rows_instead_of_adding(cluster):
    write_window(cluster, build_window(fixture_input()))
    # Late data: the same window, now with one H100 busy and one MIG instance gone.
    items = instant_items()
    for entry in items:
        if entry["metric"].get("exported_pod") == "notebook-alice-0":
            entry["value"][1] = "0.9"
    items = [i for i in items if not (i["metric"].get("GPU_I_ID") == "13")]

    result = write_window(cluster, build_window(fixture_input(dcgm_avg={"sm_active": items})))

    assert result.usage_rows == 18
    assert GpuUsage.objects.filter(cluster=cluster, window_end=WINDOW.end).count() == 18
    assert GpuUsage.objects.get(pod="notebook-alice-0").activity == 0.9
    # The inventory keeps the GPU instance it saw before.
    assert Gpu.objects.filter(cluster=cluster).count() == 19


def test_a_later_window_adds_rows_and_advances_last_seen(cluster):
    write_window(cluster, build_window(fixture_input()))
    write_window(cluster, build_window(fixture_input(window=NEXT)))

    assert GpuUsage.objects.filter(cluster=cluster).count() == 38
    # A GPU's last_seen_at is refreshed at most every GPU_SEEN_REFRESH_SECONDS...
    assert set(Gpu.objects.values_list("first_seen_at", "last_seen_at")) == {
        (WINDOW.end, WINDOW.end)
    }
    # ...while a pod's is exact: it decides when its allocation ends.
    pretrain = Allocation.objects.get(pod="llm-pretrain-0-8vw5d")
    assert (pretrain.started_at, pretrain.last_seen_at) == (WINDOW.start, NEXT.end)
    later_end = WINDOW.end + timedelta(seconds=GPU_SEEN_REFRESH_SECONDS + 60)
    later = Window(later_end - timedelta(minutes=1), later_end)
    write_window(cluster, build_window(fixture_input(window=later)))
    assert set(Gpu.objects.values_list("first_seen_at", "last_seen_at")) == {
        (WINDOW.end, later.end)
    }
    # Re-collecting an older window rolls nothing back.
    write_window(cluster, build_window(fixture_input(window=NEXT)))
    assert set(Gpu.objects.values_list("last_seen_at", flat=True)) == {later.end}
    pretrain.refresh_from_db()
    assert pretrain.last_seen_at == later.end


def test_allocations_end_when_their_pod_is_gone_and_old_windows_do_not_end_them(cluster):
    write_window(cluster, build_window(fixture_input()))
    requests, _ = ksm_inputs()
    requests = [r for r in requests if r["metric"]["pod"] != "notebook-alice-0"]
    items = [i for i in instant_items() if i["metric"].get("exported_pod") != "notebook-alice-0"]

    write_window(
        cluster,
        build_window(
            fixture_input(window=NEXT, dcgm_avg={"sm_active": items}, gpu_requests=requests)
        ),
    )

    alice = Allocation.objects.get(pod="notebook-alice-0")
    assert alice.ended_at == NEXT.start
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 7
    # Re-collecting the first window (alice present then) leaves her ended after it.
    write_window(cluster, build_window(fixture_input()))
    alice.refresh_from_db()
    assert alice.ended_at == NEXT.start
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 7


def test_an_allocation_seen_again_is_reopened(cluster):
    write_window(cluster, build_window(fixture_input()))
    later = Window(NEXT.end, NEXT.end + timedelta(minutes=1))
    close_missing_allocations(cluster, NEXT, seen_keys=set())
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 0

    write_window(cluster, build_window(fixture_input(window=later)))

    assert Allocation.objects.filter(ended_at__isnull=True).count() == 8
    assert set(Allocation.objects.values_list("started_at", flat=True)) == {WINDOW.start}


def test_close_missing_allocations_leaves_allocations_seen_in_the_window(cluster):
    write_window(cluster, build_window(fixture_input()))
    seen = {
        (a.namespace, a.pod, a.pod_uid) for a in Allocation.objects.exclude(pod="notebook-bob-0")
    }

    closed = close_missing_allocations(cluster, NEXT, seen)

    assert closed == 1
    assert list(
        Allocation.objects.filter(ended_at__isnull=False).values_list("pod", flat=True)
    ) == ["notebook-bob-0"]


def test_nodes_are_created_once_and_keep_fields_the_kueue_sync_owns(cluster):
    Node.objects.create(cluster=cluster, name=H100, flavor="h100-flavor", gpu_capacity=8)

    write_window(cluster, build_window(fixture_input()))
    write_window(cluster, build_window(fixture_input(window=NEXT)))

    h100 = Node.objects.get(cluster=cluster, name=H100)
    assert (h100.flavor, h100.gpu_capacity, h100.gpu_product) == (
        "h100-flavor",
        8,
        "NVIDIA H100 80GB HBM3",
    )
    assert Node.objects.get(cluster=cluster, name=A100).gpu_product == "NVIDIA A100-SXM4-80GB"
    assert Node.objects.filter(cluster=cluster).count() == 2
    assert set(GpuUsage.objects.filter(node_name=H100).values_list("flavor", flat=True)) == {
        "h100-flavor"
    }
    assert set(GpuUsage.objects.filter(node_name=A100).values_list("flavor", flat=True)) == {""}
    assert Gpu.objects.filter(host=H100, node__name=H100).count() == 8


def test_a_node_product_set_by_the_sync_is_not_overwritten(cluster):
    Node.objects.create(cluster=cluster, name=H100, gpu_product="NVIDIA-H100-80GB-HBM3")

    write_window(cluster, build_window(fixture_input()))

    assert Node.objects.get(name=H100).gpu_product == "NVIDIA-H100-80GB-HBM3"


def test_pods_resolve_to_queues_and_teams_through_kueue_labels(cluster):
    team_a = Team.objects.create(name="team-a")
    cq = ClusterQueue.objects.create(cluster=cluster, name="team-a-cq", team=team_a)
    notebooks = LocalQueue.objects.create(
        cluster=cluster,
        namespace="team-a",
        name="notebooks",
        cluster_queue=cq,
        cluster_queue_name=cq.name,
    )
    LocalQueue.objects.create(
        cluster=cluster, namespace="team-a", name="training", cluster_queue_name=cq.name
    )
    requests, pod_labels = ksm_inputs()
    for entry in pod_labels:
        if entry["metric"]["pod"] == "notebook-alice-0":
            entry["metric"]["label_kueue_x_k8s_io_local_queue_name"] = "notebooks"

    write_window(cluster, build_window(fixture_input(pod_labels=pod_labels)))

    alice = GpuUsage.objects.get(pod="notebook-alice-0")
    assert (alice.local_queue, alice.cluster_queue, alice.team) == (notebooks, cq, team_a)
    # Two LocalQueues in team-a and no label: the other team-a pods stay unresolved.
    infer = GpuUsage.objects.get(pod="llm-infer-6b7d9c5f8-k2m4x")
    assert (infer.local_queue, infer.cluster_queue, infer.team) == (None, None, None)


def test_pods_resolve_through_a_cluster_queue_label(cluster):
    team_b = Team.objects.create(name="team-b")
    cq = ClusterQueue.objects.create(cluster=cluster, name="team-b-cq", team=team_b)
    requests, pod_labels = ksm_inputs()
    for entry in pod_labels:
        if entry["metric"]["namespace"] == "team-b":
            entry["metric"]["label_kueue_x_k8s_io_cluster_queue_name"] = "team-b-cq"

    write_window(cluster, build_window(fixture_input(pod_labels=pod_labels)))

    rows = GpuUsage.objects.filter(namespace="team-b")
    assert rows.count() == 4
    assert set(rows.values_list("cluster_queue", "team")) == {(cq.pk, team_b.pk)}


def test_pods_resolve_through_the_namespaces_only_local_queue_then_team_namespace(cluster):
    team_a = Team.objects.create(name="team-a")
    team_b = Team.objects.create(name="team-b")
    cq = ClusterQueue.objects.create(cluster=cluster, name="team-a-cq", team=team_a)
    only = LocalQueue.objects.create(
        cluster=cluster, namespace="team-a", name="default", cluster_queue_name=cq.name
    )
    TeamNamespace.objects.create(cluster=cluster, team=team_b, namespace="team-b")

    write_window(cluster, build_window(fixture_input()))

    team_a_rows = GpuUsage.objects.filter(namespace="team-a")
    assert team_a_rows.count() == 6
    # The LocalQueue names its ClusterQueue only by name here; it still resolves.
    assert set(team_a_rows.values_list("local_queue", "cluster_queue", "team")) == {
        (only.pk, cq.pk, team_a.pk)
    }
    team_b_rows = GpuUsage.objects.filter(namespace="team-b")
    assert set(team_b_rows.values_list("local_queue", "cluster_queue", "team")) == {
        (None, None, team_b.pk)
    }
    assert GpuUsage.objects.filter(allocated=False, team__isnull=False).count() == 0


def test_pods_resolve_to_the_workload_of_a_stored_allocation(cluster):
    team_a = Team.objects.create(name="team-a")
    cq = ClusterQueue.objects.create(cluster=cluster, name="team-a-cq", team=team_a)
    lq = LocalQueue.objects.create(
        cluster=cluster,
        namespace="team-a",
        name="training",
        cluster_queue=cq,
        cluster_queue_name=cq.name,
    )
    workload = Workload.objects.create(
        cluster=cluster,
        namespace="team-a",
        name="job-llm-pretrain-1a2b3",
        local_queue=lq,
        cluster_queue=cq,
    )
    Allocation.objects.create(
        cluster=cluster,
        namespace="team-a",
        pod="llm-pretrain-0-8vw5d",
        pod_uid="6f2a9c1e-4b7d-4e3a-9f58-1c0d7e2b8a64",
        gpus=2,
        workload=workload,
        started_at=WINDOW.start - timedelta(hours=1),
    )

    write_window(cluster, build_window(fixture_input()))

    rows = GpuUsage.objects.filter(pod="llm-pretrain-0-8vw5d")
    assert set(rows.values_list("workload", "local_queue", "cluster_queue", "team")) == {
        (workload.pk, lq.pk, cq.pk, team_a.pk)
    }
    allocation = Allocation.objects.get(pod="llm-pretrain-0-8vw5d")
    assert allocation.workload == workload
    assert allocation.started_at == WINDOW.start - timedelta(hours=1)
    assert allocation.gpu_devices.count() == 2
    assert Allocation.objects.filter(pod="llm-pretrain-0-8vw5d").count() == 1


def test_the_query_count_does_not_grow_with_the_number_of_gpus(
    cluster, django_assert_max_num_queries
):
    # The day's partition exists, as the beat task creates it ahead (PostgreSQL).
    partitions.ensure_for([WINDOW.end])

    def measure(size):
        cluster.usage.all().delete()
        cluster.allocations.all().delete()
        cluster.gpus.all().delete()
        cluster.nodes.all().delete()
        with django_assert_max_num_queries(40):
            with CaptureQueriesContext(connection) as cold:
                write_window(cluster, build_window(synthetic_input(size)))
        # The next window: GPUs and pods seen again.
        with django_assert_max_num_queries(40):
            with CaptureQueriesContext(connection) as warm:
                write_window(cluster, build_window(synthetic_input(size, window=NEXT)))
        assert GpuUsage.objects.filter(cluster=cluster).count() == size * 2
        assert Allocation.objects.filter(cluster=cluster, ended_at__isnull=True).count() == size / 2
        return len(cold), len(warm)

    assert measure(20) == measure(200)
