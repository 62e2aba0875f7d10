"""One hour of a Volcano cluster, a KAI Scheduler cluster and a ResourceQuota cluster, end to
end: every figure
(allocated, active, idle, borrowed, nominal, pending) per queue, parent queue, namespace and
workload, through the per-window path (collector windows, then the hourly roll-up) and through
the deep backfill, against a truth worked out by hand.

Each cluster is its fixture (tests/fixtures/volcano, tests/fixtures/kai, synced through the API
test server: a gang, a queue borrowing over its quota, a pending gang, a completed PodGroup whose
pods are gone and an idle queue; Volcano also an Inqueue gang without pods). A real Prometheus
holds 11:00-12:00, one scrape a minute: the scheduler's queue gauges as the fixture file gives
them, and, for each running pod of the fixture, kube-state-metrics' pod series and one DCGM
SM_ACTIVE series per GPU it holds, at a steady value per job:

=================  ==========  ===============================================================
job (both)         SM_ACTIVE   one hour
=================  ==========  ===============================================================
llama-pretrain     0.8         16 GPUs: 16 GPU-h, 12.8 active
mixtral-ft         0.0         8 GPUs: 8 GPU-h, 0 active, 8 idle
vit-sweep          0.5         8 GPUs: 8 GPU-h, 4 active
serving            0.3         16 GPUs (Volcano llm-serve, KAI two vllm-llama70b pods): 4.8 active
=================  ==========  ===============================================================

Quota (fixture READMEs, "Expected figures"): the research team queue (Volcano team-v1, KAI
kai-team-a) has 16 and 24 in use, so it borrows 8 all hour; the second (team-v2 / kai-team-b) has
16, the idle one (team-v3 / kai-team-c) 8, serving (prod / kai-serving) 32. The research parent's
own pool is 0, so its members' nominal is 16 + 16 + 8 = 40.

The ResourceQuota cluster (tests/fixtures/resourcequota) has no queue gauges of a scheduler: its
history is kube-state-metrics' ``kube_resourcequota``. Its jobs: detr-train (2 x 4 GPUs, SM 0.8),
triton-vision (2 x 2, 0.3), bert-distill (4, 0.5, being preempted, still running) and nlp-embed
(2 x 2, 0.0: idle); vision 16, nlp 8, speech 4 (idle); nothing borrowed; sam-finetune (4 GPUs)
created at 11:59:40 waits 20 s of the hour.

Pending GPU-hours come from the PodGroups' waiting intervals (their creation and conditions, as
the sync recorded them), on both paths: protein-fold (Pending since 10:00) waits for 16 GPUs all
hour, 16 GPU-h; Volcano's ddp-smoke (created 11:58, Inqueue since 11:59:30) waited 90 s for
2 GPUs, 0.05 GPU-h.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fleet.models import Cluster
from ledger.choices import RollupScope
from ledger.collector import Collector
from ledger.deep import DeepBackfill
from ledger.models import HourlyRollup
from ledger.rollup import roll_up_range
from quotas.sync import sync_cluster
from tests.prometheus_server import PrometheusServer, copy_tsdb, import_each, write_families
from tests.quotas.test_resourcequota_metrics import quota_series
from tests.quotas.test_scheduler_metrics import exposition, minutes
from tests.scheduler_fixtures import load_scheduler_fixtures

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HOUR = datetime(2026, 8, 22, 11, tzinfo=UTC)
NOW = HOUR + timedelta(hours=1)
WINDOW = 60
SM_ACTIVE = {
    "detr-train": 0.8,
    "triton-vision": 0.3,
    "bert-distill": 0.5,
    "nlp-embed": 0.0,
    "llama-pretrain": 0.8,
    "mixtral-ft": 0.0,
    "vit-sweep": 0.5,
    "llm-serve": 0.3,
    "vllm-llama70b": 0.3,
}


@dataclass(frozen=True)
class Truth:
    """A source's API server, pod annotation ("" for none) and hand-worked hour: per scope and key,
    (allocated, active, idle, borrowed, nominal, pending) GPU-hours; a namespace has no quota
    of its own: (allocated, active, idle, pending)."""

    api: dict[str, tuple[str, ...]]
    annotation: str  # the pod's PodGroup annotation
    label: str  # the same, as kube-state-metrics names it
    queues: dict[str, tuple[float, ...]]
    cohorts: dict[str, tuple[float, ...]]
    namespaces: dict[str, tuple[float, ...]]
    workloads: dict[str, tuple[float, ...]]


TRUTH = {
    "volcano": Truth(
        api={"volcano_versions": ("v1beta1",)},
        annotation="scheduling.k8s.io/group-name",
        label="annotation_scheduling_k8s_io_group_name",
        queues={
            "team-v1": (24, 12.8, 8, 8, 16, 0),
            "team-v2": (8, 4.0, 0, 0, 16, 16.05),
            "team-v3": (0, 0, 0, 0, 8, 0),
            "prod": (16, 4.8, 0, 0, 32, 0),
        },
        # research's direct members: team-v1, team-v2, team-v3 (and its own pool of 0).
        cohorts={"research": (32, 16.8, 8, 8, 40, 16.05)},
        namespaces={
            "team-v1": (24, 12.8, 8, 0),
            "team-v2": (8, 4.0, 0, 16.05),
            "prod": (16, 4.8, 0, 0),
        },
        workloads={
            "team-v1/llama-pretrain": (16, 12.8, 0, 0),
            "team-v1/mixtral-ft": (8, 0.0, 8, 0),
            "team-v2/vit-sweep": (8, 4.0, 0, 0),
            "team-v2/protein-fold": (0, 0, 0, 16),
            # The Inqueue gang without pods holds quota but no GPU; it waited 90 s.
            "team-v2/ddp-smoke": (0, 0, 0, 0.05),
            "prod/llm-serve": (16, 4.8, 0, 0),
        },
    ),
    # A namespace's ResourceQuota is its queue; no cohort. sam-finetune (4 GPUs) was created
    # at 11:59:40 and waits: 4 x 20 s. bert-distill is being preempted but still runs.
    "resourcequota": Truth(
        api={"serve_resource_quotas": True},
        annotation="",
        label="",
        queues={
            "vision": (12, 7.6, 0, 0, 16, 4 * 20 / 3600),
            "nlp": (8, 2.0, 4, 0, 8, 0),
            "speech": (0, 0, 0, 0, 4, 0),
        },
        cohorts={},
        namespaces={"vision": (12, 7.6, 0, 4 * 20 / 3600), "nlp": (8, 2.0, 4, 0)},
        workloads={
            "vision/job-detr-train": (8, 6.4, 0, 0),
            "vision/deployment-triton-vision": (4, 1.2, 0, 0),
            "vision/job-sam-finetune": (0, 0, 0, 4 * 20 / 3600),
            "nlp/job-bert-distill": (4, 2.0, 0, 0),
            "nlp/deployment-nlp-embed": (4, 0.0, 4, 0),
        },
    ),
    "kai": Truth(
        api={"kai_versions": ("v2", "v2alpha2")},
        annotation="pod-group-name",
        label="annotation_pod_group_name",
        queues={
            "kai-team-a": (24, 12.8, 8, 8, 16, 0),
            "kai-team-b": (8, 4.0, 0, 0, 16, 16),
            "kai-team-c": (0, 0, 0, 0, 8, 0),
            "kai-serving": (16, 4.8, 0, 0, 32, 0),
        },
        cohorts={
            "dept-research": (32, 16.8, 8, 8, 40, 16),
            "dept-prod": (16, 4.8, 0, 0, 32, 0),
        },
        namespaces={
            "kai-team-a": (24, 12.8, 8, 0),
            "kai-team-b": (8, 4.0, 0, 16),
            "kai-serving": (16, 4.8, 0, 0),
        },
        workloads={
            "kai-team-a/llama-pretrain": (16, 12.8, 0, 0),
            "kai-team-a/mixtral-ft": (8, 0.0, 8, 0),
            "kai-team-b/vit-sweep": (8, 4.0, 0, 0),
            "kai-team-b/protein-fold": (0, 0, 0, 16),
            "kai-serving/vllm-llama70b-6f9c7d8b5-k2xqp": (8, 2.4, 0, 0),
            "kai-serving/vllm-llama70b-6f9c7d8b5-p8wzr": (8, 2.4, 0, 0),
        },
    ),
}


def running_pods(source: str) -> list[dict[str, Any]]:
    pods = json.loads((FIXTURES / source / "pods.v1.json").read_text())["items"]
    return [p for p in pods if p["status"].get("phase") == "Running"]


def activity(pod: dict[str, Any]) -> float:
    """The pod's steady SM_ACTIVE: its job's (the job name starts the pod's name)."""
    name = pod["metadata"]["name"]
    (found,) = [value for job, value in SM_ACTIVE.items() if name.startswith(f"{job}-")]
    return found


def gauges(source: str) -> list[tuple[str, dict[str, str], float]]:
    """The source's quota gauges: the scheduler's fixture exposition, or for ResourceQuota
    kube-state-metrics' ``kube_resourcequota`` lines."""
    if source == "resourcequota":
        return [("kube_resourcequota", labels, value) for labels, value in quota_series()]
    return exposition(source)


def write_history(source: str, path: Path) -> None:
    families: dict[str, list[tuple[dict[str, str], float, float]]] = {}

    def add(metric: str, labels: dict[str, str], value: float, at: float) -> None:
        families.setdefault(metric, []).append((labels, value, at))

    truth = TRUTH[source]
    for metric, labels, value in gauges(source):
        for at in minutes(HOUR - timedelta(minutes=5), NOW):
            add(metric, labels, value, at)
    next_index: dict[str, int] = {}
    for pod in running_pods(source):
        meta, spec = pod["metadata"], pod["spec"]
        node, container = spec["nodeName"], spec["containers"][0]
        gpus = int(container["resources"]["requests"]["nvidia.com/gpu"])
        ident = {"namespace": meta["namespace"], "pod": meta["name"], "uid": meta["uid"]}
        first = next_index.get(node, 0)
        next_index[node] = first + gpus
        for at in minutes(HOUR - timedelta(minutes=5), NOW, 30):
            add("kube_pod_info", {**ident, "node": node}, 1, at)
            if truth.annotation:
                annotation = {truth.label: meta["annotations"][truth.annotation]}
                add("kube_pod_annotations", {**ident, **annotation}, 1, at)
            for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
                add("kube_pod_status_phase", {**ident, "phase": phase}, phase == "Running", at)
            add(
                "kube_pod_container_resource_requests",
                {
                    **ident,
                    "container": container["name"],
                    "resource": "nvidia_com_gpu",
                    "unit": "integer",
                },
                gpus,
                at,
            )
            for index in range(first, first + gpus):
                labels = {
                    "Hostname": node,
                    "UUID": f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'{node}/{index}')}",
                    "gpu": str(index),
                    "modelName": "NVIDIA H100 80GB HBM3",
                    "exported_namespace": meta["namespace"],
                    "exported_pod": meta["name"],
                    "exported_container": container["name"],
                }
                add("DCGM_FI_PROF_SM_ACTIVE", labels, activity(pod), at)
    write_families(path, families)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return import_each(tmp_path_factory, TRUTH, write_history)


@pytest.fixture(params=sorted(TRUTH))
def cluster(
    request: pytest.FixtureRequest,
    pristine: dict[str, Path],
    tmp_path: Path,
    make_kube_api: Any,
    db: None,
) -> Iterator[Cluster]:
    source = request.param
    server = PrometheusServer(copy_tsdb(pristine[source], tmp_path / "tsdb")).start()
    try:
        api = make_kube_api(load=False, kueue_versions=(), **TRUTH[source].api)
        load_scheduler_fixtures(api, source)
        found = Cluster.objects.create(name=f"gpu-{source}", prometheus_url=server.url)
        run = sync_cluster(found.pk)
        assert run.status == "success", run.error
        yield Cluster.objects.get(pk=found.pk)
    finally:
        server.stop()


FIGURES = (
    "allocated_gpu_hours",
    "active_gpu_hours",
    "idle_gpu_hours",
    "borrowed_gpu_hours",
    "nominal_gpu_hours",
    "pending_gpu_hours",
)


def rollups(cluster: Cluster, scope: str) -> dict[str, tuple[float, ...]]:
    found = HourlyRollup.objects.filter(cluster=cluster, scope=scope, hour=HOUR)
    return {row.key: tuple(getattr(row, name) for name in FIGURES) for row in found}


def check(cluster: Cluster) -> None:
    truth = TRUTH[cluster.name.removeprefix("gpu-")]
    queues = rollups(cluster, RollupScope.CLUSTER_QUEUE)
    for name, want in truth.queues.items():
        assert queues[name] == pytest.approx(want, rel=0.005, abs=1e-6), name
    cohorts = rollups(cluster, RollupScope.COHORT)
    for name, want in truth.cohorts.items():
        assert cohorts[name] == pytest.approx(want, rel=0.005, abs=1e-6), name
    for scope, expected in (
        (RollupScope.NAMESPACE, truth.namespaces),
        (RollupScope.WORKLOAD, truth.workloads),
    ):
        found = rollups(cluster, scope)
        for name, want in expected.items():
            # (allocated, active, idle, pending): no quota of their own.
            got = found[name][:3] + found[name][5:]
            assert got == pytest.approx(want, rel=0.005, abs=1e-6), (scope, name)


def test_the_per_window_path_gives_the_hand_worked_hour(cluster: Cluster) -> None:
    Collector(cluster, window_seconds=WINDOW).backfill(HOUR, NOW)
    roll_up_range(cluster.id, HOUR, NOW)

    check(cluster)


def test_the_deep_backfill_gives_the_same_hour(cluster: Cluster) -> None:
    DeepBackfill(cluster, window_seconds=WINDOW, workers=1).run(HOUR, NOW)

    check(cluster)
