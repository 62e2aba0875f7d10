"""quotas.store: idempotent bulk writes of a Kueue batch; history kept; partial LISTs spared."""

import copy
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext

from fleet.models import Cluster, Node
from quotas.ingest import build_queue_samples, build_snapshot, snapshot_from_lists
from quotas.models import (
    Allocation,
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Team,
    TeamNamespace,
    Workload,
    WorkloadPriorityClass,
    WorkloadTransition,
)
from quotas.store import write_queue_samples, write_snapshot
from tests.quotas.test_ingest import (
    EXPECTED,
    GPU,
    NOW,
    TEAM_LABELS,
    VERSIONS,
    expected_workload,
    fixture_lists,
    fixture_nodes,
)

pytestmark = pytest.mark.django_db

MODELS = [
    ResourceFlavor,
    Cohort,
    Team,
    TeamNamespace,
    ClusterQueue,
    ClusterQueueQuota,
    LocalQueue,
    WorkloadPriorityClass,
    Workload,
    WorkloadTransition,
    Node,
    Allocation,
]


def lists(version: str = "v1beta2", **overrides) -> dict:
    return {**fixture_lists(version), "nodes": fixture_nodes(), **overrides}


def sync(cluster, lists_: dict, at: datetime = NOW):
    snap = snapshot_from_lists(at, **lists_)
    batch = build_snapshot(snap, TEAM_LABELS)
    return batch, write_snapshot(cluster, batch, snap.complete)


def dump() -> dict[str, list[dict]]:
    """Every row of every table the writer touches, all fields."""
    tables = {}
    for model in MODELS:
        rows = []
        for obj in model.objects.order_by("pk"):
            values = model_to_dict(obj)
            values.update({f.attname: getattr(obj, f.attname) for f in model._meta.fields})
            rows.append(values)
        tables[model.__name__] = rows
    return tables


def items(lists_: dict, key: str) -> list[dict]:
    return lists_[key]["items"]


def find(lists_: dict, key: str, name: str) -> dict:
    return next(i for i in items(lists_, key) if i["metadata"]["name"] == name)


@pytest.fixture(params=VERSIONS)
def version(request):
    return request.param


# -- first write -------------------------------------------------------------------------------


def test_it_writes_every_kind_with_foreign_keys_resolved(cluster, version):
    batch, result = sync(cluster, lists(version))

    assert ClusterQueue.objects.filter(cluster=cluster).count() == len(EXPECTED["clusterQueues"])
    assert Workload.objects.filter(cluster=cluster).count() == len(EXPECTED["workloads"])
    assert result.created["Workload"] == len(EXPECTED["workloads"])
    for name, expected in EXPECTED["clusterQueues"].items():
        cq = ClusterQueue.objects.get(cluster=cluster, name=name)
        assert cq.cohort.name == expected["cohort"]
        assert cq.weighted_share == expected["weightedShare"]
        namespace, lq_name = expected["localQueue"].split("/")
        lq = LocalQueue.objects.get(cluster=cluster, namespace=namespace, name=lq_name)
        assert lq.cluster_queue == cq
        assert TeamNamespace.objects.get(cluster=cluster, namespace=namespace).team == cq.team
        for flavor in ("h100", "a100"):
            if flavor not in expected:
                continue
            quota = cq.quotas.get(flavor_name=flavor, resource=GPU)
            assert quota.nominal == expected[flavor]["nominalGPUs"]
            assert quota.borrowing_limit == expected[flavor]["borrowingLimitGPUs"]
            assert quota.lending_limit == expected[flavor]["lendingLimitGPUs"]
    labels = {
        i["metadata"]["name"]: i["metadata"]["labels"]["example.com/team"]
        for i in items(lists(version), "cluster_queues")
    }
    assert {cq.name: cq.team.name for cq in ClusterQueue.objects.all()} == labels
    for expected in EXPECTED["workloads"]:
        wl = Workload.objects.get(cluster=cluster, name=expected["name"])
        assert wl.cluster_queue.name == expected["clusterQueue"]
        assert wl.local_queue.cluster_queue == wl.cluster_queue
    assert Cohort.objects.get(cluster=cluster, name="research").resource_groups


def test_admitted_figures_survive_the_round_trip(cluster):
    sync(cluster, lists())

    for name, expected in EXPECTED["clusterQueues"].items():
        held = Workload.objects.holding().filter(cluster_queue__name=name)
        assert sum(w.admitted_gpus for w in held) == expected["admittedGPUs"]
        assert sum(w.borrowed_gpus for w in held) == expected["borrowedGPUs"]
        assert (
            Workload.objects.pending().filter(cluster_queue__name=name).count()
            == (expected["pendingWorkloads"])
        )
    borrowing = set(Workload.objects.filter(borrowing=True).values_list("name", flat=True))
    assert borrowing == {expected_workload("A2")["name"], expected_workload("P1")["name"]}
    a5 = Workload.objects.get(name=expected_workload("A5")["name"])
    assert a5.accumulated_execution_seconds == 57638
    assert a5.transitions.get(kind="preempted").preemptor.name == expected_workload("C1")["name"]
    b2 = Workload.objects.get(name=expected_workload("B2")["name"])
    assert b2.requeue_at == datetime(2026, 8, 22, 12, 0, 30, tzinfo=UTC)
    assert b2.transitions.get(kind="requeued").requeue_at == b2.requeue_at


def test_pods_become_allocations_on_their_nodes_and_workloads(cluster):
    sync(cluster, lists())

    allocations = {f"{a.namespace}/{a.pod}": a for a in Allocation.objects.all()}
    assert set(allocations) == set(EXPECTED["podToWorkload"])
    for key, expected in EXPECTED["podToWorkload"].items():
        allocation = allocations[key]
        assert allocation.workload.name == expected["workload"]
        assert allocation.node.name == expected["node"]
        assert allocation.node.flavor == expected["flavor"]
        assert allocation.gpus == expected["gpus"]
        assert allocation.ended_at is None
        assert allocation.started_at < NOW
    assert Node.objects.filter(cluster=cluster).count() == len(fixture_nodes()["items"])


# -- idempotency -------------------------------------------------------------------------------


def test_writing_the_same_snapshot_twice_changes_nothing(cluster, version):
    sync(cluster, lists(version))
    before = dump()

    _, result = sync(cluster, lists(version))

    assert dump() == before
    assert sum(result.created.values()) == 0
    assert sum(result.updated.values()) == 0
    assert sum(result.deleted.values()) == 0
    assert result.transitions_added == 0


def test_both_api_versions_write_the_same_rows(cluster):
    sync(cluster, lists("v1beta2"))
    before = dump()

    _, result = sync(cluster, lists("v1beta1"))

    assert sum(result.updated.values()) == 0
    assert dump() == before


def test_transitions_are_recorded_once_across_writes(cluster):
    batch, first = sync(cluster, lists())
    _, second = sync(cluster, lists())

    assert first.transitions_added == len(batch.transitions)
    assert second.transitions_added == 0
    assert WorkloadTransition.objects.count() == len(batch.transitions)


def test_eviction_and_readmission_add_exactly_the_new_transitions(cluster):
    name = expected_workload("B1")["name"]
    sync(cluster, lists())
    wl = Workload.objects.get(name=name)
    kinds_before = set(wl.transitions.values_list("kind", "at"))

    evicted_at = NOW + timedelta(minutes=1)
    evicted = lists()
    item = find(evicted, "workloads", name)
    stamp = evicted_at.isoformat().replace("+00:00", "Z")
    item["status"].pop("admission")
    for cond in item["status"]["conditions"]:
        cond["status"], cond["lastTransitionTime"] = "False", stamp
    item["status"]["conditions"].append(
        {
            "type": "Evicted",
            "status": "True",
            "reason": "Preempted",
            "message": "m",
            "lastTransitionTime": stamp,
        }
    )
    item["status"]["conditions"].append(
        {
            "type": "Requeued",
            "status": "True",
            "reason": "Preempted",
            "message": "m",
            "lastTransitionTime": stamp,
        }
    )
    _, second = sync(cluster, evicted, evicted_at)
    wl.refresh_from_db()
    assert wl.state == "evicted" and wl.admitted_gpus == 0
    assert second.transitions_added == 2

    readmitted_at = NOW + timedelta(minutes=2)
    stamp2 = readmitted_at.isoformat().replace("+00:00", "Z")
    readmitted = copy.deepcopy(lists())
    item = find(readmitted, "workloads", name)
    for cond in item["status"]["conditions"]:
        if cond["type"] in ("QuotaReserved", "Admitted"):
            cond["lastTransitionTime"] = stamp2
    item["status"]["conditions"].append(
        {
            "type": "Evicted",
            "status": "False",
            "reason": "QuotaReserved",
            "message": "Previously",
            "lastTransitionTime": stamp2,
        }
    )
    _, third = sync(cluster, readmitted, readmitted_at)
    wl.refresh_from_db()

    assert third.transitions_added == 2
    added = set(wl.transitions.values_list("kind", "at")) - kinds_before
    assert added == {
        ("evicted", evicted_at),
        ("requeued", evicted_at),
        ("quota_reserved", readmitted_at),
        ("admitted", readmitted_at),
    }
    assert wl.state == "admitted" and wl.quota_reserved_at == readmitted_at


# -- deletions ---------------------------------------------------------------------------------


def test_a_partial_list_deletes_nothing(cluster):
    sync(cluster, lists())
    shrunk = lists()
    for key in ("workloads", "cluster_queues", "local_queues", "pods", "nodes", "cohorts"):
        shrunk[key]["items"] = shrunk[key]["items"][:1]
        shrunk[key]["metadata"]["continue"] = "next-page"
    shrunk["resource_flavors"] = None

    _, result = sync(cluster, shrunk, NOW + timedelta(minutes=1))

    assert sum(result.deleted.values()) == 0
    for model in (ResourceFlavor, Cohort, ClusterQueue, LocalQueue, Workload, Node):
        assert not model.objects.filter(deleted_at__isnull=False).exists(), model
    assert not Allocation.objects.filter(ended_at__isnull=False).exists()
    # The implicit-cohort guard: a failed Cohort LIST never overwrites a real Cohort.
    assert Cohort.objects.get(name="research").resource_groups


def test_objects_missing_from_a_complete_list_are_marked_deleted_and_kept(cluster):
    sync(cluster, lists())
    later = NOW + timedelta(minutes=5)
    gone_workload = expected_workload("P3")["name"]
    fewer = lists()
    fewer["workloads"]["items"] = [
        i for i in items(fewer, "workloads") if i["metadata"]["name"] != gone_workload
    ]
    fewer["pods"]["items"] = [
        i for i in items(fewer, "pods") if not i["metadata"]["name"].startswith("ocr-finetune")
    ]
    fewer["local_queues"]["items"] = items(fewer, "local_queues")[:-1]
    gone_lq = items(lists(), "local_queues")[-1]["metadata"]["name"]
    fewer["nodes"]["items"] = items(fewer, "nodes")[:-1]

    _, result = sync(cluster, fewer, later)

    wl = Workload.objects.get(name=gone_workload)
    assert wl.deleted_at == later
    assert wl.transitions.filter(kind="deleted", at=later).exists()
    assert result.deleted["Workload"] == 1
    assert LocalQueue.objects.get(name=gone_lq).deleted_at == later
    assert Node.objects.filter(deleted_at=later).count() == 1
    ended = Allocation.objects.filter(ended_at=later)
    assert {a.pod for a in ended} == {
        p.split("/")[1]
        for p, v in EXPECTED["podToWorkload"].items()
        if v["workload"] == gone_workload
    }
    assert (
        Workload.objects.filter(deleted_at__isnull=True).count() == len(EXPECTED["workloads"]) - 1
    )

    # It comes back: deleted_at is cleared, and nothing is duplicated.
    _, back = sync(cluster, lists(), later + timedelta(minutes=1))
    wl.refresh_from_db()
    assert wl.deleted_at is None
    assert back.updated["Workload"] == 1
    assert Workload.objects.count() == len(EXPECTED["workloads"])


def test_a_pod_that_stops_running_ends_its_allocation(cluster):
    sync(cluster, lists())
    later = NOW + timedelta(minutes=3)
    done = lists()
    pod = items(done, "pods")[0]
    pod["status"]["phase"] = "Succeeded"
    pod["status"]["containerStatuses"][0]["state"] = {
        "terminated": {"exitCode": 0, "finishedAt": "2026-08-22T12:01:00Z"}
    }

    sync(cluster, done, later)
    sync(cluster, done, later + timedelta(minutes=1))

    allocation = Allocation.objects.get(pod=pod["metadata"]["name"])
    assert allocation.ended_at == datetime(2026, 8, 22, 12, 1, tzinfo=UTC)
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 20


def test_removed_quota_rows_are_deleted_with_their_queue_kept(cluster):
    sync(cluster, lists())
    changed = lists()
    spec = find(changed, "cluster_queues", "team-a")["spec"]
    spec["resourceGroups"][0]["flavors"] = spec["resourceGroups"][0]["flavors"][:1]

    _, result = sync(cluster, changed)

    team_a = ClusterQueue.objects.get(name="team-a")
    assert set(team_a.quotas.values_list("flavor_name", flat=True)) == {"h100"}
    assert result.deleted["ClusterQueueQuota"] == 3


# -- malformed input and scale -----------------------------------------------------------------


def test_malformed_objects_are_skipped_while_the_rest_is_written(cluster):
    bad = lists()
    workloads = items(bad, "workloads")
    workloads[0]["apiVersion"] = "kueue.x-k8s.io/v9"
    workloads[1]["spec"]["podSets"][0]["count"] = "three"
    find(bad, "cluster_queues", "team-b")["spec"]["resourceGroups"][0]["flavors"][0]["resources"][
        2
    ]["nominalQuota"] = "many"
    items(bad, "pods").append({"kind": "Pod", "metadata": {"namespace": "x"}})

    batch, result = sync(cluster, bad)

    assert batch.stats.skipped == 4
    assert Workload.objects.count() == len(EXPECTED["workloads"]) - 2
    assert not ClusterQueue.objects.filter(name="team-b").exists()
    # team-b's workloads are kept, without a queue to point at.
    b1 = Workload.objects.get(name=expected_workload("B1")["name"])
    assert b1.cluster_queue is None
    assert Allocation.objects.count() == len(EXPECTED["podToWorkload"])

    # The next complete sync must not take the skipped Workloads for deleted ones.
    _, again = sync(cluster, bad, NOW + timedelta(minutes=1))
    assert again.deleted["Workload"] == 0


def test_strings_longer_than_their_column_are_cut_not_fatal(cluster):
    odd = lists()
    cond = find(odd, "workloads", expected_workload("A3")["name"])["status"]["conditions"][0]
    cond["reason"] = "R" * 500

    sync(cluster, odd)

    assert len(Workload.objects.get(name=expected_workload("A3")["name"]).state_reason) == 200


def scaled(copies: int) -> dict:
    """The fixture with every Workload and Pod repeated ``copies`` times under new names."""
    base = lists()
    for key in ("workloads", "pods"):
        extra = []
        for n in range(1, copies):
            for item in items(base, key):
                clone = copy.deepcopy(item)
                clone["metadata"]["name"] += f"-x{n}"
                clone["metadata"]["uid"] = clone["metadata"].get("uid", "") + f"-x{n}"
                annotations = clone["metadata"].get("annotations", {})
                if "kueue.x-k8s.io/workload" in annotations:
                    annotations["kueue.x-k8s.io/workload"] += f"-x{n}"
                extra.append(clone)
        base[key]["items"] = items(base, key) + extra
    # Its own teams too (teams are global), so both clusters start from the same state.
    for item in items(base, "cluster_queues"):
        item["metadata"]["labels"]["example.com/team"] += "-scaled"
    return base


def test_query_count_does_not_grow_with_the_number_of_objects(cluster):
    other = Cluster.objects.create(name="other")
    small, large = lists(), scaled(4)

    with CaptureQueriesContext(connection) as small_first:
        sync(cluster, small)
    with CaptureQueriesContext(connection) as large_first:
        _, result = sync(other, large)
    assert result.created["Workload"] == 4 * len(EXPECTED["workloads"])
    with CaptureQueriesContext(connection) as small_again:
        sync(cluster, small)
    with CaptureQueriesContext(connection) as large_again:
        sync(other, large)

    # SQLite caps a statement at 999 parameters, so Django splits a bulk INSERT there by the
    # row width; every other statement is one per kind, whatever the number of objects.
    assert reads_and_updates(large_first) == reads_and_updates(small_first)
    assert reads_and_updates(large_again) == reads_and_updates(small_again)
    if connection.vendor == "postgresql":
        assert len(large_first) == len(small_first)
        assert len(large_again) == len(small_again)
    assert len(small_first) < 60


def reads_and_updates(context: CaptureQueriesContext) -> int:
    return sum(1 for q in context.captured_queries if not q["sql"].startswith("INSERT"))


# -- queue samples -----------------------------------------------------------------------------


def test_queue_samples_upsert_per_window(cluster):
    batch, _ = sync(cluster, lists())
    rows = build_queue_samples(batch)

    assert write_queue_samples(cluster, rows, NOW, 60) == len(rows)
    first = list(ClusterQueueSample.objects.order_by("pk").values())
    assert write_queue_samples(cluster, rows, NOW, 60) == len(rows)
    assert list(ClusterQueueSample.objects.order_by("pk").values()) == first
    write_queue_samples(cluster, rows, NOW + timedelta(minutes=1), 60)
    assert ClusterQueueSample.objects.count() == 2 * len(rows)

    team_a = ClusterQueueSample.objects.get(
        cluster_queue__name="team-a", flavor_name="h100", sampled_at=NOW
    )
    expected = EXPECTED["clusterQueues"]["team-a"]
    assert team_a.total == expected["h100"]["admittedGPUs"]
    assert team_a.borrowed == expected["borrowedGPUs"]
    assert team_a.pending_demand == expected["pendingGPUDemand"]


def test_queue_samples_for_unknown_queues_are_skipped(cluster):
    batch, _ = sync(cluster, lists())
    rows = build_queue_samples(batch)
    rows[0].cluster_queue_name = "no-such-queue"

    assert write_queue_samples(cluster, rows, NOW, 60) == len(rows) - 1


def test_a_workload_back_with_its_own_uid_was_never_gone_and_leaves_no_deleted_transition(
    cluster,
):
    # Given a LIST that lied (the workload missing) and the next one that has it again
    sync(cluster, lists())
    name = expected_workload("P3")["name"]
    fewer = lists()
    fewer["workloads"]["items"] = [
        i for i in items(fewer, "workloads") if i["metadata"]["name"] != name
    ]
    sync(cluster, fewer, NOW + timedelta(minutes=5))
    assert Workload.objects.get(name=name).transitions.filter(kind="deleted").exists()

    sync(cluster, lists(), NOW + timedelta(minutes=6))

    # Then its history has no deletion: a UID is never reused, so it never went away
    wl = Workload.objects.get(name=name)
    assert wl.deleted_at is None
    assert not wl.transitions.filter(kind="deleted").exists()
    assert wl.transitions.exists()


def test_a_workload_recreated_under_its_name_keeps_the_deletion_of_the_old_one(cluster):
    sync(cluster, lists())
    name = expected_workload("P3")["name"]
    fewer = lists()
    fewer["workloads"]["items"] = [
        i for i in items(fewer, "workloads") if i["metadata"]["name"] != name
    ]
    sync(cluster, fewer, NOW + timedelta(minutes=5))
    recreated = lists()
    for item in items(recreated, "workloads"):
        if item["metadata"]["name"] == name:
            item["metadata"]["uid"] = "a-new-uid-for-a-new-object"

    sync(cluster, recreated, NOW + timedelta(minutes=6))

    wl = Workload.objects.get(name=name)
    assert wl.deleted_at is None
    assert wl.transitions.filter(kind="deleted", at=NOW + timedelta(minutes=5)).exists()
