"""Volcano as a quota source (quotas/sources): the pure translators, detection, and the Volcano
fixtures (tests/fixtures/volcano) through the real client, the fake API server, the sync, the
store and the read layer, checked against that README's expected figures."""

from __future__ import annotations

import copy
import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import Q
from django.utils import timezone
from rest_framework.test import APIClient

from alerts.reading import HOLD_FIELDS, hold_of
from dashboard.queries.cohorts import cohort_pool, members_nominal
from dashboard.queries.workloads import workload_allocations
from fleet.choices import IngestSource, IngestStatus, QuotaSource
from fleet.models import Cluster, IngestRun, Node
from quotas.ingest import cohort_totals
from quotas.ingest.samples import _unused_lendable
from quotas.kueue import Discovery
from quotas.models import ClusterQueue, ClusterQueueSample, Cohort, Workload
from quotas.now import holding_gpus, pending_gpus
from quotas.sources import SourceClient, detect_source, volcano
from quotas.sources.common import FLAVOR
from quotas.sync import ClusterSync, sync_cluster
from tests.fixtures_checks.test_scheduler_figures import readme_table
from tests.quotas.source_helpers import resource, subtree_ids, when_watching
from tests.scheduler_fixtures import VOLCANO_GROUP, load_scheduler_fixtures, scheduler_items

GPU = "nvidia.com/gpu"
QUEUE = f"Queue.{VOLCANO_GROUP}"
POD_GROUP = f"PodGroup.{VOLCANO_GROUP}"
QUEUES = readme_table("volcano", "queue")
WORKLOADS = readme_table("volcano", "workload")


def number(cell: str) -> float:
    return float(cell)


def queues() -> list[dict[str, Any]]:
    return scheduler_items("volcano", QUEUE)


def pod_groups() -> dict[str, dict[str, Any]]:
    return {g["metadata"]["name"]: g for g in scheduler_items("volcano", POD_GROUP)}


# --- pure translators ------------------------------------------------------------------------


def test_parent_queues_become_cohorts_whose_own_quota_tops_up_their_children() -> None:
    cohorts, cluster_queues = volcano.translate_queues(queues())

    by_name = {c["metadata"]["name"]: c for c in cohorts}
    assert sorted(by_name) == ["research", "root"]
    # root deserves 96; its children research 40, prod 32, default 0: 24 of its own.
    assert resource(by_name["root"])["nominalQuota"] == "24"
    assert "parentName" not in by_name["root"]["spec"]
    # research deserves 40, exactly its children's 16 + 16 + 8.
    assert resource(by_name["research"])["nominalQuota"] == "0"
    assert by_name["research"]["spec"]["parentName"] == "root"
    assert sorted(q["metadata"]["name"] for q in cluster_queues) == [
        "default",
        "prod",
        "team-v1",
        "team-v2",
        "team-v3",
    ]


def test_leaf_queues_become_cluster_queues_with_the_readme_limits() -> None:
    _, cluster_queues = volcano.translate_queues(queues())

    for queue in cluster_queues:
        name = queue["metadata"]["name"]
        figures = QUEUES[name]
        quota = resource(queue)
        assert queue["spec"]["cohortName"] == figures["parent"], name
        assert Decimal(quota["nominalQuota"]) == Decimal(figures["nominal"]), name
        assert Decimal(quota["borrowingLimit"]) == Decimal(figures["borrowing limit"]), name
        (usage,) = queue["status"]["flavorsUsage"][0]["resources"]
        assert Decimal(usage["total"]) == Decimal(figures["allocated"]), name
        assert Decimal(usage["borrowed"]) == Decimal(figures["borrowed"]), name
        assert queue["metadata"]["labels"]["gpu-ledger.io/scheduler"] == "volcano"
    team_v1 = next(q for q in cluster_queues if q["metadata"]["name"] == "team-v1")
    # deserved 16, guarantee 8: 8 lendable; prod is not reclaimable: nothing.
    assert resource(team_v1)["lendingLimit"] == "8"
    assert team_v1["spec"]["fairSharing"] == {"weight": "2"}
    assert team_v1["metadata"]["labels"][volcano.STATE_LABEL] == "Open"
    prod = next(q for q in cluster_queues if q["metadata"]["name"] == "prod")
    assert resource(prod)["lendingLimit"] == "0"


def test_a_queue_without_parent_capability_or_deserved() -> None:
    queue = {
        "metadata": {"name": "adhoc", "resourceVersion": "7"},
        "spec": {"weight": 3, "reclaimable": True},
        "status": {"state": "Closed", "allocated": {GPU: "2"}},
    }
    _, (translated,) = volcano.translate_queues([queue])

    quota = resource(translated)
    assert translated["spec"]["cohortName"] == "root"
    assert quota == {"name": GPU, "nominalQuota": "0", "lendingLimit": "0"}  # no borrowing limit
    assert translated["spec"]["stopPolicy"] == "Hold"
    assert translated["status"]["flavorsUsage"][0]["resources"][0]["borrowed"] == "2"


def test_a_cohort_changes_version_with_its_children() -> None:
    listed = queues()
    before = volcano.queues_as("Cohort", listed)["research"]
    child = next(q for q in listed if q["metadata"]["name"] == "team-v3")
    child["spec"]["deserved"][GPU] = "4"
    child["metadata"]["resourceVersion"] = "4999999"

    after = volcano.queues_as("Cohort", listed)["research"]

    assert resource(after)["nominalQuota"] == "4"
    assert after["metadata"]["resourceVersion"] == "4999999"
    assert before["metadata"]["resourceVersion"] != after["metadata"]["resourceVersion"]


def test_pod_groups_become_workloads_by_phase() -> None:
    groups = pod_groups()
    by_name = {volcano.workload_name(g): volcano.pod_group_to_workload(g) for g in groups.values()}

    assert sorted(by_name) == sorted(name.split("/")[1] for name in WORKLOADS)
    running = by_name["llama-pretrain"]
    assert running["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"] == "team-v1"
    assert running["spec"]["podSets"][0]["count"] == 4
    requests = running["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]
    assert requests["requests"][GPU] == "4"
    assert running["status"]["admission"]["podSetAssignments"][0]["resourceUsage"][GPU] == "16"
    assert {c["type"] for c in running["status"]["conditions"]} == {"QuotaReserved", "Admitted"}
    pending = by_name["protein-fold"]["status"]
    assert "admission" not in pending
    (condition,) = pending["conditions"]
    assert (condition["type"], condition["status"]) == ("QuotaReserved", "False")
    # Inqueue: the enqueue action reserved its quota; no pod of it is bound yet.
    inqueue = by_name["ddp-smoke"]["status"]
    assert inqueue["admission"]["podSetAssignments"][0]["resourceUsage"][GPU] == "2"
    assert {(c["type"], c["status"], c["reason"]) for c in inqueue["conditions"]} == {
        ("QuotaReserved", "True", "Inqueue"),
        ("Admitted", "False", "Inqueue"),
    }
    finished = by_name["tokenizer-bench"]["status"]["conditions"]
    assert ("Finished", "Succeeded") in {(c["type"], c["reason"]) for c in finished}


def test_a_pod_group_not_made_by_a_job_keeps_its_name_and_uneven_gangs_split() -> None:
    group = {
        "metadata": {"name": "podgroup-1234", "namespace": "x", "ownerReferences": []},
        "spec": {"minMember": 3, "queue": "team-v3", "minResources": {GPU: "1"}},
        "status": {"phase": "Unknown"},
    }
    workload = volcano.pod_group_to_workload(group)

    assert workload["metadata"]["name"] == "podgroup-1234"
    assert workload["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "podgroup-1234"
    pod_set = workload["spec"]["podSets"][0]
    assert pod_set["name"] == "main" and pod_set["count"] == 3
    per_pod = Decimal(pod_set["template"]["spec"]["containers"][0]["resources"]["requests"][GPU])
    assert abs(per_pod * 3 - 1) < Decimal("1e-20")
    # Unknown: part of the gang runs, so it holds its minimum.
    assert workload["status"]["admission"]["clusterQueue"] == "team-v3"


# --- detection -------------------------------------------------------------------------------


def discovery(*groups: str) -> Discovery:
    served = tuple((group, ("v1beta1",)) for group in sorted(groups))
    return Discovery(None, frozenset(), None, served)


@pytest.mark.parametrize(
    ("groups", "configured", "source"),
    [
        (("kueue.x-k8s.io", VOLCANO_GROUP), "", "kueue"),
        ((VOLCANO_GROUP,), "", "volcano"),
        ((), "", "kueue"),
        (("kueue.x-k8s.io", VOLCANO_GROUP), "volcano", "volcano"),
    ],
)
def test_detection_prefers_kueue_then_volcano(groups, configured, source) -> None:
    assert detect_source(discovery(*groups), configured) == source


@pytest.fixture
def volcano_api(make_kube_api) -> Any:
    """The Volcano fixtures on an API server serving Volcano and no Kueue."""
    api = make_kube_api(load=False, kueue_versions=(), volcano_versions=("v1beta1",))
    return load_scheduler_fixtures(api, "volcano")


@pytest.fixture
def volcano_cluster(db: None) -> Cluster:
    return Cluster.objects.create(name="gpu-volcano")


def test_the_real_client_detects_volcano_from_discovery(volcano_api, volcano_cluster) -> None:
    with SourceClient.for_cluster(volcano_cluster) as client:
        assert client.source() == QuotaSource.VOLCANO
        listed = client.list_objects("ClusterQueue")
    assert len(listed.items) == 5
    assert listed.resource_version
    assert volcano_api.list_count(QUEUE) == 1


# --- a full sync against the README ----------------------------------------------------------


def test_a_volcano_sync_writes_the_readme_queue_figures(volcano_api, volcano_cluster) -> None:
    run = sync_cluster(volcano_cluster.pk)
    assert run.status == IngestStatus.SUCCESS, run.error
    assert run.source == IngestSource.KUEUE
    # The source's one flavor, 7 queues as 2 Cohorts and 5 ClusterQueues, 7 PodGroups, 11 GPU
    # pods, 12 nodes.
    assert run.records_read == 1 + 2 + 5 + 7 + 11 + 12 and run.skipped == 0
    # Volcano's queues name no node pool: every GPU node is in their one flavor.
    nodes = Node.objects.filter(cluster=volcano_cluster)
    assert nodes.count() == 12 and set(nodes.values_list("flavor", flat=True)) == {FLAVOR}

    api = APIClient()
    api.force_authenticate(User.objects.create_user("staff", password="x", is_staff=True))
    answer = api.get("/api/v1/cluster-queues/", {"cluster": "gpu-volcano"})
    assert answer.status_code == 200
    listed = {q["name"]: q for q in answer.json()["results"]}
    leaves = [name for name, f in QUEUES.items() if name not in ("root", "research")]
    assert sorted(listed) == sorted(leaves)
    for name in leaves:
        figures, queue = QUEUES[name], listed[name]
        now = queue["gpus_now"]
        assert queue["scheduler"] == "volcano"
        assert queue["cohort_name"] == figures["parent"], name
        assert now["nominal"] == number(figures["nominal"]), name
        assert now["total"] == number(figures["in use"]), name
        assert now["borrowed"] == number(figures["borrowed"]), name
        assert now["pending"] == number(figures["pending"]), name
        (quota,) = queue["quotas"]
        assert float(quota["borrowing_limit"]) == number(figures["borrowing limit"]), name
        sample = ClusterQueueSample.objects.get(cluster_queue__name=name, resource=GPU)
        assert float(_unused_lendable(sample)) == number(figures["lendable"]), name
        if name != "prod":  # reclaimable: what the guarantee leaves of the nominal is lendable
            nominal, guarantee = Decimal(figures["nominal"]), Decimal(figures["guarantee"])
            assert Decimal(quota["lending_limit"]) == max(0, nominal - guarantee), name
    assert Decimal(listed["prod"]["quotas"][0]["lending_limit"]) == 0
    # The README's Queue status counts: pending wait, running are admitted (inqueue reserve).
    for name, (waiting, admitted) in {"team-v1": (0, 2), "team-v2": (1, 1), "prod": (0, 1)}.items():
        assert (listed[name]["pending_workloads"], listed[name]["admitted_workloads"]) == (
            waiting,
            admitted,
        ), name
    # team-v1 borrows 8 within research, whose own quota is 0: its members lend them.
    assert sum(listed[n]["gpus_now"]["lent"] for n in ("team-v2", "team-v3")) == 8


def test_a_volcano_sync_writes_the_readme_parent_queue_figures(
    volcano_api, volcano_cluster
) -> None:
    sync_cluster(volcano_cluster.pk)
    run = IngestRun.objects.create(
        cluster=volcano_cluster, source=IngestSource.KUEUE, started_at=timezone.now()
    )
    with SourceClient.for_cluster(volcano_cluster) as client:
        batch = ClusterSync(volcano_cluster, client, run).relist()
    totals = cohort_totals(batch)

    for name in ("root", "research"):
        figures = QUEUES[name]
        cohort = Cohort.objects.get(cluster=volcano_cluster, name=name)
        assert cohort.scheduler == "volcano" and not cohort.implicit
        assert cohort.parent_name == ("" if figures["parent"] == "–" else figures["parent"])
        subtree = totals[(name, volcano.FLAVOR)]
        assert float(subtree["nominal"]) == number(figures["nominal"]), name
        assert float(subtree["total"]) == number(figures["in use"]), name
        assert max(0, subtree["total"] - subtree["nominal"]) == Decimal(figures["borrowed"])
        below = Q(cluster_queue__cohort_id__in=subtree_ids(cohort))
        pending = sum(d.gpus for d in pending_gpus(below, "cluster_queue__cluster_id").values())
        assert pending == number(figures["pending"]), name
    # research has only ClusterQueues below it: the cohort pages' own sums agree.
    research = Cohort.objects.get(cluster=volcano_cluster, name="research")
    direct = Q(cluster_queue__cohort_id=research.pk)
    nominal = members_nominal(direct)[research.pk] + sum(cohort_pool(research).values())
    assert nominal == number(QUEUES["research"]["nominal"])
    held = holding_gpus(direct, "cluster_queue__cohort_id")[research.pk]
    assert held == number(QUEUES["research"]["in use"])


def test_a_volcano_sync_writes_the_readme_workload_figures(volcano_api, volcano_cluster) -> None:
    sync_cluster(volcano_cluster.pk)

    every = Q(cluster=volcano_cluster)
    held = holding_gpus(every, "id")
    waiting = pending_gpus(every, "id")
    groups = {volcano.workload_name(g): g for g in pod_groups().values()}
    assert Workload.objects.filter(cluster=volcano_cluster).count() == len(WORKLOADS)
    for key, figures in WORKLOADS.items():
        namespace, name = key.split("/")
        found = Workload.objects.get(cluster=volcano_cluster, namespace=namespace, name=name)
        assert found.scheduler == "volcano"
        assert found.cluster_queue is not None and found.cluster_queue.name == figures["queue"]
        assert found.pod_sets[0]["count"] == int(figures["minMember"]), key
        assert groups[name]["status"]["phase"] == figures["phase"]
        assert held.get(found.pk, 0.0) == number(figures["GPUs reserved"]), key
        assert getattr(waiting.get(found.pk), "gpus", 0.0) == number(figures["GPUs pending"]), key
        running = [a for a in workload_allocations(found) if a.ended_at is None and a.node_name]
        assert len(running) == int(figures["running pods"]), key
    tokenizer = Workload.objects.get(cluster=volcano_cluster, name="tokenizer-bench")
    assert tokenizer.state == "succeeded"
    ddp_smoke = Workload.objects.get(name="ddp-smoke")
    assert (ddp_smoke.state, ddp_smoke.state_reason) == ("quota_reserved", "Inqueue")


def test_an_inqueue_gang_holds_quota_as_the_ghost_rule_reads_it(
    volcano_api, volcano_cluster
) -> None:
    """ddp-smoke is Inqueue with its 2 pods unbound: the hold the ghost-reservation rule reads
    (``alerts.reading.hold_of``) holds 2 GPUs for a gang of 2 from its reservation on, and no
    pod of it runs; the running gang beside it has all its pods running."""
    sync_cluster(volcano_cluster.pk)

    rows = Workload.objects.filter(cluster=volcano_cluster, name__in=["ddp-smoke", "vit-sweep"])
    holds = {row[0]: hold_of(*row[1:]) for row in rows.values_list("name", *HOLD_FIELDS[1:])}
    inqueue = holds["ddp-smoke"]
    assert (inqueue.gpus, inqueue.pods_expected, inqueue.ended) == (2.0, 2, False)
    assert inqueue.start is not None
    later = inqueue.start + timedelta(hours=1)
    assert inqueue.through(later, later + timedelta(minutes=1))
    running = {
        workload.name: sum(
            1 for a in workload_allocations(workload) if a.ended_at is None and a.node_name
        )
        for workload in rows
    }
    assert running == {"ddp-smoke": 0, "vit-sweep": holds["vit-sweep"].pods_expected}


def test_a_kueue_sync_marks_its_rows_kueue(kube_api, kube_cluster) -> None:
    sync_cluster(kube_cluster.pk)

    for model in (ClusterQueue, Cohort, Workload):
        assert set(model.objects.values_list("scheduler", flat=True)) == {"kueue"}, model


# --- WATCH and failed LISTs ------------------------------------------------------------------


def test_watch_events_translate_and_a_new_parent_relists(volcano_api, volcano_cluster) -> None:
    llama = next(n for n in pod_groups() if n.startswith("llama-pretrain-"))

    def change() -> None:
        def complete(group: dict[str, Any]) -> None:
            group["status"] = {**group["status"], "phase": "Completed", "succeeded": 4}
            group["status"].pop("running", None)

        volcano_api.modify(POD_GROUP, llama, complete, namespace="team-v1")

        def shrink(queue: dict[str, Any]) -> None:
            queue["spec"]["deserved"][GPU] = "4"

        volcano_api.modify(QUEUE, "team-v2", shrink)
        time.sleep(0.5)
        team_v3 = next(q for q in queues() if q["metadata"]["name"] == "team-v3")
        child = copy.deepcopy(team_v3)
        child["metadata"] = {"name": "team-v3a", "uid": "0f0f0f0f-0000-5000-8000-000000000001"}
        child["spec"]["parent"] = "team-v3"
        volcano_api.add(QUEUE, child)

    thread = when_watching(volcano_api, QUEUE, POD_GROUP, change)
    run = sync_cluster(volcano_cluster.pk, watch_seconds=4)
    thread.join()

    assert run.status == IngestStatus.SUCCESS, run.error
    llama_row = Workload.objects.get(cluster=volcano_cluster, name="llama-pretrain")
    assert llama_row.state == "succeeded" and llama_row.admitted_gpus == 0
    team_v2 = ClusterQueue.objects.get(cluster=volcano_cluster, name="team-v2")
    assert [float(q.nominal) for q in team_v2.quotas.all()] == [4.0]
    # team-v3 gained a child: it is a Cohort now, its ClusterQueue row is gone.
    assert ClusterQueue.objects.get(name="team-v3").deleted_at is not None
    team_v3 = Cohort.objects.get(cluster=volcano_cluster, name="team-v3")
    assert team_v3.deleted_at is None and team_v3.parent_name == "research"
    assert ClusterQueue.objects.get(name="team-v3a").cohort_name == "team-v3"
    # research's own quota follows its children: 40 - (16 + 4 + 8) = 12.
    research = Cohort.objects.get(cluster=volcano_cluster, name="research")
    assert cohort_pool(research) == {volcano.FLAVOR: 12.0}
    assert volcano_api.list_count(QUEUE) >= 3  # Cohort and ClusterQueue, then a relist


def _gpus_in_use(cluster_queue: dict[str, Any]) -> str:
    (flavor,) = cluster_queue["status"]["flavorsUsage"]
    return next(r["total"] for r in flavor["resources"] if r["name"] == GPU)


def test_an_inqueue_gang_that_starts_moves_from_reserved_to_allocated(
    volcano_api, volcano_cluster
) -> None:
    """ddp-smoke (2 GPUs Inqueue) starts: its PodGroup turns Running, then Volcano's controller
    updates team-v2's status (allocated 8 -> 10). Quota in use is 10 before and after, the
    2 GPUs counted once: reserved, then allocated."""
    ddp = next(n for n in pod_groups() if n.startswith("ddp-smoke"))

    def running(group: dict[str, Any]) -> None:
        group["status"] = {**group["status"], "phase": "Running", "running": 2}

    def allocated(queue: dict[str, Any]) -> None:
        queue["status"]["allocated"][GPU] = "10"
        queue["status"]["running"], queue["status"]["inqueue"] = 2, 0

    with SourceClient.for_cluster(volcano_cluster) as client:
        queues_listed = client.list_objects("ClusterQueue")
        groups_listed = client.list_objects("Workload")
        before = {q["metadata"]["name"]: q for q in queues_listed.items}
        volcano_api.modify(POD_GROUP, ddp, running, namespace="team-v2")
        volcano_api.modify(QUEUE, "team-v2", allocated)
        group_events = list(client.watch("Workload", groups_listed.resource_version, 1))
        queue_events = list(client.watch("ClusterQueue", queues_listed.resource_version, 1))

    assert _gpus_in_use(before["team-v2"]) == "10"  # 8 allocated + 2 reserved
    (started,) = [e.object for e in group_events if e.type == "MODIFIED"]
    assert {c["type"]: c["status"] for c in started["status"]["conditions"]}["Admitted"] == "True"
    (changed,) = [e.object for e in queue_events if e.type == "MODIFIED"]
    assert (changed["metadata"]["name"], _gpus_in_use(changed)) == ("team-v2", "10")


def test_a_relist_while_watching_reads_the_pod_groups_afresh(volcano_api, volcano_cluster) -> None:
    """After the LIST pass, a ClusterQueue relist (410 Gone) leaves no PodGroup LIST behind for
    a later Workload relist: that one reads the PodGroups as they are then."""
    llama = next(n for n in pod_groups() if n.startswith("llama-pretrain-"))

    def complete(group: dict[str, Any]) -> None:
        group["status"] = {**group["status"], "phase": "Completed", "succeeded": 4}

    with SourceClient.for_cluster(volcano_cluster) as client:
        client.list_objects("ClusterQueue")
        listed = client.list_objects("Workload")
        list(client.watch("Workload", listed.resource_version, 1))
        client.list_objects("ClusterQueue")  # a relist after 410 Gone
        volcano_api.modify(POD_GROUP, llama, complete, namespace="team-v1")
        relisted = {w["metadata"]["name"]: w for w in client.list_objects("Workload").items}

    conditions = relisted["llama-pretrain"]["status"]["conditions"]
    assert ("Finished", "True") in {(c["type"], c["status"]) for c in conditions}


def test_a_failed_queue_list_deletes_nothing(volcano_api, volcano_cluster) -> None:
    sync_cluster(volcano_cluster.pk)
    volcano_api.delete(QUEUE, "team-v3")
    volcano_api.fail("/scheduling.volcano.sh/v1beta1/queues", 500, times=10, method="GET")

    run = sync_cluster(volcano_cluster.pk)

    assert run.status == IngestStatus.PARTIAL
    assert "Cohort" in run.error and "ClusterQueue" in run.error
    assert ClusterQueue.objects.get(name="team-v3").deleted_at is None
    assert Cohort.objects.filter(deleted_at__isnull=False).count() == 0
    assert Workload.objects.filter(deleted_at__isnull=False).count() == 0

    volcano_api.clear_failures()
    assert sync_cluster(volcano_cluster.pk).status == IngestStatus.SUCCESS
    assert ClusterQueue.objects.get(name="team-v3").deleted_at is not None


def test_the_pod_group_volcano_makes_for_a_bare_pod_or_a_deployment_is_named_after_its_owner() -> (
    None
):
    # Volcano's PodGroup controller: "podgroup-" + the uid of the pod's controller, or of the
    # pod itself; the group is owned by the same object.
    def group(uid: str, kind: str, name: str) -> dict:
        ref = {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid, "controller": True}
        return {
            "metadata": {"name": f"podgroup-{uid}", "namespace": "x", "ownerReferences": [ref]},
            "spec": {"minMember": 1, "queue": "team-v3", "minResources": {GPU: "1"}},
            "status": {"phase": "Running"},
        }

    notebook = group("0b7e5f7c-8d61-4a5e-9a43-000000000001", "Pod", "notebook-ana")
    other = group("0b7e5f7c-8d61-4a5e-9a43-000000000002", "Pod", "notebook-bo")
    serve = group("0b7e5f7c-8d61-4a5e-9a43-000000000003", "ReplicaSet", "triton-7d9f8")

    names = [volcano.pod_group_to_workload(g)["metadata"]["name"] for g in (notebook, other, serve)]

    assert names == ["notebook-ana", "notebook-bo", "triton-7d9f8"]
    # The pods still join by the group's own name.
    annotations = volcano.pod_group_to_workload(notebook)["metadata"]["annotations"]
    assert annotations["scheduling.k8s.io/group-name"] == notebook["metadata"]["name"]
