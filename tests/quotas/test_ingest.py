"""quotas.ingest: recorded Kueue v1beta2 / v1beta1 LISTs -> rows, checked against expected.json."""

import copy
import json
from dataclasses import asdict
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from quotas.choices import WorkloadState
from quotas.ingest import (
    KueueSnapshot,
    build_queue_samples,
    build_snapshot,
    cohort_totals,
    snapshot_from_lists,
)

KUEUE = Path(__file__).resolve().parent.parent / "fixtures" / "kueue"
EXPECTED = json.loads((KUEUE / "expected.json").read_text())
NOW = datetime(2026, 8, 22, 12, tzinfo=UTC)
TEAM_LABELS = ["example.com/team"]
GPU = "nvidia.com/gpu"
VERSIONS = ["v1beta2", "v1beta1"]
# expected.json names states the way the README does; quotas.choices has our names.
EXPECTED_STATES = {
    "admitted": WorkloadState.ADMITTED,
    "pending": WorkloadState.PENDING,
    "finished": WorkloadState.SUCCEEDED,
    "preempted": WorkloadState.PREEMPTED,
    "backoff": WorkloadState.REQUEUED,
}


def load(name: str) -> dict:
    return json.loads((KUEUE / name).read_text())


def fixture_lists(version: str) -> dict[str, dict]:
    return {
        "resource_flavors": load(f"resourceflavors.{version}.json"),
        "cohorts": load(f"cohorts.{version}.json"),
        "cluster_queues": load(f"clusterqueues.{version}.json"),
        "local_queues": load(f"localqueues.{version}.json"),
        "workloads": load(f"workloads.{version}.json"),
        "workload_priority_classes": load("workloadpriorityclasses.v1beta2.json"),
        "pods": load("pods.v1.json"),
    }


def node(name: str, labels: dict, allocatable: dict, capacity: dict | None = None) -> dict:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
        "spec": {},
        "status": {"capacity": capacity or allocatable, "allocatable": allocatable},
    }


def node_list(*nodes: dict) -> dict:
    return {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": list(nodes)}


def fixture_nodes() -> dict:
    """Nodes for the pods in pods.v1.json, labelled like the ResourceFlavors expect."""
    nodes = []
    for pool, product, count in (
        ("h100", "NVIDIA-H100-80GB-HBM3", 8),
        ("a100", "NVIDIA-A100-SXM4-80GB", 4),
    ):
        for index in range(1, count + 1):
            labels = {
                "kubernetes.io/hostname": f"gpu-node-{pool}-{index:02d}",
                "cloud.example.com/gpu-pool": pool,
                "nvidia.com/gpu.product": product,
            }
            resources = {"cpu": "192", "memory": "2Ti", GPU: "8"}
            nodes.append(node(f"gpu-node-{pool}-{index:02d}", labels, resources))
    return node_list(*nodes)


def build(version: str = "v1beta2", **overrides):
    lists = {**fixture_lists(version), **overrides}
    return build_snapshot(snapshot_from_lists(NOW, **lists), TEAM_LABELS)


@pytest.fixture(params=VERSIONS)
def batch(request):
    return build(request.param, nodes=fixture_nodes())


def samples_by_queue(batch) -> dict[str, dict[str, object]]:
    result: dict[str, dict[str, object]] = {}
    for row in build_queue_samples(batch):
        result.setdefault(row.cluster_queue_name, {})[row.flavor_name] = row
    return result


def workload(batch, name: str):
    return next(row for row in batch.workloads if row.meta.name == name)


def expected_workload(key: str) -> dict:
    return next(w for w in EXPECTED["workloads"] if w["key"] == key)


# -- snapshot ----------------------------------------------------------------------------------


def test_snapshot_marks_given_lists_complete_and_missing_ones_not():
    snap = snapshot_from_lists(NOW, **fixture_lists("v1beta2"))

    assert snap.complete == frozenset(
        {
            "ResourceFlavor",
            "Cohort",
            "ClusterQueue",
            "LocalQueue",
            "Workload",
            "WorkloadPriorityClass",
            "Pod",
        }
    )
    assert len(snap.workloads) == len(load("workloads.v1beta2.json")["items"])


def test_a_paginated_or_failed_list_is_not_complete():
    partial = load("workloads.v1beta2.json")
    partial["metadata"]["continue"] = "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"

    snap = snapshot_from_lists(NOW, workloads=partial, pods={"kind": "PodList"}, cohorts=None)

    assert snap.complete == frozenset()
    assert len(snap.workloads) == len(partial["items"])


def test_pod_items_inherit_api_version_from_their_list():
    snap = snapshot_from_lists(NOW, pods=load("pods.v1.json"))

    assert {item["apiVersion"] for item in snap.pods} == {"v1"}
    assert {item["kind"] for item in snap.pods} == {"Pod"}


def test_snapshot_rejects_naive_times_and_unknown_keywords():
    with pytest.raises(ValueError):
        snapshot_from_lists(datetime(2026, 8, 22, 12))  # noqa: DTZ001
    with pytest.raises(TypeError):
        snapshot_from_lists(NOW, jobs={"items": []})


# -- both API versions -------------------------------------------------------------------------


def test_v1beta1_and_v1beta2_give_the_same_rows():
    v1beta2 = build("v1beta2", nodes=fixture_nodes())
    v1beta1 = build("v1beta1", nodes=fixture_nodes())

    for name in ("flavors", "cohorts", "cluster_queues", "local_queues", "workloads", "pods"):
        assert [asdict(r) for r in getattr(v1beta1, name)] == [
            asdict(r) for r in getattr(v1beta2, name)
        ], name
    assert v1beta1.transitions == v1beta2.transitions
    assert v1beta1.teams == v1beta2.teams
    assert build_queue_samples(v1beta1) == build_queue_samples(v1beta2)
    assert v1beta1.stats.skipped == v1beta2.stats.skipped == 0


def test_it_reads_nothing_as_skipped_in_the_fixtures(batch):
    items = sum(len(v["items"]) for v in fixture_lists("v1beta2").values())
    assert batch.stats.records_read == items + len(fixture_nodes()["items"])
    assert batch.stats.skipped == 0
    assert not batch.stats.skip_reasons


# -- queues and cohorts against expected.json --------------------------------------------------


@pytest.mark.parametrize("queue", sorted(EXPECTED["clusterQueues"]))
def test_cluster_queue_figures_match_expected(batch, queue):
    expected = EXPECTED["clusterQueues"][queue]
    samples = samples_by_queue(batch)[queue]
    cq = next(row for row in batch.cluster_queues if row.meta.name == queue)

    assert cq.cohort_name == expected["cohort"]
    assert sum(s.total for s in samples.values()) == expected["admittedGPUs"]
    assert sum(s.borrowed for s in samples.values()) == expected["borrowedGPUs"]
    assert sum(s.pending_demand for s in samples.values()) == expected["pendingGPUDemand"]
    assert sum(s.admitted_workloads for s in samples.values()) == expected["admittedWorkloads"]
    assert sum(s.pending_workloads for s in samples.values()) == expected["pendingWorkloads"]
    assert cq.weighted_share == expected["weightedShare"]
    assert cq.pending_workloads == expected["pendingWorkloads"]
    assert cq.admitted_workloads == expected["admittedWorkloads"]
    flavors = {k: v for k, v in expected.items() if isinstance(v, dict)}
    assert set(samples) == set(flavors)
    for flavor, figures in flavors.items():
        sample = samples[flavor]
        assert sample.nominal == figures["nominalGPUs"]
        assert sample.borrowing_limit == figures["borrowingLimitGPUs"]
        assert sample.lending_limit == figures["lendingLimitGPUs"]
        assert sample.total == figures["admittedGPUs"]
        assert sample.borrowed == figures["borrowedGPUs"]


def test_quota_limits_keep_zero_apart_from_absent(batch):
    team_c = next(row for row in batch.cluster_queues if row.meta.name == "team-c")
    h100 = next(q for q in team_c.quotas if q.flavor_name == "h100" and q.resource == GPU)
    assert h100.borrowing_limit == Decimal(0)

    lists = fixture_lists("v1beta2")
    item = lists["cluster_queues"]["items"][0]
    for resource in item["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
        resource.pop("borrowingLimit", None)
        resource.pop("lendingLimit", None)
    rebuilt = build_snapshot(snapshot_from_lists(NOW, **lists), TEAM_LABELS)
    quotas = rebuilt.cluster_queues[0].quotas
    unlimited = [q for q in quotas if q.flavor_name == "h100"]
    assert unlimited and all(q.borrowing_limit is None for q in unlimited)
    assert all(q.lending_limit is None for q in unlimited)


def test_pending_demand_goes_to_the_first_flavor_of_the_queue(batch):
    samples = samples_by_queue(batch)
    # batch tries a100 first, team-a tries h100 first (README flavor order).
    assert (
        samples["batch"]["a100"].pending_demand
        == EXPECTED["clusterQueues"]["batch"]["pendingGPUDemand"]
    )
    assert samples["batch"]["h100"].pending_demand == 0
    assert (
        samples["team-a"]["h100"].pending_demand
        == EXPECTED["clusterQueues"]["team-a"]["pendingGPUDemand"]
    )


@pytest.mark.parametrize("cohort", sorted(EXPECTED["cohorts"]))
def test_cohort_totals_sum_members_and_the_cohort_pool(batch, cohort):
    totals = cohort_totals(batch)

    for flavor, figures in EXPECTED["cohorts"][cohort].items():
        assert totals[(cohort, flavor)]["nominal"] == figures["sumOfNominalGPUs"]
        assert totals[(cohort, flavor)]["reserved"] == figures["reservedGPUs"]


def test_cohort_totals_borrowed_is_what_members_borrow(batch):
    totals = cohort_totals(batch)
    for cohort in EXPECTED["cohorts"]:
        members = [q for q, v in EXPECTED["clusterQueues"].items() if v["cohort"] == cohort]
        expected = sum(
            EXPECTED["clusterQueues"][q].get("h100", {}).get("borrowedGPUs", 0) for q in members
        )
        assert totals[(cohort, "h100")]["borrowed"] == expected


def test_lending_is_attributed_to_members_with_unused_lendable_quota(batch):
    samples = [s for s in build_queue_samples(batch)]
    cohort_of = {q: v["cohort"] for q, v in EXPECTED["clusterQueues"].items()}
    for cohort in EXPECTED["cohorts"]:
        for flavor in ("h100", "a100"):
            group = [
                s
                for s in samples
                if cohort_of[s.cluster_queue_name] == cohort and s.flavor_name == flavor
            ]
            borrowed = sum(s.borrowed for s in group)
            assert sum(s.lent for s in group) == borrowed
            for s in group:
                unused = max(Decimal(0), s.nominal - s.reserved)
                assert s.lent <= min(unused, s.lending_limit)
    by_queue = samples_by_queue(batch)
    # team-c uses all its H100 nominal quota, so it has nothing to lend.
    assert by_queue["team-c"]["h100"].lent == 0
    assert by_queue["team-a"]["h100"].lent == 0


def test_a_cohort_pool_is_lent_before_member_quota():
    lists = fixture_lists("v1beta2")
    # Make team-a borrow 4 A100 while the research pool holds 8 A100.
    for item in lists["cluster_queues"]["items"]:
        if item["metadata"]["name"] == "team-a":
            for usage_key in ("flavorsUsage", "flavorsReservation"):
                for flavor in item["status"][usage_key]:
                    if flavor["name"] == "a100":
                        for r in flavor["resources"]:
                            if r["name"] == GPU:
                                r["total"], r["borrowed"] = "12", "4"
    samples = build_queue_samples(build_snapshot(snapshot_from_lists(NOW, **lists), TEAM_LABELS))
    research = [
        s for s in samples if s.flavor_name == "a100" and s.cluster_queue_name[:4] == "team"
    ]
    assert sum(s.lent for s in research) == 0


# -- workloads ---------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [w["key"] for w in EXPECTED["workloads"]])
def test_workload_rows_match_expected(batch, key):
    expected = expected_workload(key)
    row = workload(batch, expected["name"])

    assert row.meta.namespace == expected["namespace"]
    assert row.owner_kind == expected["ownerKind"]
    assert row.owner_name == expected["ownerName"]
    assert row.cluster_queue_name == expected["clusterQueue"]
    assert row.state == EXPECTED_STATES[expected["state"]]
    assert row.requested_gpus == expected["gpus"]
    assert row.priority_class_name == (expected["priorityClass"] or "")
    assert row.flavors.get(GPU) == expected["flavor"]
    holding = expected["state"] == "admitted"
    assert row.admitted_gpus == (expected["gpus"] if holding else 0)


def test_pending_workload_gets_its_queue_through_the_local_queue(batch):
    a3 = workload(batch, expected_workload("A3")["name"])
    assert a3.cluster_queue_name == "team-a"
    assert a3.state_reason == "Pending"
    assert "8 more needed" in a3.state_message


def test_borrowing_is_inferred_by_admission_order(batch):
    borrowing = {row.meta.name: row.borrowed_gpus for row in batch.workloads if row.borrowing}

    by_queue: dict[str, float] = {}
    for name, gpus in borrowing.items():
        queue = next(w["clusterQueue"] for w in EXPECTED["workloads"] if w["name"] == name)
        by_queue[queue] = by_queue.get(queue, 0) + gpus
    assert set(borrowing) == {expected_workload("A2")["name"], expected_workload("P1")["name"]}
    assert by_queue == {
        q: v["borrowedGPUs"] for q, v in EXPECTED["clusterQueues"].items() if v["borrowedGPUs"]
    }


def test_borrowing_follows_quota_reservation_time_not_list_order():
    lists = fixture_lists("v1beta2")
    lists["workloads"]["items"].reverse()
    again = build_snapshot(snapshot_from_lists(NOW, **lists), TEAM_LABELS)
    assert {row.meta.name for row in again.workloads if row.borrowing} == {
        expected_workload("A2")["name"],
        expected_workload("P1")["name"],
    }


def test_finished_workload_holds_nothing_but_keeps_its_flavor(batch):
    a4 = workload(batch, expected_workload("A4")["name"])

    assert a4.state == WorkloadState.SUCCEEDED
    assert a4.admitted_gpus == 0
    assert a4.usage == {}
    assert not a4.borrowing
    assert a4.flavors[GPU] == "h100"
    assert a4.finished_at == datetime(2026, 8, 20, 21, 10, 45, tzinfo=UTC)


def test_preempted_workload_names_its_preemptor(batch):
    a5 = workload(batch, expected_workload("A5")["name"])
    c1 = workload(batch, expected_workload("C1")["name"])

    assert a5.state == WorkloadState.PREEMPTED
    assert a5.state_reason == "InCohortReclamation"
    assert a5.accumulated_execution_seconds == 57638
    preempted = [t for t in batch.transitions if t.workload_name == a5.meta.name]
    kinds = {t.kind for t in preempted}
    assert {"evicted", "preempted", "requeued"} <= kinds
    preemption = next(t for t in preempted if t.kind == "preempted")
    assert preemption.preemptor_uid == c1.meta.uid
    assert preemption.preemptor_job_uid == c1.job_uid
    assert preemption.preemptor_path == f"/research/{c1.cluster_queue_name}"


def test_requeued_workload_waits_out_its_backoff(batch):
    b2 = workload(batch, expected_workload("B2")["name"])

    assert b2.state == WorkloadState.REQUEUED
    assert b2.requeue_at == datetime(2026, 8, 22, 12, 0, 30, tzinfo=UTC)
    assert b2.requeue_count == 1
    requeued = [t for t in batch.transitions if t.workload_name == b2.meta.name]
    assert [t.requeue_at for t in requeued if t.kind == "requeued"] == [b2.requeue_at]
    assert "evicted" in {t.kind for t in requeued}


def test_transitions_come_from_true_conditions_once_each(batch):
    keys = [(t.workload_namespace, t.workload_name, t.kind, t.at) for t in batch.transitions]
    assert len(keys) == len(set(keys))
    a3 = expected_workload("A3")["name"]
    # A pending workload never reserved quota: no quota_reserved transition.
    assert not [t for t in batch.transitions if t.workload_name == a3]
    a4 = [t for t in batch.transitions if t.workload_name == expected_workload("A4")["name"]]
    assert {t.kind for t in a4} == {"quota_reserved", "admitted", "pods_ready", "finished"}
    assert next(t for t in a4 if t.kind == "finished").reason == "Succeeded"


def test_priority_falls_back_to_the_priority_class_value():
    lists = fixture_lists("v1beta2")
    for item in lists["workloads"]["items"]:
        item["spec"].pop("priority", None)
    rebuilt = build_snapshot(snapshot_from_lists(NOW, **lists), TEAM_LABELS)
    classes = {
        item["metadata"]["name"]: item["value"]
        for item in load("workloadpriorityclasses.v1beta2.json")["items"]
    }
    for row in rebuilt.workloads:
        assert row.priority == classes.get(row.priority_class_name, 0)


def test_mig_resources_count_as_slices_of_a_gpu():
    lists = fixture_lists("v1beta2")
    item = copy.deepcopy(lists["workloads"]["items"][0])
    item["metadata"]["name"] = "job-mig-demo-00000"
    item["metadata"]["uid"] = "mig-demo"
    item["status"] = {}
    container = item["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"nvidia.com/mig-3g.40gb": "2"}}
    item["spec"]["podSets"][0]["count"] = 2
    lists["workloads"]["items"].append(item)

    row = workload(
        build_snapshot(snapshot_from_lists(NOW, **lists), TEAM_LABELS), "job-mig-demo-00000"
    )

    # 2 pods x 2 instances x 3/7 of a GPU.
    assert row.requested_gpus == pytest.approx(12 / 7, abs=1e-6)
    assert row.pod_sets[0]["gpus_per_pod"] == pytest.approx(6 / 7, abs=1e-6)
    assert row.requests == {"nvidia.com/mig-3g.40gb": Decimal(4)}


# -- pods --------------------------------------------------------------------------------------


def test_every_pod_joins_its_workload_as_expected(batch):
    pods = {f"{p.meta.namespace}/{p.meta.name}": p for p in batch.pods}

    assert set(pods) == set(EXPECTED["podToWorkload"])
    for key, expected in EXPECTED["podToWorkload"].items():
        pod = pods[key]
        assert pod.workload_name == expected["workload"], key
        assert pod.cluster_queue_name == expected["clusterQueue"], key
        assert pod.local_queue_name == expected["localQueue"], key
        assert pod.podset == expected["podset"], key
        assert pod.node_name == expected["node"], key
        assert pod.gpus == expected["gpus"], key
        assert pod.flavor == expected["flavor"], key
        assert pod.running


@pytest.mark.parametrize(
    "strip",
    [
        ("kueue.x-k8s.io/workload",),
        (
            "kueue.x-k8s.io/workload",
            "kueue.x-k8s.io/pod-group-name",
            "kueue.x-k8s.io/prebuilt-workload-name",
        ),
    ],
    ids=["without-workload-annotation", "owner-chain-only"],
)
def test_pods_join_through_fallbacks_without_the_annotation(strip):
    pods = load("pods.v1.json")
    for item in pods["items"]:
        for key in strip:
            item["metadata"].get("annotations", {}).pop(key, None)
            item["metadata"].get("labels", {}).pop(key, None)

    rebuilt = build("v1beta2", pods=pods)

    joined = {f"{p.meta.namespace}/{p.meta.name}": p for p in rebuilt.pods}
    for key, expected in EXPECTED["podToWorkload"].items():
        assert joined[key].workload_name == expected["workload"], key
        assert joined[key].joined_by != "annotation"
        assert joined[key].flavor == expected["flavor"], key


def test_pod_gpus_follow_the_init_container_rule():
    spec = {
        "nodeName": "gpu-node-h100-01",
        "containers": [
            {"name": "a", "resources": {"limits": {GPU: "1"}}},
            {"name": "b", "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}}},
        ],
        "initContainers": [
            {"name": "warmup", "resources": {"limits": {GPU: "4"}}},
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {GPU: "1"}}},
        ],
    }
    pod = {
        "metadata": {"name": "p", "namespace": "team-a", "uid": "u-p"},
        "spec": spec,
        "status": {"phase": "Running", "startTime": "2026-08-22T11:00:00Z"},
    }
    cpu_only = {
        "metadata": {"name": "q", "namespace": "team-a", "uid": "u-q"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running"},
    }
    batch = build_snapshot(
        snapshot_from_lists(NOW, pods={"apiVersion": "v1", "items": [pod, cpu_only]}), []
    )

    # max(2 app + 1 sidecar, 4 init) = 4; the CPU-only pod holds no GPU and is left out.
    assert [(p.meta.name, p.gpus) for p in batch.pods] == [("p", 4.0)]
    assert batch.pods[0].workload_name == ""


# -- nodes, flavors, teams, cohorts ------------------------------------------------------------


def test_nodes_get_their_flavor_capacity_and_mig_profiles():
    mig = node(
        "gpu-node-mig-01",
        {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "karpenter.sh/nodepool": "mig"},
        {GPU: "0", "nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"},
    )
    cpu = node("cpu-node-01", {"kubernetes.io/os": "linux"}, {"cpu": "64"})
    nodes = fixture_nodes()
    nodes["items"] += [mig, cpu]

    batch = build("v1beta2", nodes=nodes)

    by_name = {n.meta.name: n for n in batch.nodes}
    assert "cpu-node-01" not in by_name
    assert by_name["gpu-node-h100-03"].flavor == "h100"
    assert by_name["gpu-node-a100-02"].flavor == "a100"
    assert by_name["gpu-node-h100-03"].gpu_capacity == 8
    assert by_name["gpu-node-a100-02"].gpu_product == "NVIDIA-A100-SXM4-80GB"
    # MIG node: the pool label differs from the a100 flavor's, so it matches no flavor.
    assert by_name["gpu-node-mig-01"].flavor == ""
    assert by_name["gpu-node-mig-01"].node_pool == "mig"
    assert by_name["gpu-node-mig-01"].mig_allocatable == {
        "nvidia.com/mig-1g.10gb": 14,
        "nvidia.com/mig-3g.40gb": 4,
    }
    assert sum(n.gpu_capacity for n in batch.nodes) == 8 * 8 + 4 * 8


def test_teams_come_from_the_first_team_label_else_the_queue_name():
    labelled = build("v1beta2")
    plain = build_snapshot(snapshot_from_lists(NOW, **fixture_lists("v1beta2")), ["no/such"])

    labels = {
        item["metadata"]["name"]: item["metadata"]["labels"]["example.com/team"]
        for item in load("clusterqueues.v1beta2.json")["items"]
    }
    assert {cq.meta.name: cq.team_name for cq in labelled.cluster_queues} == labels
    assert all(cq.team_from_label for cq in labelled.cluster_queues)
    assert {cq.meta.name: cq.team_name for cq in plain.cluster_queues} == {q: q for q in labels}
    namespaces = {team.name: team.namespaces for team in labelled.teams}
    assert namespaces[labels["serving"]] == ["ml-serving"]


def test_implicit_cohorts_exist_for_names_only_a_queue_or_a_parent_gives():
    lists = fixture_lists("v1beta2")
    lists["cluster_queues"]["items"][0]["spec"]["cohortName"] = "ghost"
    lists["cohorts"]["items"][1]["spec"]["parentName"] = "org"

    batch = build_snapshot(snapshot_from_lists(NOW, **lists), TEAM_LABELS)

    cohorts = {row.meta.name: row for row in batch.cohorts}
    assert cohorts["ghost"].implicit and cohorts["org"].implicit
    assert not cohorts["research"].implicit
    assert cohorts["prod"].parent_name == "org"
    totals = cohort_totals(batch)
    # A parent's figures include its child cohort's.
    assert totals[("org", "h100")]["nominal"] == totals[("prod", "h100")]["nominal"]


# -- malformed input ---------------------------------------------------------------------------


def test_malformed_objects_are_skipped_counted_and_the_rest_kept():
    lists = fixture_lists("v1beta2")
    workloads = lists["workloads"]["items"]
    workloads[0] = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "spec": {}}
    del workloads[1]["metadata"]["name"]
    workloads[2]["spec"]["podSets"] = "eight GPUs"
    workloads[3]["apiVersion"] = "kueue.x-k8s.io/v1alpha9"
    workloads[4]["status"]["conditions"][0]["lastTransitionTime"] = "yesterday"
    workloads.append(copy.deepcopy(workloads[5]))
    workloads.append("not an object")
    queues = lists["cluster_queues"]["items"]
    queues[1]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = "lots"
    pods = lists["pods"]["items"]
    pods[0]["spec"]["containers"] = {"name": "oops"}
    pods.append(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "namespace": "y"}}
    )

    batch = build_snapshot(snapshot_from_lists(NOW, **lists), TEAM_LABELS)

    reasons = batch.stats.skip_reasons
    assert reasons["Workload: missing_metadata"] == 2
    assert reasons["Workload: missing_name"] == 1
    assert reasons["Workload: wrong_type"] == 1
    assert reasons["Workload: unknown_api_version"] == 1
    assert reasons["Workload: bad_time"] == 1
    assert reasons["Workload: duplicate"] == 1
    assert reasons["ClusterQueue: bad_quantity"] == 1
    assert reasons["Pod: wrong_type"] == 1
    assert reasons["Pod: unexpected_kind"] == 1
    assert batch.stats.skipped == sum(reasons.values()) == 10
    assert len(batch.workloads) == 16 - 5
    assert len(batch.cluster_queues) == 4
    assert len(batch.pods) == 20
    # Skipped but identifiable objects still count as listed; unidentifiable ones taint the kind.
    assert (workloads[3]["metadata"]["namespace"], workloads[3]["metadata"]["name"]) in batch.seen[
        "Workload"
    ]
    assert batch.unidentified == {"Workload"}


def test_an_empty_snapshot_builds_an_empty_batch():
    batch = build_snapshot(KueueSnapshot(observed_at=NOW), TEAM_LABELS)
    assert batch.workloads == [] and batch.pods == [] and batch.stats.records_read == 0
    assert build_queue_samples(batch) == [] and cohort_totals(batch) == {}


def test_pod_sets_keep_the_termination_grace_period_for_the_reclaim_estimate():
    workloads = load("workloads.v1beta2.json")
    changed = copy.deepcopy(workloads)
    target = next(w for w in changed["items"] if w["metadata"]["name"] == "job-lr-sweep-17-62ba9")
    target["spec"]["podSets"][0]["template"]["spec"]["terminationGracePeriodSeconds"] = 120

    batch = build(workloads=changed)

    pod_set = workload(batch, "job-lr-sweep-17-62ba9").pod_sets[0]
    assert pod_set["termination_grace_period_seconds"] == 120
    untouched = workload(batch, "job-llama-pretrain-8b-fbe70").pod_sets[0]
    assert untouched["termination_grace_period_seconds"] == 30
