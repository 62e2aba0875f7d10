"""quotas.allocations: one Allocation lifecycle, written by kube-state-metrics windows and by the
API server's pods, on the same rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.timewindows import Window
from fleet.ingest import PodAllocationRow
from fleet.inventory import ensure_nodes
from quotas.allocations import (
    close_missing_allocations,
    end_pod_allocations,
    read_pod_allocations,
    write_pod_allocations,
    write_window_allocations,
)
from quotas.ingest import ObjectMeta, PodRow
from quotas.models import Allocation, Workload

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
KEY = ("team-a", "train-0", "uid-1")


def window(n: int) -> Window:
    """The n-th one-minute window after T0."""
    return Window(T0 + n * MINUTE, T0 + (n + 1) * MINUTE)


def observed(node: str = "gpu-1", gpus: float = 1.0) -> PodAllocationRow:
    return PodAllocationRow(
        namespace=KEY[0],
        pod=KEY[1],
        pod_uid=KEY[2],
        node_name=node,
        resource="nvidia.com/gpu",
        gpus=gpus,
        gpu_keys=[],
    )


def pod(phase: str = "Running", started: datetime | None = T0, finished=None) -> PodRow:
    return PodRow(
        meta=ObjectMeta(name=KEY[1], namespace=KEY[0], uid=KEY[2]),
        node_name="gpu-1",
        phase=phase,
        started_at=started,
        finished_at=finished,
        gpus=1.0,
        resource="nvidia.com/gpu",
        requests={},
        workload_name="job-train",
        joined_by="",
        cluster_queue_name="",
        local_queue_name="",
        podset="",
        flavor="",
    )


def collect(cluster, n: int, *pods: PodAllocationRow, workload_id: int | None = None) -> None:
    """What ledger.store.write_window does with a window's allocations."""
    current = window(n)
    nodes = ensure_nodes(cluster, sorted({p.node_name for p in pods}), {})
    stored = read_pod_allocations(cluster, [(p.namespace, p.pod) for p in pods])
    seen = write_window_allocations(
        cluster,
        current,
        pods,
        gpu_ids={},
        node_ids={name: node.id for name, node in nodes.items()},
        workload_ids={(p.namespace, p.pod): workload_id for p in pods},
        stored=stored,
    )
    close_missing_allocations(cluster, current, seen)


def sync(cluster, at: datetime, *pods: PodRow, complete: bool = True):
    listed = {(p.meta.namespace, p.meta.name) for p in pods} if complete else None
    return write_pod_allocations(
        cluster, list(pods), at, node_ids={}, workload_ids={}, listed=listed
    )


def allocation() -> Allocation:
    return Allocation.objects.get(namespace=KEY[0], pod=KEY[1], pod_uid=KEY[2])


def test_windows_open_extend_end_and_reopen_an_allocation(cluster):
    collect(cluster, 0, observed())
    collect(cluster, 1, observed(gpus=2.0))
    row = allocation()
    assert (row.started_at, row.last_seen_at, row.ended_at, row.gpus) == (
        window(0).start,
        window(1).end,
        None,
        2.0,
    )

    # Not seen in window 2: it ended when that window started.
    collect(cluster, 2)
    assert allocation().ended_at == window(2).start

    # Re-collecting window 0 (older than the newest seen and the end) changes nothing...
    collect(cluster, 0, observed(gpus=1.0))
    assert (allocation().ended_at, allocation().gpus) == (window(2).start, 2.0)
    # ...window 3 re-opens it.
    collect(cluster, 3, observed())
    row = allocation()
    assert (row.started_at, row.last_seen_at, row.ended_at) == (
        window(0).start,
        window(3).end,
        None,
    )


def test_the_api_server_opens_ends_and_reopens_by_what_the_pod_is_now(cluster):
    first = sync(cluster, T0, pod())
    assert (first.created, first.updated, first.ended) == (1, 0, 0)
    row = allocation()
    assert (row.started_at, row.ended_at, row.last_seen_at) == (T0, None, None)

    finished_at = T0 + 5 * MINUTE
    done = sync(cluster, T0 + 6 * MINUTE, pod("Succeeded", finished=finished_at))
    assert done.ended == 1
    assert allocation().ended_at == finished_at
    # The stored end is kept while the pod stays finished.
    again = sync(cluster, T0 + 7 * MINUTE, pod("Succeeded"))
    assert (again.updated, again.ended, allocation().ended_at) == (0, 0, finished_at)


def test_a_pending_pod_holds_nothing_and_a_pod_that_ran_between_syncs_is_kept(cluster):
    sync(cluster, T0, pod("Pending", started=None))
    assert not Allocation.objects.exists()

    ended = T0 + 2 * MINUTE
    sync(cluster, T0 + 3 * MINUTE, pod("Failed", finished=ended))
    assert (allocation().started_at, allocation().ended_at) == (T0, ended)


def test_a_pod_missing_from_a_complete_list_ends_and_a_partial_list_ends_nothing(cluster):
    sync(cluster, T0, pod())

    sync(cluster, T0 + MINUTE, complete=False)
    assert allocation().ended_at is None
    sync(cluster, T0 + 2 * MINUTE)
    assert allocation().ended_at == T0 + 2 * MINUTE


def test_a_watch_deletion_ends_only_an_open_allocation(cluster):
    sync(cluster, T0, pod())

    assert end_pod_allocations(cluster, [KEY], T0 + MINUTE) == 1
    assert end_pod_allocations(cluster, [KEY], T0 + 2 * MINUTE) == 0
    assert allocation().ended_at == T0 + MINUTE


def test_a_window_extends_what_the_api_server_opened_and_keeps_its_workload(cluster):
    workload = Workload.objects.create(cluster=cluster, namespace=KEY[0], name="job-train")
    started = window(0).start + timedelta(seconds=20)
    Allocation.objects.create(
        cluster=cluster,
        namespace=KEY[0],
        pod=KEY[1],
        pod_uid=KEY[2],
        gpus=1.0,
        workload=workload,
        started_at=started,
    )

    collect(cluster, 0, observed())

    row = allocation()
    # The window's start is earlier than the pod's startTime: the earliest wins.
    assert (row.started_at, row.last_seen_at, row.workload_id) == (
        window(0).start,
        window(0).end,
        workload.pk,
    )
    assert row.node.name == "gpu-1"


def test_a_window_ends_an_api_server_allocation_it_does_not_see_once_it_started_before(cluster):
    sync(cluster, window(2).start, pod(started=window(2).start))

    # A window that starts when the pod started does not end it...
    collect(cluster, 2)
    assert allocation().ended_at is None
    # ...a later one, without the pod, does.
    collect(cluster, 3)
    assert allocation().ended_at == window(3).start


def test_the_api_server_sets_the_start_and_leaves_last_seen_to_the_windows(cluster):
    collect(cluster, 0, observed())
    started = window(0).start + timedelta(seconds=20)

    sync(cluster, window(1).end, pod(started=started))

    row = allocation()
    assert (row.started_at, row.last_seen_at, row.ended_at) == (started, window(0).end, None)
