"""quotas.sync end to end: the real kubernetes client, a loopback API server, the database."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.db.models import Sum

from fleet.choices import IngestSource, IngestStatus
from fleet.models import Cluster, CollectionCursor, IngestRun, Node
from quotas.kueue import KubeError, KueueClient
from quotas.models import (
    Allocation,
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
    WorkloadTransition,
)
from quotas.sync import SyncBusy, pending_positions, sync_cluster
from tests.kube_api_server import FakeKubeAPI, fixture_items

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"
A1 = ("team-a", "job-llama-pretrain-8b-fbe70")
A3 = ("team-a", "job-llama-eval-70b-755d0")
B1 = ("team-b", "job-vit-ablation-3-73ebc")
B1_POD = ("team-b", "vit-ablation-3-0-ccthr")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def workload(key: tuple[str, str]) -> Workload:
    return Workload.objects.get(namespace=key[0], name=key[1])


def transitions(key: tuple[str, str]) -> list[tuple[str, datetime]]:
    return sorted(
        WorkloadTransition.objects.filter(
            workload__namespace=key[0], workload__name=key[1]
        ).values_list("kind", "at"),
        key=lambda pair: (pair[1], pair[0]),
    )


def while_watching(api: FakeKubeAPI, kind: str, action: Callable[[], None]) -> threading.Thread:
    """Run ``action`` once the sync has opened its WATCH of ``kind``."""

    def wait_then_act() -> None:
        deadline = time.monotonic() + 20
        while api.watch_count(kind) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def rows(cluster: Cluster) -> dict[str, Any]:
    """Everything a sync wrote for a cluster, without ids and bookkeeping times."""

    def strip(values: list[dict[str, Any]]) -> list[dict[str, Any]]:
        dropped = {"id", "cluster_id", "created_at", "updated_at", "observed_at"}
        return sorted(
            (
                {k: v for k, v in row.items() if k not in dropped and not k.endswith("_id")}
                for row in values
            ),
            key=repr,
        )

    return {
        "flavors": strip(list(ResourceFlavor.objects.filter(cluster=cluster).values())),
        "cohorts": strip(list(Cohort.objects.filter(cluster=cluster).values())),
        "queues": strip(
            list(ClusterQueue.objects.filter(cluster=cluster).values("cohort__name", "team__name"))
            + list(ClusterQueue.objects.filter(cluster=cluster).values())
        ),
        "quotas": strip(
            list(
                ClusterQueueQuota.objects.filter(cluster_queue__cluster=cluster).values(
                    "cluster_queue__name",
                    "flavor_name",
                    "resource",
                    "position",
                    "nominal",
                    "borrowing_limit",
                    "lending_limit",
                )
            )
        ),
        "local_queues": strip(list(LocalQueue.objects.filter(cluster=cluster).values())),
        "classes": strip(list(WorkloadPriorityClass.objects.filter(cluster=cluster).values())),
        "workloads": strip(
            list(Workload.objects.filter(cluster=cluster).values())
            + list(
                Workload.objects.filter(cluster=cluster).values(
                    "name", "local_queue__name", "cluster_queue__name"
                )
            )
        ),
        "transitions": strip(
            list(
                WorkloadTransition.objects.filter(workload__cluster=cluster).values(
                    "workload__name", "kind", "at", "reason", "message", "preemptor_uid"
                )
            )
        ),
        "allocations": strip(
            list(
                Allocation.objects.filter(cluster=cluster).values(
                    "namespace", "pod", "pod_uid", "node_name", "gpus", "workload__name"
                )
            )
        ),
        "nodes": strip(
            list(
                Node.objects.filter(cluster=cluster).values(
                    "name", "gpu_product", "flavor", "gpu_capacity", "gpu_allocatable"
                )
            )
        ),
        "samples": strip(
            list(
                ClusterQueueSample.objects.filter(cluster_queue__cluster=cluster).values(
                    "cluster_queue__name", "flavor_name", "total", "borrowed", "pending_demand"
                )
            )
        ),
    }


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


# --- WATCH -----------------------------------------------------------------------------------


def test_watch_events_are_written_while_the_sync_watches(kube_api, kube_cluster) -> None:
    def admit_a3() -> None:
        kube_api.modify(
            "Workload",
            A3[1],
            lambda o: o["metadata"].setdefault("labels", {}).update(watched="yes"),
            namespace=A3[0],
        )

    thread = while_watching(kube_api, "Workload", admit_a3)

    run = sync_cluster(kube_cluster.pk, watch_seconds=2.5)
    thread.join()

    assert workload(A3).labels["watched"] == "yes"
    assert run.status == IngestStatus.SUCCESS
    assert run.records_read == 68 + 1


def test_a_deleted_event_marks_the_workload_deleted_and_ends_its_pod(
    kube_api, kube_cluster
) -> None:
    def delete_b1() -> None:
        kube_api.delete("Workload", B1[1], namespace=B1[0])
        kube_api.delete("Pod", B1_POD[1], namespace=B1_POD[0])

    thread = while_watching(kube_api, "Pod", delete_b1)

    sync_cluster(kube_cluster.pk, watch_seconds=2.5)
    thread.join()

    gone = workload(B1)
    assert gone.deleted_at is not None
    assert ("deleted", gone.deleted_at) in transitions(B1)
    allocation = Allocation.objects.get(namespace=B1_POD[0], pod=B1_POD[1])
    assert allocation.ended_at is not None
    assert Workload.objects.filter(deleted_at__isnull=True).count() == 15
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 20


def test_an_added_workload_arrives_by_watch(kube_api, kube_cluster) -> None:
    template = fixture_items("Workload")[2]  # A3, pending in team-a
    added = {**template, "metadata": {**template["metadata"], "name": "job-new-1", "uid": "n-1"}}
    thread = while_watching(kube_api, "Workload", lambda: kube_api.add("Workload", added))

    sync_cluster(kube_cluster.pk, watch_seconds=2.5)
    thread.join()

    new = workload(("team-a", "job-new-1"))
    assert new.state == "pending"
    assert new.cluster_queue.name == "team-a"


def test_gone_on_watch_relists_and_catches_up(kube_api, kube_cluster) -> None:
    def lose_history() -> None:
        # The change's event is compacted away and the stream drops: only a relist sees it.
        kube_api.modify(
            "Workload",
            A3[1],
            lambda o: o["metadata"].setdefault("labels", {}).update(relisted="yes"),
            namespace=A3[0],
            silent=True,
        )
        kube_api.compact("Workload")
        kube_api.close_watches()

    thread = while_watching(kube_api, "Workload", lose_history)

    run = sync_cluster(kube_cluster.pk, watch_seconds=3)
    thread.join()

    assert kube_api.list_count("Workload") == 2
    assert workload(A3).labels["relisted"] == "yes"
    assert run.status == IngestStatus.SUCCESS
    assert not Workload.objects.filter(deleted_at__isnull=False).exists()


def test_a_malformed_object_in_a_watch_event_is_skipped_and_counted(
    kube_api, kube_cluster, caplog
) -> None:
    def break_a3() -> None:
        kube_api.modify(
            "Workload", A3[1], lambda o: o["spec"].update(podSets="many"), namespace=A3[0]
        )

    thread = while_watching(kube_api, "Workload", break_a3)

    with caplog.at_level(logging.WARNING):
        run = sync_cluster(kube_cluster.pk, watch_seconds=2.5)
    thread.join()

    assert run.skipped == 1
    assert run.status == IngestStatus.PARTIAL
    kept = workload(A3)
    assert kept.deleted_at is None
    assert kept.requested_gpus == 8
    assert any(A3[1] in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_samples_are_written_for_each_window_passed_while_watching(
    kube_api, kube_cluster, settings
) -> None:
    settings.GPULEDGER_COLLECT_SECONDS = 1

    sync_cluster(kube_cluster.pk, watch_seconds=2.5)

    windows = set(ClusterQueueSample.objects.values_list("sampled_at", flat=True))
    assert len(windows) >= 2
    for window in windows:
        # 5 queues: team-a/b/c and batch have two GPU flavors, serving one.
        assert ClusterQueueSample.objects.filter(sampled_at=window).count() == 9


# --- windows, visibility, older Kueue ---------------------------------------------------------


def test_syncs_within_one_window_leave_one_sample_per_queue_and_flavor(
    kube_api, kube_cluster
) -> None:
    with time_machine.travel(datetime(2026, 8, 22, 12, 0, 10, tzinfo=UTC), tick=True):
        sync_cluster(kube_cluster.pk)
    with time_machine.travel(datetime(2026, 8, 22, 12, 0, 40, tzinfo=UTC), tick=True):
        sync_cluster(kube_cluster.pk)

    assert set(ClusterQueueSample.objects.values_list("sampled_at", flat=True)) == {
        datetime(2026, 8, 22, 12, 0, tzinfo=UTC)
    }
    assert ClusterQueueSample.objects.count() == 9

    with time_machine.travel(datetime(2026, 8, 22, 12, 1, 5, tzinfo=UTC), tick=True):
        sync_cluster(kube_cluster.pk)

    assert ClusterQueueSample.objects.count() == 18
    cursor = CollectionCursor.objects.get(cluster=kube_cluster, source=IngestSource.KUEUE)
    assert cursor.last_window_end == datetime(2026, 8, 22, 12, 1, tzinfo=UTC)


def test_pending_positions_are_stored_when_the_visibility_api_is_served(
    make_kube_api, kube_cluster
) -> None:
    make_kube_api(visibility_versions=("v1beta1",))

    run = sync_cluster(kube_cluster.pk)

    positions = dict(
        Workload.objects.filter(pending_position__isnull=False).values_list(
            "name", "pending_position"
        )
    )
    # Highest priority first within each queue (README "Workloads"): A3 (500) before A5 (100).
    assert positions == {
        "job-llama-eval-70b-755d0": 0,
        "job-lr-sweep-17-62ba9": 1,
        "job-ddp-smoke-897b6": 0,
        "job-backfill-embeddings-48f3b": 0,
    }
    assert run.status == IngestStatus.SUCCESS


def test_pending_positions_read_kueues_field_and_fall_back_to_the_answers_order():
    items = [
        {"metadata": {"namespace": "ns", "name": "head"}, "positionInClusterQueue": 0},
        {"metadata": {"namespace": "ns", "name": "no-field"}},
        {"metadata": {"namespace": "ns"}, "positionInClusterQueue": 2},  # no name: skipped
        {"metadata": {"namespace": "ns", "name": "negative"}, "positionInClusterQueue": -4},
        {"metadata": {"namespace": "ns", "name": "boolean"}, "positionInClusterQueue": True},
        "not an object",
        {"metadata": {"name": "no-namespace"}, "positionInClusterQueue": 9},
    ]

    assert pending_positions(items) == {
        ("ns", "head"): 0,
        ("ns", "no-field"): 1,
        ("ns", "negative"): 3,
        ("ns", "boolean"): 4,
        ("", "no-namespace"): 9,
    }


def test_pending_positions_are_cleared_when_a_workload_is_admitted(
    make_kube_api, kube_cluster
) -> None:
    api = make_kube_api(visibility_versions=("v1beta1",))
    sync_cluster(kube_cluster.pk)
    api.pending_override["team-a"] = [
        {"metadata": {"name": A3[1], "namespace": A3[0]}, "positionInClusterQueue": 0}
    ]

    sync_cluster(kube_cluster.pk)

    assert workload(A3).pending_position == 0
    assert workload(("team-a", "job-lr-sweep-17-62ba9")).pending_position is None


def test_without_the_visibility_api_positions_are_skipped_cleanly(kube_api, kube_cluster) -> None:
    run = sync_cluster(kube_cluster.pk)

    assert not Workload.objects.filter(pending_position__isnull=False).exists()
    assert run.status == IngestStatus.SUCCESS
    assert run.skip_reasons.get("visibility API: not served") == 1
    assert not any("pendingworkloads" in path for _, path, _ in kube_api.requests)


def test_older_kueue_without_cohorts_keeps_cohort_rows(make_kube_api, kube_cluster) -> None:
    make_kube_api()
    sync_cluster(kube_cluster.pk)
    make_kube_api(
        served_kinds=[
            "ResourceFlavor",
            "ClusterQueue",
            "LocalQueue",
            "Workload",
            "WorkloadPriorityClass",
            "Pod",
            "Node",
        ]
    )

    run = sync_cluster(kube_cluster.pk)

    assert run.status == IngestStatus.SUCCESS
    assert run.skip_reasons.get("Cohort: not served") == 1
    assert set(Cohort.objects.filter(deleted_at__isnull=True).values_list("name", flat=True)) == {
        "research",
        "prod",
    }
    assert Cohort.objects.get(name="research").resource_groups  # the pool survives


def test_a_second_sync_of_a_busy_cluster_is_refused(kube_api, kube_cluster) -> None:
    CollectionCursor.objects.create(
        cluster=kube_cluster,
        source=IngestSource.KUEUE,
        claimed_by="another-worker",
        claimed_until=datetime(2999, 1, 1, tzinfo=UTC),
    )

    with pytest.raises(SyncBusy):
        sync_cluster(kube_cluster.pk)

    assert not IngestRun.objects.exists()


# --- the command and the tasks ---------------------------------------------------------------


def test_the_command_creates_the_cluster_and_syncs_it(kube_api, capsys) -> None:
    call_command(
        "sync_cluster", "--cluster", "gpu-west", "--create", "--kubeconfig", kube_api.kubeconfig
    )

    cluster = Cluster.objects.get(name="gpu-west")
    assert Workload.objects.filter(cluster=cluster).count() == 16
    assert "gpu-west: success" in capsys.readouterr().out


def test_the_command_syncs_the_cluster_the_environment_describes(kube_api, settings) -> None:
    # given: only KUBECONFIG describes the install (no cluster row, no --cluster)
    settings.KUBECONFIG = kube_api.kubeconfig
    settings.PROMETHEUS_URL = ""
    settings.GPULEDGER_CLUSTER_NAME = "onprem"

    call_command("sync_cluster", "--kubeconfig", kube_api.kubeconfig)

    cluster = Cluster.objects.get()
    assert cluster.name == "onprem"
    assert Workload.objects.filter(cluster=cluster).count() == 16


def test_the_command_needs_a_cluster_name_when_there_are_several(kube_cluster, settings) -> None:
    settings.KUBECONFIG = ""
    settings.PROMETHEUS_URL = ""
    Cluster.objects.create(name="gpu-west")

    with pytest.raises(CommandError, match="several clusters .*name one with --cluster"):
        call_command("sync_cluster")


def test_the_command_refuses_an_unknown_cluster_without_create(kube_api) -> None:
    with pytest.raises(CommandError, match="no cluster named"):
        call_command("sync_cluster", "--cluster", "nowhere")


def test_the_command_fails_on_a_permanent_error(kube_api, kube_cluster) -> None:
    kube_api.token = "rotated"

    with pytest.raises(CommandError, match="permanent"):
        call_command("sync_cluster", "--cluster", kube_cluster.name)


def test_sync_clusters_all_fans_out_to_enabled_clusters(kube_cluster, monkeypatch) -> None:
    from quotas import tasks

    Cluster.objects.create(name="paused", sync_enabled=False)
    sent = []
    monkeypatch.setattr(
        tasks.sync_cluster_task, "apply_async", lambda args, **kw: sent.append((args, kw))
    )

    assert tasks.sync_clusters_all() == 1
    assert sent[0][0] == [kube_cluster.pk]
    assert sent[0][1]["expires"] > 0


def test_the_task_retries_transient_errors_only(kube_api, kube_cluster, settings) -> None:
    from celery.exceptions import Retry

    from quotas import tasks

    settings.GPULEDGER_SYNC_SECONDS = 5  # a short watch: 5 s minus the margin
    settings.GPULEDGER_RELIST_SECONDS = 5
    kube_api.fail(lambda method, path, query: True, 503, times=1000)

    with pytest.raises(Retry):
        tasks.sync_cluster_task.apply(args=[kube_cluster.pk], throw=True)

    kube_api.clear_failures()
    kube_api.token = "rotated"
    result = tasks.sync_cluster_task.apply(args=[kube_cluster.pk], throw=True)
    assert result.successful()
    assert IngestRun.objects.filter(status=IngestStatus.FAILED).count() == 2


@pytest.mark.parametrize(
    ("relist", "interval", "expected"),
    [(300, 30, 297), (100, 30, 87), (5, 5, 2), (10, 30, 27)],
)
def test_the_watch_lasts_until_the_tick_before_the_next_relist(
    settings, relist, interval, expected
) -> None:
    from quotas.tasks import watch_window_seconds

    settings.GPULEDGER_RELIST_SECONDS = relist
    settings.GPULEDGER_SYNC_SECONDS = interval

    assert watch_window_seconds() == expected


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
