"""quotas.sync end to end, LIST: the fixture fleet through the real kubernetes client, a
loopback API server and the database; failed LISTs; a workload's history across syncs."""

from __future__ import annotations

import logging
from collections import defaultdict
from decimal import Decimal
from typing import Any

import pytest
from django.db.models import Sum

from fleet.choices import IngestSource, IngestStatus
from fleet.models import Cluster, IngestRun
from quotas.kueue import KubeError, KueueClient
from quotas.models import (
    Allocation,
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    Workload,
    WorkloadTransition,
)
from quotas.sync import sync_cluster
from tests.kube_api_server import fixture_items
from tests.quotas.conftest import A1, B1, GPU, at, rows, transitions, workload

pytestmark = pytest.mark.django_db


# --- the fixture fleet through the whole path ------------------------------------------------


def test_a_sync_leaves_a_successful_ingest_run(kube_api, kube_cluster) -> None:
    run = sync_cluster(kube_cluster.pk)

    run.refresh_from_db()
    assert run.source == IngestSource.KUEUE
    assert run.status == IngestStatus.SUCCESS
    assert run.cluster == kube_cluster
    # 2 flavors, 2 cohorts, 5 queues, 5 local queues, 16 workloads, 5 classes, 21 pods, 12 nodes
    assert run.records_read == 68
    assert run.skipped == 0
    assert run.rows_written > 0
    assert run.finished_at is not None
    assert run.error == ""


def test_v1beta1_and_v1beta2_clusters_give_the_same_rows(make_kube_api) -> None:
    make_kube_api("v1beta2")
    modern = Cluster.objects.create(name="modern")
    sync_cluster(modern.pk)
    make_kube_api("v1beta1")
    legacy = Cluster.objects.create(name="legacy")
    sync_cluster(legacy.pk)

    modern_rows, legacy_rows = rows(modern), rows(legacy)

    assert modern_rows["workloads"]
    for table in modern_rows:
        assert modern_rows[table] == legacy_rows[table], table


def test_gpu_figures_per_cluster_queue_match_the_readme(kube_api, kube_cluster, expected) -> None:
    sync_cluster(kube_cluster.pk)

    for name, figures in expected["clusterQueues"].items():
        samples = ClusterQueueSample.objects.filter(
            cluster_queue__cluster=kube_cluster, cluster_queue__name=name, resource=GPU
        )
        totals = samples.aggregate(
            admitted=Sum("total"), borrowed=Sum("borrowed"), pending=Sum("pending_demand")
        )
        assert totals["admitted"] == figures["admittedGPUs"], name
        assert totals["borrowed"] == figures["borrowedGPUs"], name
        assert totals["pending"] == figures["pendingGPUDemand"], name
        for flavor in ("h100", "a100"):
            if flavor not in figures:
                continue
            sample = samples.get(flavor_name=flavor)
            assert sample.total == figures[flavor]["admittedGPUs"], (name, flavor)
            assert sample.borrowed == figures[flavor]["borrowedGPUs"], (name, flavor)
            assert sample.nominal == figures[flavor]["nominalGPUs"], (name, flavor)
            assert sample.borrowing_limit == figures[flavor]["borrowingLimitGPUs"], (name, flavor)
            assert sample.lending_limit == figures[flavor]["lendingLimitGPUs"], (name, flavor)
        queue = ClusterQueue.objects.get(cluster=kube_cluster, name=name)
        assert queue.cohort.name == figures["cohort"]
        assert queue.weighted_share == figures["weightedShare"]
        assert (
            Workload.objects.admitted().filter(cluster_queue=queue).count()
            == (figures["admittedWorkloads"])
        )
        assert (
            Workload.objects.pending().filter(cluster_queue=queue).count()
            == (figures["pendingWorkloads"])
        )


def test_cohort_sums_match_the_readme(kube_api, kube_cluster, expected) -> None:
    sync_cluster(kube_cluster.pk)
    nominal: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    reserved: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for quota in ClusterQueueQuota.objects.filter(
        cluster_queue__cluster=kube_cluster, resource=GPU
    ).select_related("cluster_queue"):
        nominal[(quota.cluster_queue.cohort_name, quota.flavor_name)] += quota.nominal
    for cohort in Cohort.objects.filter(cluster=kube_cluster):
        for group in cohort.resource_groups:
            for flavor in group["flavors"]:
                for resource in flavor["resources"]:
                    if resource["name"] == GPU:
                        nominal[(cohort.name, flavor["name"])] += Decimal(resource["nominalQuota"])
    for sample in ClusterQueueSample.objects.filter(
        cluster_queue__cluster=kube_cluster, resource=GPU
    ).select_related("cluster_queue"):
        reserved[(sample.cluster_queue.cohort_name, sample.flavor_name)] += sample.reserved

    for cohort, flavors in expected["cohorts"].items():
        for flavor, figures in flavors.items():
            assert nominal[(cohort, flavor)] == figures["sumOfNominalGPUs"], (cohort, flavor)
            assert reserved[(cohort, flavor)] == figures["reservedGPUs"], (cohort, flavor)


def test_every_pod_is_joined_to_its_workload_queue_and_node(
    kube_api, kube_cluster, expected
) -> None:
    sync_cluster(kube_cluster.pk)

    allocations = {
        f"{a.namespace}/{a.pod}": a
        for a in Allocation.objects.filter(cluster=kube_cluster).select_related(
            "workload__cluster_queue", "workload__local_queue", "node"
        )
    }
    assert len(expected["podToWorkload"]) == 21
    assert set(allocations) == set(expected["podToWorkload"])
    for pod, figures in expected["podToWorkload"].items():
        allocation = allocations[pod]
        assert allocation.workload.name == figures["workload"], pod
        assert allocation.workload.cluster_queue.name == figures["clusterQueue"], pod
        assert allocation.workload.local_queue.name == figures["localQueue"], pod
        assert allocation.node.name == figures["node"], pod
        assert allocation.gpus == figures["gpus"], pod
        assert allocation.node.flavor == figures["flavor"], pod
        assert allocation.ended_at is None


def test_pagination_with_a_small_limit_gives_the_same_rows(make_kube_api) -> None:
    api = make_kube_api()
    whole = Cluster.objects.create(name="whole")
    sync_cluster(whole.pk)
    paged = Cluster.objects.create(name="paged")

    sync_cluster(paged.pk, client=KueueClient.for_cluster(paged, page_size=2))

    assert api.list_count("Pod") == 1 + 11  # one page at 500, then 21 pods two at a time
    assert rows(paged) == rows(whole)


def test_a_repeated_sync_changes_nothing(kube_api, kube_cluster) -> None:
    sync_cluster(kube_cluster.pk)
    first = rows(kube_cluster)

    sync_cluster(kube_cluster.pk)

    assert rows(kube_cluster) == first
    assert WorkloadTransition.objects.count() == len(first["transitions"])


def test_a_sync_stores_how_many_pods_of_each_gang_request_gpus(kube_api, kube_cluster) -> None:
    # The expected counts come straight from the fixture's pod templates.
    gpu_pods = {}
    for item in fixture_items("Workload"):
        total = 0
        for pod_set in item["spec"]["podSets"]:
            containers = pod_set["template"]["spec"].get("containers", [])
            if any(
                float((c.get("resources", {}).get("requests") or {}).get("nvidia.com/gpu", 0)) > 0
                for c in containers
            ):
                total += pod_set.get("count", 1)
        gpu_pods[(item["metadata"]["namespace"], item["metadata"]["name"])] = total

    sync_cluster(kube_cluster.pk)

    stored = {
        (namespace, name): pods
        for namespace, name, pods in Workload.objects.filter(cluster=kube_cluster).values_list(
            "namespace", "name", "gpu_pods"
        )
    }
    assert stored == gpu_pods
    assert any(pods > 1 for pods in gpu_pods.values())


# --- failures --------------------------------------------------------------------------------


def test_a_failed_page_deletes_nothing_and_the_next_sync_recovers(kube_api, kube_cluster) -> None:
    sync_cluster(kube_cluster.pk)
    kube_api.delete("Workload", B1[1], namespace=B1[0])
    kube_api.modify(
        "ClusterQueue", "team-b", lambda o: o["status"]["fairSharing"].update(weightedShare=7)
    )
    kube_api.fail("/workloads", 500, after=1, message="etcdserver: request timed out")

    run = sync_cluster(kube_cluster.pk, client=KueueClient.for_cluster(kube_cluster, page_size=5))

    assert run.status == IngestStatus.PARTIAL
    assert "Workload" in run.error
    assert "etcdserver: request timed out" in run.error
    assert not Workload.objects.filter(deleted_at__isnull=False).exists()
    assert workload(B1).state == "admitted"
    # The kinds that did list are written.
    assert ClusterQueue.objects.get(name="team-b").weighted_share == 7

    run = sync_cluster(kube_cluster.pk, client=KueueClient.for_cluster(kube_cluster, page_size=5))

    assert run.status == IngestStatus.SUCCESS
    assert run.error == ""
    gone = workload(B1)
    assert gone.deleted_at is not None
    assert ("deleted", gone.deleted_at) in transitions(B1)
    assert Workload.objects.filter(deleted_at__isnull=True).count() == 15


def test_when_every_list_fails_the_run_fails_and_raises_a_transient_error(
    kube_api, kube_cluster
) -> None:
    sync_cluster(kube_cluster.pk)
    kube_api.fail(lambda method, path, query: "limit" in query, 503, times=100)

    with pytest.raises(KubeError) as caught:
        sync_cluster(kube_cluster.pk)

    assert not caught.value.permanent
    run = IngestRun.objects.latest("started_at")
    assert run.status == IngestStatus.FAILED
    assert "503" in run.error
    assert not Workload.objects.filter(deleted_at__isnull=False).exists()
    assert not Allocation.objects.filter(ended_at__isnull=False).exists()


def test_bad_credentials_fail_the_run_with_a_permanent_error(kube_api, kube_cluster) -> None:
    kube_api.token = "rotated"

    with pytest.raises(KubeError) as caught:
        sync_cluster(kube_cluster.pk)

    assert caught.value.permanent
    assert caught.value.status == 401
    run = IngestRun.objects.get(cluster=kube_cluster)
    assert run.status == IngestStatus.FAILED
    assert "401" in run.error
    assert not Workload.objects.exists()


def test_forbidden_pods_leave_a_partial_run_without_ending_allocations(
    kube_api, kube_cluster
) -> None:
    sync_cluster(kube_cluster.pk)
    kube_api.fail("/api/v1/pods", 403, message='pods is forbidden: User "gpuledger" cannot list')

    run = sync_cluster(kube_cluster.pk)

    assert run.status == IngestStatus.PARTIAL
    assert "pods is forbidden" in run.error
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 21


def test_malformed_objects_are_skipped_logged_and_counted(kube_api, kube_cluster, caplog) -> None:
    template = fixture_items("Workload")[0]
    nameless = {**template, "metadata": {"namespace": "team-a", "uid": "u-1"}}
    wrong_types = {**template, "metadata": {"name": "wrong-types", "namespace": "team-a"}}
    wrong_types["spec"] = {"podSets": "eight GPUs please"}
    kube_api.load("Workload", [nameless, wrong_types])

    with caplog.at_level(logging.WARNING):
        run = sync_cluster(kube_cluster.pk)

    assert run.status == IngestStatus.PARTIAL
    assert run.skipped == 2
    assert sum(n for reason, n in run.skip_reasons.items() if reason.startswith("Workload")) == 2
    assert Workload.objects.count() == 16
    assert not Workload.objects.filter(name="wrong-types").exists()
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("wrong-types" in message for message in logged)


# --- workload history across syncs -----------------------------------------------------------


def evict_a1(obj: dict[str, Any]) -> None:
    when = "2026-08-22T12:05:00Z"
    message = (
        "Preempted to accommodate a workload (UID: 11111111-2222-3333-4444-555555555555, "
        "JobUID: 66666666-7777-8888-9999-000000000000) due to prioritization in the "
        "ClusterQueue; preemptor path: /research/team-a; preemptee path: /research/team-a"
    )
    obj["status"].pop("admission")
    obj["status"]["conditions"] = [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "",
         "lastTransitionTime": when},
        {"type": "Admitted", "status": "False", "reason": "NoReservation", "message": "",
         "lastTransitionTime": when},
        {"type": "PodsReady", "status": "False", "reason": "WaitForStart", "message": "",
         "lastTransitionTime": when},
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": message,
         "lastTransitionTime": when},
        {"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": message,
         "lastTransitionTime": when},
        {"type": "Requeued", "status": "True", "reason": "Preempted", "message": message,
         "lastTransitionTime": when},
    ]  # fmt: skip


def readmit_a1(obj: dict[str, Any]) -> None:
    admitted, ready = "2026-08-22T12:10:00Z", "2026-08-22T12:12:00Z"
    obj["status"]["admission"] = fixture_items("Workload")[0]["status"]["admission"]
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    for kind in ("QuotaReserved", "Admitted"):
        conditions[kind].update(status="True", reason=kind, lastTransitionTime=admitted)
    conditions["PodsReady"].update(status="True", reason="Started", lastTransitionTime=ready)
    for kind in ("Evicted", "Preempted"):
        conditions[kind].update(status="False", lastTransitionTime=admitted)


def test_an_evicted_and_readmitted_workload_has_exactly_its_transitions(
    kube_api, kube_cluster
) -> None:
    sync_cluster(kube_cluster.pk)
    kube_api.modify("Workload", A1[1], evict_a1, namespace=A1[0])
    sync_cluster(kube_cluster.pk)
    assert workload(A1).state == "preempted"
    kube_api.modify("Workload", A1[1], readmit_a1, namespace=A1[0])
    sync_cluster(kube_cluster.pk)
    sync_cluster(kube_cluster.pk)

    assert workload(A1).state == "admitted"
    assert transitions(A1) == [
        ("admitted", at("2026-08-20T08:00:05Z")),
        ("quota_reserved", at("2026-08-20T08:00:05Z")),
        ("pods_ready", at("2026-08-20T08:03:40Z")),
        ("evicted", at("2026-08-22T12:05:00Z")),
        ("preempted", at("2026-08-22T12:05:00Z")),
        ("requeued", at("2026-08-22T12:05:00Z")),
        ("admitted", at("2026-08-22T12:10:00Z")),
        ("quota_reserved", at("2026-08-22T12:10:00Z")),
        ("pods_ready", at("2026-08-22T12:12:00Z")),
    ]
    preempted = WorkloadTransition.objects.get(workload=workload(A1), kind="preempted")
    assert preempted.preemptor_uid == "11111111-2222-3333-4444-555555555555"
    assert preempted.preemptor_path == "/research/team-a"
