"""Plain Kubernetes ResourceQuota as a quota source (quotas/sources/resourcequota.py): the pure
translators, detection, and the ResourceQuota fixtures (tests/fixtures/resourcequota) through
the real client, the Kubernetes API test server, the sync, the store and the read layer, checked
against that README's expected figures."""

from __future__ import annotations

import copy
import threading
import time
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import Q
from rest_framework.test import APIClient

from dashboard.queries.workloads import workload_allocations
from fleet.choices import IngestStatus, QuotaSource
from fleet.models import Cluster, IngestRun, Node
from quotas.choices import TransitionKind
from quotas.kueue import Discovery, KubeError
from quotas.kueue.payloads import slim
from quotas.models import ClusterQueue, ClusterQueueQuota, Workload, WorkloadTransition
from quotas.now import holding_gpus, pending_gpus
from quotas.sources import SourceClient, detect_source
from quotas.sources import resourcequota as rq
from quotas.sources.common import FLAVOR
from quotas.sync import sync_cluster
from tests.fixtures_checks.test_scheduler_figures import readme_table
from tests.quotas.source_helpers import resource
from tests.scheduler_fixtures import (
    KAI_GROUP,
    VOLCANO_GROUP,
    load_scheduler_fixtures,
    scheduler_items,
)

GPU = "nvidia.com/gpu"
NAMESPACES = readme_table("resourcequota", "namespace")
WORKLOADS = readme_table("resourcequota", "workload")


def quotas() -> list[dict[str, Any]]:
    return scheduler_items("resourcequota", "ResourceQuota")


def pods() -> list[dict[str, Any]]:
    return scheduler_items("resourcequota", "Pod")


def product_workload(key: str) -> tuple[str, str]:
    """A README workload ("namespace/owner kind/owner name") as the product names it: the
    owner's kind, lower case, and name; a ReplicaSet's pods belong to its Deployment, which the
    Deployment controller names the ReplicaSet after (``<deployment>-<pod-template-hash>``)."""
    namespace, kind, name = key.split("/")
    if kind == "ReplicaSet":
        kind, name = "Deployment", name.rsplit("-", 1)[0]
    return namespace, f"{kind.lower()}-{name}"


def gpu_quota(namespace: str, name: str, hard: str, used: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "9"},
        "spec": {"hard": {rq.GPU_QUOTA: hard}, **spec},
        "status": {"hard": {rq.GPU_QUOTA: hard}, "used": {rq.GPU_QUOTA: used}},
    }


def job_pod(namespace: str, job: str, gpus: str, node: str = "", **status: Any) -> dict[str, Any]:
    """A pod of Job ``job`` requesting ``gpus``; bound to ``node`` and Running when given."""
    return {
        "metadata": {
            "name": f"{job}-0-abcde",
            "namespace": namespace,
            "uid": f"pod-uid-{job}",
            "creationTimestamp": "2026-08-22T12:00:30Z",
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"job-uid-{job}"}
                | {"controller": True}
            ],
        },
        "spec": {
            "containers": [{"name": "main", "resources": {"requests": {GPU: gpus}}}],
            **({"nodeName": node} if node else {}),
        },
        "status": {"phase": "Running" if node else "Pending", **status},
    }


# --- pure translators ------------------------------------------------------------------------


def test_gpu_quotas_become_cluster_queues_with_the_readme_figures() -> None:
    translated = rq.cluster_queues(quotas())

    assert sorted(translated) == sorted(NAMESPACES)
    for namespace, figures in NAMESPACES.items():
        queue = translated[namespace]
        assert queue["metadata"]["name"] == namespace
        assert queue["metadata"]["labels"]["gpu-ledger.io/scheduler"] == "resourcequota"
        # vision's compute-quota has no GPU line: only gpu-quota stands behind the queue.
        assert queue["metadata"]["annotations"][rq.QUOTAS_ANNOTATION] == figures["quota"]
        assert queue["spec"]["cohortName"] == ""
        assert resource(queue) == {
            "name": GPU,
            "nominalQuota": figures["nominal"],
            "borrowingLimit": "0",
            "lendingLimit": "0",
        }
        (usage,) = queue["status"]["flavorsUsage"][0]["resources"]
        assert Decimal(usage["total"]) == Decimal(figures["used"]), namespace
        assert Decimal(usage["borrowed"]) == Decimal(figures["borrowed"]), namespace


def test_a_quota_without_gpu_line_is_ignored() -> None:
    compute = [q for q in quotas() if q["metadata"]["name"] == "compute-quota"]
    assert compute and rq.cluster_queues(compute) == {}


def test_several_gpu_quotas_in_a_namespace() -> None:
    # Unscoped quotas each charge every pod: the smallest limit binds.
    both = [gpu_quota("x", "a", "16", "6"), gpu_quota("x", "b", "10", "6")]
    queue = rq.cluster_queues(both)["x"]
    assert resource(queue)["nominalQuota"] == "10"
    assert queue["status"]["flavorsUsage"][0]["resources"][0]["total"] == "6"
    assert queue["metadata"]["annotations"][rq.QUOTAS_ANNOTATION] == "a,b"
    # Scoped quotas split the pods between them: their limits add up.
    by_priority = [
        gpu_quota("y", "high", "8", "8", scopeSelector={"matchExpressions": [{"x": 1}]}),
        gpu_quota("y", "low", "4", "1", scopes=["BestEffort"]),
    ]
    queue = rq.cluster_queues(by_priority)["y"]
    assert resource(queue)["nominalQuota"] == "12"
    assert queue["status"]["flavorsUsage"][0]["resources"][0]["total"] == "9"
    # Over its limit (the limit lowered below what runs): still nothing borrowed.
    over = rq.cluster_queues([gpu_quota("z", "q", "2", "6")])["z"]
    assert over["status"]["flavorsUsage"][0]["resources"][0]["borrowed"] == "0"


def test_pods_become_workloads_by_owner() -> None:
    facts = [f for f in (rq.pod_facts(p) for p in pods()) if f is not None]
    translated = rq.workloads(facts)

    assert sorted(translated) == sorted(product_workload(k) for k in WORKLOADS)
    detr = translated[("vision", "job-detr-train")]
    assert detr["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == (
        "2b9dbcb8-586c-51b3-9582-963d8988814a"
    )
    assert detr["spec"]["queueName"] == "vision"
    assert detr["status"]["admission"]["podSetAssignments"][0]["resourceUsage"][GPU] == "8"
    triton = translated[("vision", "deployment-triton-vision")]
    owner, *pod_refs = triton["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Deployment", "triton-vision")
    assert sorted(ref["name"] for ref in pod_refs) == [
        "triton-vision-5d8f7c6b9-h5v8n",
        "triton-vision-5d8f7c6b9-r2t6k",
    ]
    assert triton["metadata"]["annotations"][rq.REPLICA_SET_ANNOTATION] == (
        "triton-vision-5d8f7c6b9"
    )
    sam = translated[("vision", "job-sam-finetune")]
    assert "admission" not in sam["status"]
    (waiting,) = sam["status"]["conditions"]
    assert (waiting["type"], waiting["status"], waiting["reason"]) == (
        "QuotaReserved",
        "False",
        "Unschedulable",
    )
    assert sam["spec"]["priorityClassRef"]["name"] == "high"
    assert sam["spec"]["priority"] == 1000


def test_a_bare_pod_is_its_own_workload_and_an_ended_one_is_finished() -> None:
    bare = job_pod("x", "adhoc", "1", node="n1")
    bare["metadata"].pop("ownerReferences")
    facts = rq.pod_facts(bare)
    assert facts is not None
    (workload,) = rq.workloads([facts]).values()
    assert workload["metadata"]["name"] == "pod-adhoc-0-abcde"
    assert workload["metadata"]["ownerReferences"][0]["kind"] == "Pod"

    done = job_pod("x", "eval", "2", node="n1")
    done["status"]["phase"] = "Succeeded"
    (finished,) = rq.workloads([rq.pod_facts(done)]).values()  # type: ignore[list-item]
    reasons = {(c["type"], c["reason"]) for c in finished["status"]["conditions"]}
    assert ("Finished", "Succeeded") in reasons
    # A pod without GPU, or one whose requests are not quantities, is no workload's.
    assert rq.pod_facts(job_pod("x", "cpu", "0")) is None
    assert rq.pod_facts(job_pod("x", "bad", "many")) is None


def test_a_pod_preempted_by_the_scheduler_marks_its_workload() -> None:
    facts = [f for f in (rq.pod_facts(p) for p in pods()) if f is not None]
    bert = rq.workloads(facts)[("nlp", "job-bert-distill")]

    conditions = {c["type"]: c for c in bert["status"]["conditions"]}
    preempted = conditions["Preempted"]
    assert (preempted["status"], preempted["reason"]) == ("True", "PreemptionByScheduler")
    assert preempted["lastTransitionTime"] == "2026-08-22T11:59:50Z"
    assert "1 of 1 pod(s)" in preempted["message"]
    assert "bert-distill-0-m3p9s" in preempted["message"]
    # Not evicted: it holds its GPUs until its pod is gone, as the quota charges them.
    assert "Evicted" not in conditions
    assert bert["status"]["admission"]["podSetAssignments"][0]["resourceUsage"][GPU] == "4"


def test_the_client_keeps_only_the_pod_conditions_the_translation_reads() -> None:
    bert, sam = (
        next(p for p in pods() if p["metadata"]["name"].startswith(job)) for job in ("bert", "sam")
    )
    kept = slim(copy.deepcopy(bert), "v1", "Pod")["status"]["conditions"]
    assert [(c["type"], c["reason"]) for c in kept] == [
        ("DisruptionTarget", "PreemptionByScheduler")
    ]
    kept = slim(copy.deepcopy(sam), "v1", "Pod")["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in kept] == [("PodScheduled", "False")]
    running = next(p for p in pods() if p["metadata"]["name"].startswith("detr"))
    assert "conditions" not in slim(copy.deepcopy(running), "v1", "Pod")["status"]


# --- detection -------------------------------------------------------------------------------


def discovery(*groups: str) -> Discovery:
    served = tuple((group, ("v1beta1", "v2", "v2alpha2")) for group in sorted(groups))
    return Discovery(None, frozenset(), None, served)


@pytest.mark.parametrize(
    ("groups", "configured", "gpu_quotas", "source"),
    [
        ((), "", True, "resourcequota"),
        ((), "", False, "kueue"),
        (("kueue.x-k8s.io",), "", True, "kueue"),
        ((VOLCANO_GROUP,), "", True, "volcano"),
        ((KAI_GROUP,), "", True, "kai"),
        ((KAI_GROUP,), "resourcequota", False, "resourcequota"),
        ((), "kueue", True, "kueue"),
    ],
)
def test_detection_takes_resourcequota_only_without_a_batch_scheduler(
    groups, configured, gpu_quotas, source
) -> None:
    assert detect_source(discovery(*groups), configured, gpu_quotas) == source


@pytest.fixture
def rq_api(make_kube_api) -> Any:
    """The ResourceQuota fixtures on an API server serving no batch scheduler."""
    api = make_kube_api(load=False, kueue_versions=(), serve_resource_quotas=True)
    return load_scheduler_fixtures(api, "resourcequota")


@pytest.fixture
def rq_cluster(db: None) -> Cluster:
    return Cluster.objects.create(name="gpu-plain")


def test_the_real_client_detects_gpu_quotas(rq_api, rq_cluster) -> None:
    with SourceClient.for_cluster(rq_cluster) as client:
        assert client.source() == QuotaSource.RESOURCEQUOTA
        listed = client.list_objects("ClusterQueue")
    assert sorted(q["metadata"]["name"] for q in listed.items) == sorted(NAMESPACES)
    assert listed.resource_version


def test_quotas_without_gpu_line_leave_the_cluster_a_kueue_one(make_kube_api, rq_cluster) -> None:
    api = make_kube_api(load=False, kueue_versions=(), serve_resource_quotas=True)
    api.load("ResourceQuota", [q for q in quotas() if rq.gpu_line(q) is None])
    with SourceClient.for_cluster(rq_cluster) as client:
        assert client.source() == QuotaSource.KUEUE


def test_no_access_to_quotas_leaves_the_cluster_a_kueue_one(rq_api, rq_cluster) -> None:
    rq_api.fail("/resourcequotas", 403, times=5, method="GET")
    with SourceClient.for_cluster(rq_cluster) as client:
        assert client.source() == QuotaSource.KUEUE


def test_a_detection_that_cannot_list_writes_nothing(rq_api, rq_cluster) -> None:
    rq_api.fail("/resourcequotas", 503, times=20, method="GET")

    with pytest.raises(KubeError) as raised:
        sync_cluster(rq_cluster.pk)

    # Transient: the sync is retried; nothing was written meanwhile.
    assert not raised.value.permanent
    assert IngestRun.objects.get().status == IngestStatus.FAILED
    assert not ClusterQueue.objects.exists() and not Workload.objects.exists()


def test_a_pinned_source_wins_over_discovery(make_kube_api, rq_cluster) -> None:
    api = make_kube_api(
        load=False, kueue_versions=(), kai_versions=("v2", "v2alpha2"), serve_resource_quotas=True
    )
    load_scheduler_fixtures(api, "resourcequota")
    rq_cluster.quota_source = QuotaSource.RESOURCEQUOTA
    rq_cluster.save()

    run = sync_cluster(rq_cluster.pk)

    assert run.status == IngestStatus.SUCCESS, run.error
    names = ClusterQueue.objects.values_list("name", "scheduler")
    assert sorted(names) == [(n, "resourcequota") for n in sorted(NAMESPACES)]


# --- a full sync against the README ----------------------------------------------------------


def test_a_sync_writes_the_readme_namespace_figures(rq_api, rq_cluster) -> None:
    run = sync_cluster(rq_cluster.pk)
    assert run.status == IngestStatus.SUCCESS, run.error
    # The source's one flavor, 3 GPU quotas as ClusterQueues, 5 workloads, 8 GPU pods, 12 nodes.
    assert run.records_read == 1 + 3 + 5 + 8 + 12 and run.skipped == 0
    # A ResourceQuota names no node pool: every GPU node is in the one flavor.
    nodes = Node.objects.filter(cluster=rq_cluster)
    assert nodes.count() == 12 and set(nodes.values_list("flavor", flat=True)) == {FLAVOR}
    # One pod LIST serves the ClusterQueue counts, the Workloads and the Pods.
    assert rq_api.list_count("Pod") == 1

    api = APIClient()
    api.force_authenticate(User.objects.create_user("staff", password="x", is_staff=True))
    answer = api.get("/api/v1/cluster-queues/", {"cluster": "gpu-plain"})
    assert answer.status_code == 200
    listed = {q["name"]: q for q in answer.json()["results"]}
    assert sorted(listed) == sorted(NAMESPACES)
    for namespace, figures in NAMESPACES.items():
        found, now = listed[namespace], listed[namespace]["gpus_now"]
        assert found["scheduler"] == "resourcequota"
        assert found["cohort_name"] == ""
        assert now["nominal"] == float(figures["nominal"]), namespace
        assert now["total"] == float(figures["allocated"]), namespace
        assert now["pending"] == float(figures["pending"]), namespace
        assert now["borrowed"] == float(figures["borrowed"]), namespace
        (usage,) = found["usage"]
        assert Decimal(usage["total"]) == Decimal(figures["used"]), namespace
        (quota,) = found["quotas"]
        assert Decimal(quota["borrowing_limit"]) == 0 and Decimal(quota["lending_limit"]) == 0
    got = {n: (q["pending_workloads"], q["admitted_workloads"]) for n, q in listed.items()}
    assert got == {"vision": (1, 2), "nlp": (0, 2), "speech": (0, 0)}


def test_a_sync_writes_the_readme_workload_figures(rq_api, rq_cluster) -> None:
    sync_cluster(rq_cluster.pk)

    every = Q(cluster=rq_cluster)
    held = holding_gpus(every, "id")
    waiting = pending_gpus(every, "id")
    assert Workload.objects.filter(cluster=rq_cluster).count() == len(WORKLOADS)
    for key, figures in WORKLOADS.items():
        namespace, name = product_workload(key)
        found = Workload.objects.get(cluster=rq_cluster, namespace=namespace, name=name)
        assert found.scheduler == "resourcequota"
        assert found.cluster_queue is not None and found.cluster_queue.name == namespace
        assert (found.owner_kind, found.owner_name) == (
            key.split("/")[1].replace("ReplicaSet", "Deployment"),
            name.split("-", 1)[1],
        )
        assert held.get(found.pk, 0.0) == float(figures["GPUs held"]), key
        assert getattr(waiting.get(found.pk), "gpus", 0.0) == float(figures["GPUs pending"]), key
        running = [a for a in workload_allocations(found) if a.ended_at is None and a.node_name]
        assert len(running) == int(figures["running pods"]), key
        preempted = WorkloadTransition.objects.filter(workload=found, kind=TransitionKind.PREEMPTED)
        disrupted = int(figures["disrupted pods"])
        assert preempted.count() == min(1, disrupted), key
        if disrupted:
            assert f"{disrupted} of {figures['running pods']} pod(s)" in preempted.get().message
    sam = Workload.objects.get(cluster=rq_cluster, name="job-sam-finetune")
    assert (sam.state, sam.state_reason) == ("pending", "Unschedulable")
    # bert-eval's Job and pod were removed before the snapshot: only kube-state-metrics history
    # knows them, the API server does not.
    assert not Workload.objects.filter(name__contains="bert-eval").exists()


def test_the_preemption_is_shown_as_a_kueue_preemption(rq_api, rq_cluster) -> None:
    sync_cluster(rq_cluster.pk)

    bert = Workload.objects.get(cluster=rq_cluster, name="job-bert-distill")
    # Still holding: the quota charges the terminating pod.
    assert bert.state == "admitted" and bert.admitted_gpus == 4
    transition = WorkloadTransition.objects.get(workload=bert, kind=TransitionKind.PREEMPTED)
    assert transition.reason == "PreemptionByScheduler"
    assert transition.at == datetime(2026, 8, 22, 11, 59, 50, tzinfo=UTC)
    assert "preempting to accommodate a higher priority pod" in transition.message
    assert bert.priority_class_name == "low" and bert.priority == 100


def test_malformed_objects_are_skipped_and_counted(rq_api, rq_cluster) -> None:
    rq_api.add("ResourceQuota", gpu_quota("audio", "gpu-quota", "lots", "0"))
    rq_api.add("Pod", job_pod("audio", "broken", "many"))

    run = sync_cluster(rq_cluster.pk)

    # Skips make a sync partial; nothing failed.
    assert run.status == IngestStatus.PARTIAL and run.error == ""
    assert run.skipped == 2, run.skip_reasons
    assert sum(n for reason, n in run.skip_reasons.items() if "bad_quantity" in reason) == 2
    # Everything else is there.
    assert sorted(ClusterQueue.objects.values_list("name", flat=True)) == sorted(NAMESPACES)
    assert Workload.objects.filter(cluster=rq_cluster).count() == len(WORKLOADS)


# --- WATCH and failed LISTs ------------------------------------------------------------------


def when_watching(api: Any, action: Any) -> threading.Thread:
    """Run ``action`` once the sync watches ResourceQuotas and pods (Workload and Pod)."""

    def wait_then_act() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
            api.watch_count("ResourceQuota") < 1 or api.watch_count("Pod") < 2
        ):
            time.sleep(0.02)
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def test_watch_events_follow_pods_and_quotas(rq_api, rq_cluster) -> None:
    def change() -> None:
        # A new Job in speech waits for a node; the quota charges it.
        rq_api.add("Pod", job_pod("speech", "whisper-train", "2"))
        # The quota controller updates the quota once it has seen the pod: the queue's counts
        # follow on that event (the pod WATCH has applied the pod by then).
        time.sleep(0.5)

        def charged(quota: dict[str, Any]) -> None:
            quota["status"]["used"][rq.GPU_QUOTA] = "2"

        rq_api.modify("ResourceQuota", "gpu-quota", charged, namespace="speech")
        # One of detr-train's pods ends; bert-distill's preempted pod is gone.
        rq_api.delete("Pod", "detr-train-1-c9d4w", namespace="vision")
        rq_api.delete("Pod", "bert-distill-0-m3p9s", namespace="nlp")
        time.sleep(0.5)

        def raised(quota: dict[str, Any]) -> None:
            quota["spec"]["hard"][rq.GPU_QUOTA] = "12"
            quota["status"]["hard"][rq.GPU_QUOTA] = "12"
            quota["status"]["used"][rq.GPU_QUOTA] = "4"

        rq_api.modify("ResourceQuota", "gpu-quota", raised, namespace="nlp")

    thread = when_watching(rq_api, change)
    run = sync_cluster(rq_cluster.pk, watch_seconds=4)
    thread.join()

    assert run.status == IngestStatus.SUCCESS, run.error
    whisper = Workload.objects.get(cluster=rq_cluster, name="job-whisper-train")
    assert (whisper.state, whisper.requested_gpus, whisper.deleted_at) == ("pending", 2.0, None)
    speech = ClusterQueue.objects.get(cluster=rq_cluster, name="speech")
    assert (speech.pending_workloads, speech.admitted_workloads) == (1, 0)
    detr = Workload.objects.get(cluster=rq_cluster, name="job-detr-train")
    assert detr.admitted_gpus == 4 and detr.deleted_at is None
    assert Workload.objects.get(name="job-bert-distill").deleted_at is not None
    nlp_quota = ClusterQueueQuota.objects.get(cluster_queue__name="nlp")
    assert nlp_quota.nominal == 12
    nlp = ClusterQueue.objects.get(cluster=rq_cluster, name="nlp")
    assert (nlp.pending_workloads, nlp.admitted_workloads) == (0, 1)
    # Nothing else moved.
    assert Workload.objects.filter(deleted_at__isnull=False).count() == 1
    assert ClusterQueue.objects.filter(deleted_at__isnull=False).count() == 0


def test_a_failed_quota_list_deletes_nothing(rq_api, rq_cluster) -> None:
    rq_cluster.quota_source = QuotaSource.RESOURCEQUOTA
    rq_cluster.save()
    sync_cluster(rq_cluster.pk)
    rq_api.delete("ResourceQuota", "gpu-quota", namespace="speech")
    rq_api.fail("/resourcequotas", 500, times=10, method="GET")

    run = sync_cluster(rq_cluster.pk)

    assert run.status == IngestStatus.PARTIAL
    assert "ClusterQueue" in run.error
    assert ClusterQueue.objects.get(name="speech").deleted_at is None
    assert Workload.objects.filter(deleted_at__isnull=False).count() == 0

    rq_api.clear_failures()
    assert sync_cluster(rq_cluster.pk).status == IngestStatus.SUCCESS
    assert ClusterQueue.objects.get(name="speech").deleted_at is not None
    assert ClusterQueue.objects.filter(deleted_at__isnull=True).count() == 2


def test_a_failed_pod_list_deletes_no_workload(rq_api, rq_cluster) -> None:
    sync_cluster(rq_cluster.pk)
    gone = copy.deepcopy(rq_api.get("Pod", "sam-finetune-0-q4z8j", namespace="vision"))
    rq_api.delete("Pod", gone["metadata"]["name"], namespace="vision")
    rq_api.fail("/api/v1/pods", 500, times=10, method="GET")

    run = sync_cluster(rq_cluster.pk)

    assert run.status in (IngestStatus.PARTIAL, IngestStatus.FAILED)
    assert Workload.objects.filter(deleted_at__isnull=False).count() == 0
    assert ClusterQueue.objects.filter(deleted_at__isnull=False).count() == 0
    assert IngestRun.objects.count() == 2


def test_a_gpu_pod_outside_every_gpu_quota_is_a_workload_in_no_queue(rq_api, rq_cluster) -> None:
    rq_api.add("Pod", job_pod("research", "probe", "1", node="gpu-node-a100-03"))

    run = sync_cluster(rq_cluster.pk)

    assert run.status == IngestStatus.SUCCESS, run.error
    probe = Workload.objects.get(cluster=rq_cluster, namespace="research", name="job-probe")
    assert (probe.state, probe.admitted_gpus, probe.cluster_queue) == ("admitted", 1.0, None)
    assert not ClusterQueue.objects.filter(name="research").exists()
