"""The state a sync's steps share: the in-memory lists (``ObjectLists``) and the run's tally."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from fleet.choices import IngestSource, IngestStatus
from fleet.models import IngestRun
from quotas.sync.objects import Changes, ObjectLists, held_back
from quotas.sync.tally import Tally


def obj(name: str, namespace: str = "", **extra: object) -> dict[str, object]:
    meta = {"name": name, "namespace": namespace} if namespace else {"name": name}
    return {"metadata": meta, **extra}


def test_a_list_keys_its_objects_and_keeps_the_unkeyed_for_ingest_to_skip() -> None:
    lists = ObjectLists()
    first, again = obj("job-1", "team-a"), obj("job-1", "team-a")
    nameless, cluster_scoped = {"metadata": {"namespace": "team-a"}}, obj("job-2")

    lists.replace("Workload", [first, again, nameless, cluster_scoped], "42")

    assert lists.objects["Workload"] == {("team-a", "job-1"): first}
    assert lists.unkeyed["Workload"] == [again, nameless, cluster_scoped]
    assert lists.versions["Workload"] == "42"
    snapshot = lists.snapshot(["Workload"])
    assert len(snapshot.workloads) == 4


def test_a_forgotten_kind_is_empty_and_no_longer_complete() -> None:
    lists = ObjectLists()
    lists.replace("Node", [obj("gpu-node-1")], "7")
    lists.complete.add("Node")

    lists.forget("Node")

    assert lists.objects["Node"] == {}
    assert "Node" not in lists.complete
    assert "Node" not in lists.versions


def test_a_workloads_queue_is_its_admission_else_its_local_queues() -> None:
    lists = ObjectLists()
    lists.replace(
        "LocalQueue", [obj("training", "team-a", spec={"clusterQueue": "team-a-cq"})], "1"
    )
    admitted = obj(
        "job-1",
        "team-a",
        spec={"queueName": "training"},
        status={"admission": {"clusterQueue": "borrowed-cq"}},
    )
    pending = obj("job-2", "team-a", spec={"queueName": "training"})
    lost = obj("job-3", "team-a", spec={"queueName": "no-such-queue"})

    assert lists.workload_queue(admitted) == "borrowed-cq"
    assert lists.workload_queue(pending) == "team-a-cq"
    assert lists.workload_queue(lost) == ""
    changes = Changes()
    lists.note_queues(changes, admitted, None, pending, lost)
    assert changes.queues == {"borrowed-cq", "team-a-cq"}


def test_kinds_read_with_a_missing_list_are_held_back_in_turn() -> None:
    # Without the ClusterQueues no Workload is written, so no Pod can be joined to one.
    available = {"ResourceFlavor", "Node", "LocalQueue", "WorkloadPriorityClass", "Workload"}

    assert held_back(available) == {"Workload": "ClusterQueue", "Pod": "Workload"}


@pytest.mark.django_db
def test_the_tally_leaves_its_counts_errors_and_window_on_the_run(kube_cluster) -> None:
    run = IngestRun.objects.create(
        cluster=kube_cluster,
        source=IngestSource.KUEUE,
        status=IngestStatus.RUNNING,
        started_at=timezone.now(),
    )
    tally = Tally(records_read=10, events_applied=3, rows_written=5)
    tally.skip("Workload: missing_name")
    tally.skip("Workload: missing_name")
    tally.notes["visibility API: not served"] = 1
    tally.errors += ["Pod not listed", "Node not listed"]
    window = (datetime(2026, 8, 22, 12, 0, tzinfo=UTC), datetime(2026, 8, 22, 12, 5, tzinfo=UTC))

    tally.finish(run, IngestStatus.PARTIAL, window)

    run.refresh_from_db()
    assert run.status == IngestStatus.PARTIAL
    assert (run.records_read, run.rows_written, run.skipped) == (13, 5, 2)
    assert Counter(run.skip_reasons) == Counter(
        {"Workload: missing_name": 2, "visibility API: not served": 1}
    )
    assert run.error == "Pod not listed\nNode not listed"
    assert (run.window_start, run.window_end) == window
    assert run.finished_at is not None
