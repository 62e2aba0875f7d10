"""One hour of a Volcano cluster, end to end: every figure (allocated, active, idle, borrowed,
nominal, pending) per queue, parent queue, namespace and workload, through the per-window path
(collector windows, then the hourly roll-up) and through the deep backfill, against a truth
worked out by hand.

The cluster is the Volcano fixture (tests/fixtures/volcano, synced through the API test server:
a gang, a queue borrowing over its deserved, a pending gang, an Inqueue gang without pods, a
completed PodGroup and an idle queue). A real Prometheus holds 11:00-12:00, one scrape a minute:
vc-scheduler's and vc-controller-manager's queue gauges as the fixture file gives them, and, for
each running pod of the fixture, kube-state-metrics' pod series and one DCGM SM_ACTIVE series per
GPU it holds, at a steady value per PodGroup:

============================  =====  ====  ==========  ==========================
PodGroup (queue)              pods   GPUs  SM_ACTIVE   one hour
============================  =====  ====  ==========  ==========================
team-v1/llama-pretrain        4      16    0.8         16 GPU-h, 12.8 active
team-v1/mixtral-ft            1      8     0.0         8 GPU-h, 0 active, 8 idle
team-v2/vit-sweep             2      8     0.5         8 GPU-h, 4 active
prod/llm-serve                2      16    0.3         16 GPU-h, 4.8 active
============================  =====  ====  ==========  ==========================

Quota (fixture README, "Expected figures"): team-v1 deserves 16 and has 24 in use, so it borrows
8 all hour; team-v2 16 (10 in use: vit-sweep's 8 and ddp-smoke's 2 reserved), team-v3 8 (idle),
prod 32; research's own pool is 0, so its members' nominal is 16 + 16 + 8 = 40.

Pending GPU-hours come from the PodGroups' waiting intervals (their creation and conditions, as
the sync recorded them), on both paths: protein-fold (team-v2, Pending since 10:00) waits for
16 GPUs all hour, 16 GPU-h; ddp-smoke (team-v2, created 11:58, Inqueue since 11:59:30) waited
90 s for 2 GPUs, 0.05 GPU-h. team-v2 and research: 16.05.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
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
from tests.prometheus_server import OpenMetricsWriter, PrometheusServer, copy_tsdb, create_blocks
from tests.quotas.test_scheduler_metrics import exposition, minutes
from tests.scheduler_fixtures import load_scheduler_fixtures

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "volcano"
HOUR = datetime(2026, 8, 22, 11, tzinfo=UTC)
NOW = HOUR + timedelta(hours=1)
WINDOW = 60
SM_ACTIVE = {"llama-pretrain": 0.8, "mixtral-ft": 0.0, "vit-sweep": 0.5, "llm-serve": 0.3}
GROUP = "scheduling.k8s.io/group-name"

# The hand-worked truth: (allocated, active, idle, borrowed, nominal, pending) GPU-hours.
QUEUES = {
    "team-v1": (24, 12.8, 8, 8, 16, 0),
    "team-v2": (8, 4.0, 0, 0, 16, 16.05),
    "team-v3": (0, 0, 0, 0, 8, 0),
    "prod": (16, 4.8, 0, 0, 32, 0),
}
# research's direct members: team-v1, team-v2, team-v3 (and its own pool of 0).
COHORTS = {"research": (32, 16.8, 8, 8, 40, 16.05)}
# A namespace has no quota of its own: (allocated, active, idle, pending).
NAMESPACES = {
    "team-v1": (24, 12.8, 8, 0),
    "team-v2": (8, 4.0, 0, 16.05),
    "prod": (16, 4.8, 0, 0),
}
WORKLOADS = {
    "team-v1/llama-pretrain": (16, 12.8, 0),
    "team-v1/mixtral-ft": (8, 0.0, 8),
    "team-v2/vit-sweep": (8, 4.0, 0),
    "prod/llm-serve": (16, 4.8, 0),
}


def running_pods() -> list[dict[str, Any]]:
    pods = json.loads((FIXTURES / "pods.v1.json").read_text())["items"]
    return [p for p in pods if p["status"].get("phase") == "Running"]


def pod_group_of(pod: dict[str, Any]) -> str:
    """The workload name of the pod's PodGroup (``<job>-<job uid>``)."""
    return pod["metadata"]["labels"]["volcano.sh/job-name"]


def write_history(path: Path) -> None:
    families: dict[str, list[tuple[dict[str, str], float, float]]] = {}

    def add(metric: str, labels: dict[str, str], value: float, at: float) -> None:
        families.setdefault(metric, []).append((labels, value, at))

    for metric, labels, value in exposition("volcano"):
        for at in minutes(HOUR - timedelta(minutes=5), NOW):
            add(metric, labels, value, at)
    next_index: dict[str, int] = {}
    for pod in running_pods():
        meta, spec = pod["metadata"], pod["spec"]
        node, container = spec["nodeName"], spec["containers"][0]
        gpus = int(container["resources"]["requests"]["nvidia.com/gpu"])
        ident = {"namespace": meta["namespace"], "pod": meta["name"], "uid": meta["uid"]}
        first = next_index.get(node, 0)
        next_index[node] = first + gpus
        for at in minutes(HOUR - timedelta(minutes=5), NOW, 30):
            add("kube_pod_info", {**ident, "node": node}, 1, at)
            add(
                "kube_pod_annotations",
                {**ident, "annotation_scheduling_k8s_io_group_name": meta["annotations"][GROUP]},
                1,
                at,
            )
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
                add("DCGM_FI_PROF_SM_ACTIVE", labels, SM_ACTIVE[pod_group_of(pod)], at)
    with OpenMetricsWriter(path) as out:
        for metric, samples in families.items():
            out.family(metric)
            for labels, value, at in samples:
                out.sample(labels, value, at)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("volcano-hour")
    write_history(work / "history.om")
    create_blocks(work / "history.om", work / "pristine")
    return work / "pristine"


@pytest.fixture
def cluster(pristine: Path, tmp_path: Path, make_kube_api: Any, db: None) -> Iterator[Cluster]:
    server = PrometheusServer(copy_tsdb(pristine, tmp_path / "tsdb")).start()
    try:
        api = make_kube_api(load=False, kueue_versions=(), volcano_versions=("v1beta1",))
        load_scheduler_fixtures(api, "volcano")
        found = Cluster.objects.create(name="gpu-volcano", prometheus_url=server.url)
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
    queues = rollups(cluster, RollupScope.CLUSTER_QUEUE)
    for name, want in QUEUES.items():
        assert queues[name] == pytest.approx(want, rel=0.005, abs=1e-6), name
    cohorts = rollups(cluster, RollupScope.COHORT)
    for name, want in COHORTS.items():
        assert cohorts[name] == pytest.approx(want, rel=0.005, abs=1e-6), name
    namespaces = rollups(cluster, RollupScope.NAMESPACE)
    for name, want in NAMESPACES.items():
        got = namespaces[name][:3] + namespaces[name][5:]
        assert got == pytest.approx(want, rel=0.005, abs=1e-6), name
    workloads = rollups(cluster, RollupScope.WORKLOAD)
    for name, want in WORKLOADS.items():
        assert workloads[name][:3] == pytest.approx(want, rel=0.005, abs=1e-6), name
    # The Inqueue gang without pods holds quota but no GPU: nothing allocated, 90 s waited.
    ddp = workloads["team-v2/ddp-smoke"]
    assert (ddp[0], ddp[5]) == pytest.approx((0, 0.05), abs=1e-6)
    assert workloads["team-v2/protein-fold"][5] == pytest.approx(16, rel=0.005)


def test_the_per_window_path_gives_the_hand_worked_hour(cluster: Cluster) -> None:
    Collector(cluster, window_seconds=WINDOW).backfill(HOUR, NOW)
    roll_up_range(cluster.id, HOUR, NOW)

    check(cluster)


def test_the_deep_backfill_gives_the_same_hour(cluster: Cluster) -> None:
    DeepBackfill(cluster, window_seconds=WINDOW, workers=1).run(HOUR, NOW)

    check(cluster)
