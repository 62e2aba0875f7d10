"""quotas.sync end to end, per window: queue samples, pending positions from the visibility
API, older Kueue without cohorts, and the lease that keeps two syncs of a cluster apart."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from fleet.choices import IngestSource, IngestStatus
from fleet.models import CollectionCursor, IngestRun
from quotas.models import ClusterQueueSample, Cohort, Workload
from quotas.sync import SyncBusy, pending_positions, sync_cluster
from tests.quotas.conftest import A3, workload

pytestmark = pytest.mark.django_db


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
