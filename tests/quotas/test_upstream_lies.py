"""A Kubernetes API server that lies, hangs or drips, through the real client and the sync.

docs/architecture.md "Upstream facts": never read a failed or partial LIST as everything was
deleted. A LIST counts only when it is a ``<Kind>List`` with an ``items`` array and its pagination
ran to the end; anything else (a ``{}`` or a ``Status`` answered with 200, a list of another kind, a
second page that fails, lies or is cut off) leaves that kind as it was. Every upstream call, and the
sync as a whole, ends by a deadline however slowly the server answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from fleet.choices import IngestSource, IngestStatus
from fleet.models import Cluster, CollectionCursor, IngestRun, Node
from quotas.kueue import KubeError, KueueClient
from quotas.models import (
    Allocation,
    ClusterQueue,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
    WorkloadTransition,
)
from quotas.sync import sync_cluster
from quotas.sync import watch as sync_watch
from tests.kube_api_server import KIND_TO_PLURAL, status_body
from tests.kueue_fixtures import fixture_items
from tests.quotas.conftest import A3, B1, B1_POD, rows, while_watching

pytestmark = pytest.mark.django_db

KINDS = (
    "ResourceFlavor",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "Workload",
    "WorkloadPriorityClass",
    "Pod",
    "Node",
)
# Kinds with more than five objects in the fixtures: listed five at a time, they have a page 2.
PAGED_KINDS = ("Workload", "Pod", "Node")
ETCD_STATUS = status_body(500, "etcdserver: leader changed", "InternalError")


def lists_of(kind: str) -> Callable[[str, str, dict[str, str]], bool]:
    """Matches the LIST requests (not the WATCH) of one kind."""
    plural = KIND_TO_PLURAL[kind]
    return lambda method, path, query: path.endswith(f"/{plural}") and "limit" in query


def state(cluster: Cluster) -> dict[str, Any]:
    """Every row a sync wrote (``test_sync.rows``) but the queue samples, which gain a window
    whenever a sync runs in the next minute; ``test_no_queue_sample_...`` covers them."""
    written = rows(cluster)
    written.pop("samples")
    return written


def alive(cluster: Cluster) -> dict[str, int]:
    """How many objects of each kind the database holds as present (not deleted, not ended)."""
    return {
        "ResourceFlavor": ResourceFlavor.objects.filter(cluster=cluster, deleted_at=None).count(),
        "Cohort": Cohort.objects.filter(cluster=cluster, deleted_at=None).count(),
        "ClusterQueue": ClusterQueue.objects.filter(cluster=cluster, deleted_at=None).count(),
        "LocalQueue": LocalQueue.objects.filter(cluster=cluster, deleted_at=None).count(),
        "Workload": Workload.objects.filter(cluster=cluster, deleted_at=None).count(),
        "WorkloadPriorityClass": WorkloadPriorityClass.objects.filter(
            cluster=cluster, deleted_at=None
        ).count(),
        "Allocation": Allocation.objects.filter(cluster=cluster, ended_at=None).count(),
        "Node": Node.objects.filter(cluster=cluster, deleted_at=None).count(),
        "WorkloadTransition": WorkloadTransition.objects.filter(workload__cluster=cluster).count(),
    }


def paged_client(cluster: Cluster) -> KueueClient:
    return KueueClient.for_cluster(cluster, page_size=5)


def assert_lease_released(cluster: Cluster) -> None:
    cursor = CollectionCursor.objects.get(cluster=cluster, source=IngestSource.KUEUE)
    assert not cursor.claimed_by


# --- LISTs that lie --------------------------------------------------------------------------


def lying_list(lie: str, kind: str) -> dict[str, Any]:
    """A 200 answer to a LIST of ``kind`` that is not that list."""
    if lie == "an empty object":
        return {}
    if lie == "a Status with 200":
        return ETCD_STATUS
    if lie == "a list of another kind":
        other = "ConfigMapList" if kind != "Pod" else "NodeList"
        return {"apiVersion": "v1", "kind": other, "metadata": {}, "items": []}
    api_version = "v1" if kind in ("Pod", "Node") else "kueue.x-k8s.io/v1beta2"
    head = {"apiVersion": api_version, "kind": f"{kind}List", "metadata": {"resourceVersion": "9"}}
    if lie == "a list without items":
        return head
    assert lie == "a list of other objects"
    stranger = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x", "namespace": "y"}}
    return {**head, "items": [stranger]}


LIES = (
    "an empty object",
    "a Status with 200",
    "a list of another kind",
    "a list without items",
    "a list of other objects",
)


@pytest.mark.parametrize("lie", LIES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_lying_list_changes_nothing_of_what_was_there(kube_api, kube_cluster, kind, lie):
    # Given a cluster synced once, and an API server that then lies about one kind
    sync_cluster(kube_cluster.pk)
    before, counts = state(kube_cluster), alive(kube_cluster)
    assert counts["Workload"] == 16 and counts["Allocation"] == 21 and counts["Node"] == 12
    kube_api.misbehave(lists_of(kind), body=lying_list(lie, kind), times=5)

    # When the next sync reads that answer
    run = sync_cluster(kube_cluster.pk)

    # Then nothing is marked deleted, no transition is invented, no allocation ends, and the
    # run says which kind and why
    assert state(kube_cluster) == before
    assert alive(kube_cluster) == counts
    assert run.status == IngestStatus.PARTIAL
    assert kind in run.error
    assert f"LIST {KIND_TO_PLURAL[kind]} page 1" in run.error


def test_a_status_answered_with_200_is_named_in_the_run(kube_api, kube_cluster):
    sync_cluster(kube_cluster.pk)
    kube_api.misbehave(lists_of("Workload"), body=ETCD_STATUS)

    run = sync_cluster(kube_cluster.pk)

    assert "a Status" in run.error
    assert "etcdserver: leader changed" in run.error


@pytest.mark.parametrize(
    "page_two",
    [
        {"body": {}},
        {"body": ETCD_STATUS},
        {"truncate": True},
    ],
    ids=["empty object", "Status with 200", "cut off half-way"],
)
@pytest.mark.parametrize("kind", PAGED_KINDS)
def test_a_second_page_that_fails_or_lies_leaves_the_kind_as_it_was(
    kube_api, kube_cluster, kind, page_two
):
    sync_cluster(kube_cluster.pk, client=paged_client(kube_cluster))
    before = state(kube_cluster)
    kube_api.misbehave(lists_of(kind), after=1, times=5, **page_two)

    run = sync_cluster(kube_cluster.pk, client=paged_client(kube_cluster))

    assert state(kube_cluster) == before
    assert run.status == IngestStatus.PARTIAL
    assert f"LIST {KIND_TO_PLURAL[kind]} page 2" in run.error


def test_a_continue_token_that_never_ends_is_not_followed_forever(kube_api, kube_cluster):
    sync_cluster(kube_cluster.pk)
    before = state(kube_cluster)
    looping = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadList",
        "metadata": {"resourceVersion": "1", "continue": "same-token-again"},
        "items": [],
    }
    kube_api.misbehave(lists_of("Workload"), body=looping, times=1000)

    run = sync_cluster(kube_cluster.pk)

    assert state(kube_cluster) == before
    assert "continue token" in run.error
    assert kube_api.list_count("Workload") < 10


def test_when_every_list_lies_the_run_fails_and_nothing_is_deleted(kube_api, kube_cluster):
    sync_cluster(kube_cluster.pk)
    before = state(kube_cluster)
    kube_api.misbehave(lambda method, path, query: "limit" in query, body={}, times=1000)

    with pytest.raises(KubeError) as caught:
        sync_cluster(kube_cluster.pk)

    assert not caught.value.permanent
    run = IngestRun.objects.latest("started_at")
    assert run.status == IngestStatus.FAILED
    assert "every LIST failed" in run.error
    assert state(kube_cluster) == before
    assert_lease_released(kube_cluster)


def test_after_the_lie_an_honest_list_deletes_what_really_went(kube_api, kube_cluster):
    sync_cluster(kube_cluster.pk)
    kube_api.delete("Workload", B1[1], namespace=B1[0])
    kube_api.misbehave(lists_of("Workload"), body={})
    sync_cluster(kube_cluster.pk)
    assert Workload.objects.get(name=B1[1]).deleted_at is None

    run = sync_cluster(kube_cluster.pk)

    assert run.status == IngestStatus.SUCCESS
    assert Workload.objects.get(name=B1[1]).deleted_at is not None
    assert Workload.objects.filter(deleted_at=None).count() == 15


def test_no_queue_sample_is_written_from_a_workload_list_that_failed(kube_api, kube_cluster):
    # Pending demand is summed over Workloads: without their LIST it would read as zero.
    kube_api.misbehave(lists_of("Workload"), body={})

    run = sync_cluster(kube_cluster.pk)

    assert run.status == IngestStatus.PARTIAL
    assert not ClusterQueueSample.objects.exists()


# --- WATCH events that lie -------------------------------------------------------------------


# Long enough for the lie, sent once the watch is open, to arrive on a loaded machine: the
# server ends the streams at the watch's end, and events read before that are applied.
WATCH_SECONDS = 2.0


def foreign_objects() -> dict[str, dict[str, Any]]:
    """Objects a Workload watch must not read as a Workload of that name going away."""
    pod = fixture_items("Pod")[0]
    pod["metadata"].update(name=A3[1], namespace=A3[0])
    other_group = fixture_items("Workload")[2]
    other_group["apiVersion"] = "batch/v1"
    return {
        "a Pod": {**pod, "apiVersion": "v1", "kind": "Pod"},
        "a Status": status_body(500, "watch cache is reinitializing", "InternalError"),
        "an object of another group": other_group,
        "an object without metadata": {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload"},
        "not an object": "job-llama-eval-70b-755d0",
    }


@pytest.mark.parametrize("what", list(foreign_objects()))
def test_a_deleted_event_of_another_kind_or_malformed_is_skipped(
    kube_api, kube_cluster, what, caplog
):
    sync_cluster(kube_cluster.pk)
    before = state(kube_cluster)
    obj = foreign_objects()[what]

    def lie() -> None:
        kube_api.send_event("Workload", "DELETED", obj)

    thread = while_watching(kube_api, "Workload", lie)
    run = sync_cluster(kube_cluster.pk, watch_seconds=WATCH_SECONDS)
    thread.join()

    assert state(kube_cluster) == before
    assert Workload.objects.get(name=A3[1]).deleted_at is None
    assert run.skipped >= 1
    assert any(reason.startswith("Workload: watch event") for reason in run.skip_reasons)
    assert any("skipped" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_a_pod_deleted_event_on_the_node_watch_deletes_no_node(kube_api, kube_cluster):
    sync_cluster(kube_cluster.pk)
    pod = fixture_items("Pod")[0]
    pod["metadata"].update(name="gpu-node-h100-01", namespace=B1_POD[0])

    thread = while_watching(
        kube_api, "Node", lambda: kube_api.send_event("Node", "DELETED", {**pod, "kind": "Pod"})
    )
    sync_cluster(kube_cluster.pk, watch_seconds=WATCH_SECONDS)
    thread.join()

    assert Allocation.objects.filter(ended_at=None).count() == 21
    assert Node.objects.filter(deleted_at=None).count() == 12


# --- servers that hang or drip ---------------------------------------------------------------

SYNC_DEADLINE = 3


@pytest.fixture
def short_deadlines(settings):
    settings.GPULEDGER_SYNC_DEADLINE_SECONDS = SYNC_DEADLINE


@pytest.mark.parametrize(
    "how", [{"hang": True}, {"drip_seconds": 1.0}], ids=["hangs", "drips a byte a second"]
)
@pytest.mark.parametrize(
    "what",
    [
        ("Workload", lists_of("Workload"), "LIST workloads page 1"),
        ("discovery", lambda method, path, query: path == "/apis", "discovery /apis"),
    ],
    ids=["a LIST", "discovery"],
)
def test_a_sync_against_a_stuck_server_fails_within_its_deadline(
    kube_api, kube_cluster, short_deadlines, how, what
):
    sync_cluster(kube_cluster.pk)
    before = state(kube_cluster)
    _, match, call = what
    kube_api.misbehave(match, times=1000, **how)
    started = time.monotonic()

    with pytest.raises(KubeError) as caught:
        sync_cluster(kube_cluster.pk)

    elapsed = time.monotonic() - started
    assert elapsed < SYNC_DEADLINE + 2, elapsed
    assert not caught.value.permanent
    run = IngestRun.objects.latest("started_at")
    assert run.status == IngestStatus.FAILED
    assert run.finished_at is not None
    assert call in run.error
    assert "GPULEDGER_SYNC_DEADLINE_SECONDS" in run.error
    assert state(kube_cluster) == before
    assert_lease_released(kube_cluster)


def test_one_hung_list_costs_one_request_deadline_and_the_rest_is_written(
    kube_api, kube_cluster, settings
):
    # A request deadline well inside the run's: the hung kind is left out, the others listed.
    settings.GPULEDGER_SYNC_DEADLINE_SECONDS = 30
    sync_cluster(kube_cluster.pk)
    kube_api.modify(
        "ClusterQueue", "team-b", lambda o: o["status"]["fairSharing"].update(weightedShare=7)
    )
    kube_api.misbehave(lists_of("Workload"), hang=True, times=1000)
    client = KueueClient.for_cluster(kube_cluster, request_seconds=1.5)
    started = time.monotonic()

    run = sync_cluster(kube_cluster.pk, client=client)

    # Retries of the hung request happen inside its deadline, not after it.
    assert time.monotonic() - started < 1.5 + 3
    assert run.status == IngestStatus.PARTIAL
    assert "LIST workloads page 1" in run.error
    assert "request deadline" in run.error
    assert ClusterQueue.objects.get(name="team-b").weighted_share == 7
    assert alive(kube_cluster)["Workload"] == 16


# The grace a stream still open at the watch's end gets to end on its own before it is cut:
# production's WATCH_END_GRACE_SECONDS (5 s) made shorter, so the cut comes sooner in the test.
# The healthy streams still end on their own inside it (the server ends them at the watch's end).
WATCH_END_GRACE = 1.5


@pytest.mark.parametrize(
    "how", [{"hang": True}, {"drip_seconds": 0.5}], ids=["hangs", "drips a byte every 0.5 s"]
)
def test_a_stuck_watch_stream_ends_with_the_watch(
    kube_api, kube_cluster, short_deadlines, how, monkeypatch
):
    monkeypatch.setattr(sync_watch, "WATCH_END_GRACE_SECONDS", WATCH_END_GRACE)
    watch_seconds = 2.0

    def is_workload_watch(method: str, path: str, query: dict[str, str]) -> bool:
        return path.endswith("/workloads") and query.get("watch") == "true"

    kube_api.misbehave(is_workload_watch, times=1000, **how)
    started = time.monotonic()

    run = sync_cluster(kube_cluster.pk, watch_seconds=watch_seconds)

    elapsed = time.monotonic() - started
    # The LIST, the watch, and the grace a stream gets to end on its own; not cut later.
    assert elapsed < watch_seconds + WATCH_END_GRACE + 4, elapsed
    assert run.status == IngestStatus.PARTIAL
    assert "Workload watch" in run.error
    assert alive(kube_cluster)["Workload"] == 16
    assert_lease_released(kube_cluster)
