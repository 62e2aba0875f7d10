"""KAI Scheduler as a quota source (quotas/sources): the pure translators, detection, and the
KAI fixtures (tests/fixtures/kai) through the real client, the fake API server, the sync, the
store and the read layer, checked against that README's expected figures."""

from __future__ import annotations

import copy
import time
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import Q
from django.utils import timezone
from rest_framework.test import APIClient

from dashboard.queries.workloads import workload_allocations
from fleet.choices import IngestSource, IngestStatus, QuotaSource
from fleet.models import Cluster, IngestRun, Node
from quotas.ingest import cohort_totals
from quotas.kueue import Discovery
from quotas.models import Allocation, ClusterQueue, Cohort, Workload
from quotas.now import holding_gpus, pending_gpus
from quotas.sources import SourceClient, detect_source, kai
from quotas.sources.common import FLAVOR
from quotas.sync import ClusterSync, sync_cluster
from tests.fixtures_checks.test_scheduler_figures import readme_table
from tests.quotas.source_helpers import resource, subtree_ids, when_watching
from tests.scheduler_fixtures import (
    KAI_GROUP,
    VOLCANO_GROUP,
    load_scheduler_fixtures,
    scheduler_items,
)

GPU = "nvidia.com/gpu"
QUEUE = f"Queue.{KAI_GROUP}"
POD_GROUP = f"PodGroup.{KAI_GROUP}"
QUEUES = readme_table("kai", "queue")
WORKLOADS = readme_table("kai", "workload")
PARENTS = ("dept-prod", "dept-research")


def limit(cell: str) -> Decimal | None:
    """A README borrowing-limit cell: None for "unlimited"."""
    return None if cell == "unlimited" else Decimal(cell)


def queues() -> list[dict[str, Any]]:
    return scheduler_items("kai", QUEUE)


def pod_groups() -> dict[str, dict[str, Any]]:
    return {g["metadata"]["name"]: g for g in scheduler_items("kai", POD_GROUP)}


def queue(name: str, quota: Any, limit: Any, allocated: str = "", **spec: Any) -> dict[str, Any]:
    """A KAI Queue with a GPU quota and limit."""
    return {
        "metadata": {"name": name, "resourceVersion": "7"},
        "spec": {"resources": {"gpu": {"quota": quota, "limit": limit}}, **spec},
        "status": {"allocated": {GPU: allocated}} if allocated else {},
    }


# --- pure translators ------------------------------------------------------------------------


def test_parent_queues_become_cohorts_with_the_readme_limits() -> None:
    cohorts, cluster_queues = kai.translate_queues(queues())

    by_name = {c["metadata"]["name"]: c for c in cohorts}
    assert sorted(by_name) == list(PARENTS)
    for name, cohort in by_name.items():
        quota = resource(cohort)
        # Each department's quota is exactly its children's: no own quota.
        assert quota["nominalQuota"] == "0", name
        assert limit(QUEUES[name]["borrowing limit"]) == (
            Decimal(quota["borrowingLimit"]) if "borrowingLimit" in quota else None
        ), name
        assert "parentName" not in cohort["spec"]
        weight = Decimal(cohort["spec"]["fairSharing"]["weight"])
        assert weight == Decimal(QUEUES[name]["over-quota weight"]), name
        assert cohort["metadata"]["labels"]["gpu-ledger.io/scheduler"] == "kai"
    assert sorted(q["metadata"]["name"] for q in cluster_queues) == sorted(
        set(QUEUES) - set(PARENTS)
    )


def test_leaf_queues_become_cluster_queues_with_the_readme_figures() -> None:
    _, cluster_queues = kai.translate_queues(queues())

    for translated in cluster_queues:
        name = translated["metadata"]["name"]
        figures = QUEUES[name]
        quota = resource(translated)
        assert translated["spec"]["cohortName"] == figures["parent"], name
        assert Decimal(quota["nominalQuota"]) == Decimal(figures["nominal"]), name
        assert limit(figures["borrowing limit"]) == (
            Decimal(quota["borrowingLimit"]) if "borrowingLimit" in quota else None
        ), name
        # KAI lends every unused GPU of a quota: no lending limit.
        assert "lendingLimit" not in quota, name
        weight = translated["spec"]["fairSharing"]["weight"]
        assert Decimal(weight) == Decimal(figures["over-quota weight"]), name
        assert translated["metadata"]["labels"][kai.WEIGHT_LABEL] == str(
            int(Decimal(figures["over-quota weight"]))
        )
        (usage,) = translated["status"]["flavorsUsage"][0]["resources"]
        assert Decimal(usage["total"]) == Decimal(figures["allocated"]), name
        assert Decimal(usage["borrowed"]) == Decimal(figures["borrowed"]), name
    serving = next(q for q in cluster_queues if q["metadata"]["name"] == "kai-serving")
    assert serving["metadata"]["labels"][kai.PRIORITY_LABEL] == "200"


def test_an_unlimited_quota_holds_what_it_uses_and_a_top_queue_has_no_cohort() -> None:
    alone = queue("adhoc", -1, 10, allocated="6")
    _, (translated,) = kai.translate_queues([alone])

    assert translated["spec"]["cohortName"] == ""
    # Never over its quota in KAI: nothing borrowed, nothing unused to lend.
    assert resource(translated) == {
        "name": GPU,
        "nominalQuota": "6",
        "borrowingLimit": "4",
        "lendingLimit": "0",
    }
    assert translated["status"]["flavorsUsage"][0]["resources"][0]["borrowed"] == "0"
    assert translated["metadata"]["labels"][kai.QUOTA_LABEL] == "-1"
    # No limit either: no borrowing limit.
    _, (free,) = kai.translate_queues([queue("free", 2, -1, allocated="5")])
    assert resource(free) == {"name": GPU, "nominalQuota": "2"}
    assert free["status"]["flavorsUsage"][0]["resources"][0]["borrowed"] == "3"


def test_an_unlimited_parent_tops_its_children_up_to_what_it_holds() -> None:
    listed = [
        queue("org", -1, -1, allocated="20"),
        queue("x", 8, -1, allocated="12", parentQueue="org"),
        queue("y", 4, 4, allocated="8", parentQueue="org"),
    ]
    (cohort,), _ = kai.translate_queues(listed)

    # Its subtree holds 20 against children's 12: 8 of its own, and no borrowing limit.
    assert resource(cohort) == {"name": GPU, "nominalQuota": "8"}


def test_a_cohort_changes_version_with_its_children() -> None:
    listed = queues()
    before = kai.queues_as("Cohort", listed)["dept-research"]
    child = next(q for q in listed if q["metadata"]["name"] == "kai-team-c")
    child["spec"]["resources"]["gpu"]["quota"] = 4
    child["metadata"]["resourceVersion"] = "4999999"

    after = kai.queues_as("Cohort", listed)["dept-research"]

    assert resource(after)["nominalQuota"] == "4"
    assert after["metadata"]["resourceVersion"] == "4999999"
    assert before["metadata"]["resourceVersion"] != after["metadata"]["resourceVersion"]


def test_pod_groups_become_workloads_by_their_resources() -> None:
    by_name = {kai.workload_name(g): kai.pod_group_to_workload(g) for g in pod_groups().values()}

    assert sorted(by_name) == sorted(name.split("/")[1] for name in WORKLOADS)
    running = by_name["llama-pretrain"]
    assert running["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"] == "kai-team-a"
    assert running["metadata"]["annotations"]["pod-group-name"].startswith("pg-llama-pretrain-")
    (pod_set,) = running["spec"]["podSets"]
    assert pod_set["count"] == 4
    assert pod_set["template"]["spec"]["containers"][0]["resources"]["requests"][GPU] == "4"
    assert running["status"]["admission"]["podSetAssignments"][0]["resourceUsage"][GPU] == "16"
    assert {(c["type"], c["status"]) for c in running["status"]["conditions"]} == {
        ("QuotaReserved", "True"),
        ("Admitted", "True"),
    }
    assert running["spec"]["priorityClassRef"]["name"] == "train"
    pending = by_name["protein-fold"]
    assert "admission" not in pending["status"]
    (condition,) = pending["status"]["conditions"]
    assert (condition["type"], condition["status"]) == ("QuotaReserved", "False")
    assert condition["reason"] == "NonPreemptibleOverQuota"
    assert condition["lastTransitionTime"] == "2026-08-22T10:00:04Z"
    requests = pending["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]
    assert requests["requests"][GPU] == "8"
    assert pending["metadata"]["labels"][kai.PREEMPTIBILITY_LABEL] == "non-preemptible"
    # No pod of it left and no phase saying how it ended: neither pending nor holding.
    empty = by_name["tokenizer-bench"]
    assert empty["spec"]["active"] is False and "admission" not in empty["status"]
    assert empty["status"]["conditions"][0]["reason"] == kai.NO_PODS
    # A Deployment replica's PodGroup is named after its pod.
    assert "vllm-llama70b-6f9c7d8b5-k2xqp" in by_name


def test_a_pod_group_whose_phase_says_it_ended_is_finished() -> None:
    group = copy.deepcopy(next(g for n, g in pod_groups().items() if "tokenizer" in n))
    group["status"]["phase"] = "Successful"
    conditions = kai.pod_group_to_workload(group)["status"]["conditions"]
    assert ("Finished", "Succeeded") in {(c["type"], c["reason"]) for c in conditions}
    group["status"]["phase"] = "Failed"
    conditions = kai.pod_group_to_workload(group)["status"]["conditions"]
    assert ("Finished", "Failed") in {(c["type"], c["reason"]) for c in conditions}
    assert kai.group_facts(group) is None


def test_a_pod_group_without_queue_or_owner_uid() -> None:
    group = {
        "metadata": {"name": "pg-adhoc", "namespace": "x", "labels": {"kai.scheduler/queue": "q"}},
        "spec": {"minMember": 3},
        "status": {"resourcesStatus": {"requested": {GPU: "3"}}},
    }
    workload = kai.pod_group_to_workload(group)

    assert workload["metadata"]["name"] == "pg-adhoc"  # no uid stripped: the name is kept
    assert workload["spec"]["queueName"] == "q"
    assert kai.group_facts(group) == ("q", "pending")
    assert kai.workload_counts([("q", "pending"), ("q", "admitted"), None]) == {"q": (1, 1)}


# --- detection -------------------------------------------------------------------------------


def discovery(*groups: str) -> Discovery:
    served = tuple((group, ("v2", "v2alpha2")) for group in sorted(groups))
    return Discovery(None, frozenset(), None, served)


@pytest.mark.parametrize(
    ("groups", "configured", "source"),
    [
        (("kueue.x-k8s.io", VOLCANO_GROUP, KAI_GROUP), "", "kueue"),
        ((VOLCANO_GROUP, KAI_GROUP), "", "volcano"),
        ((KAI_GROUP,), "", "kai"),
        (("kueue.x-k8s.io", KAI_GROUP), "kai", "kai"),
    ],
)
def test_detection_prefers_kueue_then_volcano_then_kai(groups, configured, source) -> None:
    assert detect_source(discovery(*groups), configured) == source


@pytest.fixture
def kai_api(make_kube_api) -> Any:
    """The KAI fixtures on an API server serving KAI Scheduler and no Kueue."""
    api = make_kube_api(load=False, kueue_versions=(), kai_versions=("v2", "v2alpha2"))
    return load_scheduler_fixtures(api, "kai")


@pytest.fixture
def kai_cluster(db: None) -> Cluster:
    return Cluster.objects.create(name="gpu-kai")


def test_the_real_client_detects_kai_from_discovery(kai_api, kai_cluster) -> None:
    with SourceClient.for_cluster(kai_cluster) as client:
        assert client.source() == QuotaSource.KAI
        listed = client.list_objects("ClusterQueue")
        cohorts = client.list_objects("Cohort")
    assert len(listed.items) == 4 and len(cohorts.items) == 2
    assert listed.resource_version
    assert kai_api.list_count(QUEUE) == 2 and kai_api.list_count(POD_GROUP) == 1


# --- a full sync against the README ----------------------------------------------------------


def test_a_kai_sync_writes_the_readme_queue_figures(kai_api, kai_cluster) -> None:
    run = sync_cluster(kai_cluster.pk)
    assert run.status == IngestStatus.SUCCESS, run.error
    assert run.source == IngestSource.KUEUE
    # 6 queues as 2 Cohorts and 4 ClusterQueues, 7 PodGroups, 11 GPU pods, 12 nodes.
    assert run.records_read == 1 + 2 + 4 + 7 + 11 + 12 and run.skipped == 0
    # KAI's queues name no node pool: every GPU node is in their one flavor.
    nodes = Node.objects.filter(cluster=kai_cluster)
    assert nodes.count() == 12 and set(nodes.values_list("flavor", flat=True)) == {FLAVOR}

    api = APIClient()
    api.force_authenticate(User.objects.create_user("staff", password="x", is_staff=True))
    answer = api.get("/api/v1/cluster-queues/", {"cluster": "gpu-kai"})
    assert answer.status_code == 200
    listed = {q["name"]: q for q in answer.json()["results"]}
    leaves = sorted(set(QUEUES) - set(PARENTS))
    assert sorted(listed) == leaves
    for name in leaves:
        figures, found = QUEUES[name], listed[name]
        now = found["gpus_now"]
        assert found["scheduler"] == "kai"
        assert found["cohort_name"] == figures["parent"], name
        assert now["nominal"] == float(figures["nominal"]), name
        assert now["total"] == float(figures["allocated"]), name
        assert now["borrowed"] == float(figures["borrowed"]), name
        assert now["pending"] == float(figures["pending"]), name
        (quota,) = found["quotas"]
        borrowing = quota["borrowing_limit"]
        assert limit(figures["borrowing limit"]) == (
            None if borrowing is None else Decimal(borrowing)
        ), name
        assert quota["lending_limit"] is None, name
        assert Decimal(found["fair_weight"]) == Decimal(figures["over-quota weight"]), name
    # Counted from the PodGroups: waiting (pending) and holding (admitted).
    counts = {"kai-team-a": (0, 2), "kai-team-b": (1, 1), "kai-team-c": (0, 0)}
    for name, expected in {**counts, "kai-serving": (0, 2)}.items():
        got = (listed[name]["pending_workloads"], listed[name]["admitted_workloads"])
        assert got == expected, name
    # kai-team-a borrows 8 within dept-research, whose own quota is 0: its members lend them.
    assert sum(listed[n]["gpus_now"]["lent"] for n in ("kai-team-b", "kai-team-c")) == 8


def test_a_kai_sync_writes_the_readme_parent_queue_figures(kai_api, kai_cluster) -> None:
    sync_cluster(kai_cluster.pk)
    run = IngestRun.objects.create(
        cluster=kai_cluster, source=IngestSource.KUEUE, started_at=timezone.now()
    )
    with SourceClient.for_cluster(kai_cluster) as client:
        batch = ClusterSync(kai_cluster, client, run).relist()
    totals = cohort_totals(batch)

    for name in PARENTS:
        figures = QUEUES[name]
        cohort = Cohort.objects.get(cluster=kai_cluster, name=name)
        assert cohort.scheduler == "kai" and not cohort.implicit and cohort.parent_name == ""
        assert cohort.fair_weight == Decimal(figures["over-quota weight"])
        figured = totals[(name, FLAVOR)]
        assert figured["nominal"] == Decimal(figures["nominal"]), name
        assert figured["total"] == Decimal(figures["allocated"]), name
        assert max(0, figured["total"] - figured["nominal"]) == Decimal(figures["borrowed"])
        below = Q(cluster_queue__cohort_id__in=subtree_ids(cohort))
        pending = sum(d.gpus for d in pending_gpus(below, "cluster_queue__cluster_id").values())
        assert pending == float(figures["pending"]), name
        held = holding_gpus(below, "cluster_queue__cluster_id")[kai_cluster.pk]
        assert held == float(figures["allocated"]), name
        (own,) = cohort.resource_groups[0]["flavors"][0]["resources"]
        assert limit(figures["borrowing limit"]) == (
            Decimal(own["borrowingLimit"]) if "borrowingLimit" in own else None
        ), name


def test_a_kai_sync_writes_the_readme_workload_figures(kai_api, kai_cluster) -> None:
    sync_cluster(kai_cluster.pk)

    every = Q(cluster=kai_cluster)
    held = holding_gpus(every, "id")
    waiting = pending_gpus(every, "id")
    assert Workload.objects.filter(cluster=kai_cluster).count() == len(WORKLOADS)
    for key, figures in WORKLOADS.items():
        namespace, name = key.split("/")
        found = Workload.objects.get(cluster=kai_cluster, namespace=namespace, name=name)
        assert found.scheduler == "kai"
        assert found.cluster_queue is not None and found.cluster_queue.name == figures["queue"]
        assert found.pod_sets[0]["count"] == int(figures["minMember"]), key
        assert held.get(found.pk, 0.0) == float(figures["GPUs held"]), key
        assert getattr(waiting.get(found.pk), "gpus", 0.0) == float(figures["GPUs pending"]), key
        running = [a for a in workload_allocations(found) if a.ended_at is None and a.node_name]
        assert len(running) == int(figures["running pods"]), key
    protein = Workload.objects.get(cluster=kai_cluster, name="protein-fold")
    assert (protein.state, protein.state_reason) == ("pending", "NonPreemptibleOverQuota")
    assert Workload.objects.get(cluster=kai_cluster, name="tokenizer-bench").state == "inactive"
    # Every pod joined its PodGroup's Workload (by KAI's pod-group-name annotation: the
    # translated Workloads carry no job uid for the owner chain to find).
    allocations = Allocation.objects.filter(cluster=kai_cluster)
    assert allocations.count() >= 9 and not allocations.filter(workload__isnull=True).exists()


# --- WATCH and failed LISTs ------------------------------------------------------------------


def test_watch_events_translate_and_a_new_parent_relists(kai_api, kai_cluster) -> None:
    protein = next(n for n in pod_groups() if n.startswith("pg-protein-fold-"))

    def change() -> None:
        def bound(group: dict[str, Any]) -> None:
            group["status"]["resourcesStatus"]["allocated"] = {GPU: "16"}
            group["status"].pop("schedulingConditions")

        kai_api.modify(POD_GROUP, protein, bound, namespace="kai-team-b")

        def allocated(found: dict[str, Any]) -> None:
            found["status"]["allocated"][GPU] = "24"

        kai_api.modify(QUEUE, "kai-team-b", allocated)

        def shrink(found: dict[str, Any]) -> None:
            found["spec"]["resources"]["gpu"]["quota"] = 4

        kai_api.modify(QUEUE, "kai-team-c", shrink)
        time.sleep(0.5)
        team_c = next(q for q in queues() if q["metadata"]["name"] == "kai-team-c")
        child = copy.deepcopy(team_c)
        child["metadata"] = {"name": "kai-team-c1", "uid": "0f0f0f0f-0000-5000-8000-000000000002"}
        child["spec"]["parentQueue"] = "kai-team-c"
        kai_api.add(QUEUE, child)

    thread = when_watching(kai_api, QUEUE, POD_GROUP, change)
    run = sync_cluster(kai_cluster.pk, watch_seconds=4)
    thread.join()

    assert run.status == IngestStatus.SUCCESS, run.error
    protein_row = Workload.objects.get(cluster=kai_cluster, name="protein-fold")
    assert protein_row.state == "admitted" and protein_row.admitted_gpus == 16
    team_b = ClusterQueue.objects.get(cluster=kai_cluster, name="kai-team-b")
    assert (team_b.pending_workloads, team_b.admitted_workloads) == (0, 2)
    # kai-team-c gained a child: it is a Cohort now, its ClusterQueue row is gone.
    assert ClusterQueue.objects.get(name="kai-team-c").deleted_at is not None
    team_c = Cohort.objects.get(cluster=kai_cluster, name="kai-team-c")
    assert team_c.deleted_at is None and team_c.parent_name == "dept-research"
    assert ClusterQueue.objects.get(name="kai-team-c1").cohort_name == "kai-team-c"
    # dept-research's own quota follows its children: 40 - (16 + 16 + 4) = 4.
    research = Cohort.objects.get(cluster=kai_cluster, name="dept-research")
    (own,) = research.resource_groups[0]["flavors"][0]["resources"]
    assert own["nominalQuota"] == "4"
    assert kai_api.list_count(QUEUE) >= 3  # Cohort and ClusterQueue, then a relist


def test_a_failed_queue_list_deletes_nothing(kai_api, kai_cluster) -> None:
    sync_cluster(kai_cluster.pk)
    kai_api.delete(QUEUE, "kai-team-c")
    kai_api.fail("/scheduling.run.ai/v2/queues", 500, times=10, method="GET")

    run = sync_cluster(kai_cluster.pk)

    assert run.status == IngestStatus.PARTIAL
    assert "Cohort" in run.error and "ClusterQueue" in run.error
    assert ClusterQueue.objects.get(name="kai-team-c").deleted_at is None
    assert Cohort.objects.filter(deleted_at__isnull=False).count() == 0
    assert Workload.objects.filter(deleted_at__isnull=False).count() == 0

    kai_api.clear_failures()
    assert sync_cluster(kai_cluster.pk).status == IngestStatus.SUCCESS
    assert ClusterQueue.objects.get(name="kai-team-c").deleted_at is not None
