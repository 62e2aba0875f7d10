"""quotas.sync end to end, WATCH: events written while the sync watches, deletions, 410 Gone
and malformed objects in events."""

from __future__ import annotations

import logging

import pytest

from fleet.choices import IngestStatus
from quotas.models import Allocation, ClusterQueueSample, Workload
from quotas.sync import sync_cluster
from tests.kube_api_server import fixture_items
from tests.quotas.conftest import A3, B1, B1_POD, transitions, while_watching, workload

pytestmark = pytest.mark.django_db


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
    # Kept with the run, for the relists /metrics reports.
    assert run.skip_reasons["Workload: relisted after 410 Gone"] == 1
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
