"""A generated GPU fleet in a real Prometheus, and its ground truth computed from the numbers.

Two clusters, each in its own Prometheus (a Cluster is one Prometheus URL):

- ``alpha`` is scraped the GPU Operator way (``honor_labels: false``): the workload pod is in
  ``exported_namespace/exported_pod``, the plain ``namespace/pod`` name the exporter pod, the host
  label is ``Hostname``, and kube-state-metrics runs as two replicas (duplicate series). It has
  a 2-GPU job, a GPU time-sliced between two pods, an idle allocated GPU, a GPU without
  SM_ACTIVE (GR_ENGINE_ACTIVE only), a NaN sample, a MIG GPU (3g + 2g + 1g + 1g), a pod whose
  GPUs lost their DCGM pod labels (allocated, no telemetry), a pod that starts half-way through
  the second hour, and a Pending pod with ``node=""``.
- ``beta`` is scraped with plain ``namespace/pod`` labels and the newer ``hostname`` label.

Samples every 15 s at second 7 of each quarter minute, from 10 min before ``T0`` to just after
``T0 + 2h``. ``ground_truth`` derives every hourly figure of docs/architecture.md "Figures" straight
from the generated numbers, without any project code.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.prometheus_server import (
    OpenMetricsWriter,
    PrometheusServer,
    copy_tsdb,
    create_blocks,
    require_binary,
)

T0 = datetime(2026, 1, 5, tzinfo=UTC)
DATA_START = T0 - timedelta(minutes=10)
DATA_END = T0 + timedelta(hours=2, minutes=1)
SAMPLE_SECONDS = 15
SAMPLE_OFFSET = 7
WINDOW_SECONDS = 60
LATE_POD_START = T0 + timedelta(minutes=90)
LATE_POD_PENDING = T0 + timedelta(minutes=80)
# The one NaN sample (SM_ACTIVE and GR_ENGINE_ACTIVE of alpha's nan-job GPU).
NAN_AT = T0 + timedelta(minutes=30, seconds=SAMPLE_OFFSET + 2 * SAMPLE_SECONDS)
IDLE_THRESHOLD = 0.01
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
MODELS = {"h100": "NVIDIA H100 80GB HBM3", "a100": "NVIDIA A100-SXM4-80GB"}


def sample_times() -> list[float]:
    first = DATA_START.timestamp() + SAMPLE_OFFSET
    last = DATA_END.timestamp()
    count = int((last - first) // SAMPLE_SECONDS) + 1
    return [first + i * SAMPLE_SECONDS for i in range(count)]


@dataclass
class Pod:
    namespace: str
    name: str
    container: str
    gpus: int = 0
    resource: str = "nvidia_com_gpu"
    node: str = ""
    # Running from this time on (None: from the start); Pending before it if pending_from is set.
    running_from: datetime | None = None
    pending_from: datetime | None = None
    always_pending: bool = False
    cluster_queue: str = ""
    local_queue: str = ""

    @property
    def uid(self) -> str:
        return f"uid-{self.namespace}-{self.name}"

    def phase(self, t: float) -> str | None:
        if self.always_pending:
            return "Pending"
        if self.running_from is None or t > self.running_from.timestamp():
            return "Running"
        if self.pending_from is not None and t > self.pending_from.timestamp():
            return "Pending"
        return None

    def exists(self, t: float) -> bool:
        return self.phase(t) is not None


@dataclass
class GpuSpec:
    host: str
    index: int
    uuid: str
    model: str
    base: float
    gi_id: str = ""
    profile: str = ""
    pods: tuple[Pod, ...] = ()
    # Pods only from this time on (before: no pod labels).
    pods_from: datetime | None = None
    has_sm: bool = True
    nan_at: datetime | None = None

    @property
    def fraction(self) -> float:
        return int(self.profile.split("g.")[0]) / 7 if self.gi_id else 1.0

    def pods_at(self, t: float) -> tuple[Pod, ...]:
        if self.pods_from is not None and t <= self.pods_from.timestamp():
            return ()
        return self.pods


@dataclass
class Scenario:
    name: str
    label_style: str  # "exported" or "plain"
    host_label: str  # "Hostname" or "hostname"
    gpus: list[GpuSpec]
    pods: list[Pod]
    ksm_replicas: int = 1
    seed: int = 1
    # (gpu uuid/gi, metric) -> {t: value}
    values: dict[tuple[str, str], dict[float, float]] = field(default_factory=dict)

    def gpu_id(self, gpu: GpuSpec) -> str:
        return f"{gpu.host}/{gpu.uuid}/{gpu.gi_id}"

    def generate_values(self) -> None:
        rng = random.Random(self.seed)
        nan_ts = NAN_AT.timestamp()
        for gpu in self.gpus:
            ident = self.gpu_id(gpu)
            for metric in ("sm", "gr", "tensor", "dram", "util", "fb"):
                self.values[(ident, metric)] = {}
            for t in sample_times():
                if gpu.base < IDLE_THRESHOLD:
                    sm = round(rng.uniform(0.0, gpu.base), 6)
                else:
                    sm = round(min(1.0, max(0.0, gpu.base + rng.uniform(-0.15, 0.15))), 6)
                gr = round(min(1.0, sm + 0.03), 6) if sm >= IDLE_THRESHOLD else sm
                if gpu.nan_at is not None and t == nan_ts:
                    sm = gr = math.nan
                self.values[(ident, "sm")][t] = sm
                self.values[(ident, "gr")][t] = gr
                self.values[(ident, "tensor")][t] = round(sm * 0.5, 6) if sm == sm else 0.0
                self.values[(ident, "dram")][t] = round(rng.uniform(0.1, 0.4), 6)
                self.values[(ident, "util")][t] = 100.0 if not sm < 0.05 else 0.0
                self.values[(ident, "fb")][t] = 40000.0 if gpu.pods else 0.0

    # --- OpenMetrics ---------------------------------------------------------------------------

    def dcgm_labels(self, gpu: GpuSpec, pod: Pod | None) -> dict[str, str]:
        labels = {
            "gpu": str(gpu.index),
            "UUID": gpu.uuid,
            "pci_bus_id": f"00000000:{gpu.index + 16:02X}:00.0",
            "device": f"nvidia{gpu.index}",
            "modelName": gpu.model,
        }
        if gpu.gi_id:
            labels["GPU_I_PROFILE"] = gpu.profile
            labels["GPU_I_ID"] = gpu.gi_id
        labels[self.host_label] = gpu.host
        labels["DCGM_FI_DRIVER_VERSION"] = "580.95.05"
        if self.label_style == "exported":
            # Target labels of the exporter pod; the workload pod is exported_*.
            labels.update(
                {
                    "container": "nvidia-dcgm-exporter",
                    "endpoint": "gpu-metrics",
                    "instance": f"10.1.0.{self.hosts().index(gpu.host) + 10}:9400",
                    "job": "nvidia-dcgm-exporter",
                    "namespace": "gpu-operator",
                    "pod": f"nvidia-dcgm-exporter-{gpu.host}",
                    "service": "nvidia-dcgm-exporter",
                }
            )
            if pod is not None:
                labels["exported_container"] = pod.container
                labels["exported_namespace"] = pod.namespace
                labels["exported_pod"] = pod.name
        else:
            labels["instance"] = f"10.2.0.{self.hosts().index(gpu.host) + 10}:9400"
            labels["job"] = "dcgm-exporter"
            if pod is not None:
                labels["container"] = pod.container
                labels["namespace"] = pod.namespace
                labels["pod"] = pod.name
        return labels

    def hosts(self) -> list[str]:
        return sorted({gpu.host for gpu in self.gpus})

    def write_openmetrics(self, path: Path) -> int:
        families = {
            "DCGM_FI_PROF_SM_ACTIVE": "sm",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor",
            "DCGM_FI_PROF_DRAM_ACTIVE": "dram",
            "DCGM_FI_DEV_GPU_UTIL": "util",
            "DCGM_FI_DEV_FB_USED": "fb",
        }
        times = sample_times()
        with OpenMetricsWriter(path) as out:
            for family, metric in families.items():
                out.family(family)
                for gpu in self.gpus:
                    if metric == "sm" and not gpu.has_sm:
                        continue
                    values = self.values[(self.gpu_id(gpu), metric)]
                    for t in times:
                        pods = gpu.pods_at(t) or (None,)
                        for pod in pods:
                            out.sample(self.dcgm_labels(gpu, pod), values[t], t)
            self._write_ksm(out, times)
            return out.samples

    def _ksm_target(self, replica: int) -> dict[str, str]:
        # honor_labels: true keeps the object's namespace/pod; labels the series lack come
        # from the target (the ksm pod) — here container/endpoint/service/instance/job.
        return {
            "container": "kube-state-metrics",
            "endpoint": "http",
            "instance": f"10.0.0.{9 + replica}:8080",
            "job": "kube-state-metrics",
            "service": "kube-state-metrics",
        }

    def _write_ksm(self, out: OpenMetricsWriter, times: list[float]) -> None:
        replicas = range(self.ksm_replicas)
        out.family("kube_pod_info")
        for replica in replicas:
            for pod in self.pods:
                for t in times:
                    phase = pod.phase(t)
                    if phase is None:
                        continue
                    node = pod.node if phase == "Running" else ""
                    labels = {
                        "namespace": pod.namespace,
                        "pod": pod.name,
                        "uid": pod.uid,
                        "host_ip": "10.9.0.1" if node else "",
                        "node": node,
                        "created_by_kind": "Job",
                        **self._ksm_target(replica),
                    }
                    out.sample(labels, 1.0, t)
        out.family("kube_pod_status_phase")
        for replica in replicas:
            for pod in self.pods:
                for phase in PHASES:
                    for t in times:
                        current = pod.phase(t)
                        if current is None:
                            continue
                        labels = {
                            "namespace": pod.namespace,
                            "pod": pod.name,
                            "uid": pod.uid,
                            "phase": phase,
                            **self._ksm_target(replica),
                        }
                        out.sample(labels, 1.0 if current == phase else 0.0, t)
        out.family("kube_pod_container_resource_requests")
        for replica in replicas:
            for pod in self.pods:
                for t in times:
                    phase = pod.phase(t)
                    if phase is None:
                        continue
                    base = {
                        "namespace": pod.namespace,
                        "pod": pod.name,
                        "uid": pod.uid,
                        "container": pod.container,
                        "node": pod.node if phase == "Running" else "",
                        **{k: v for k, v in self._ksm_target(replica).items() if k != "container"},
                    }
                    out.sample({**base, "resource": pod.resource, "unit": "integer"}, pod.gpus, t)
                    out.sample({**base, "resource": "cpu", "unit": "core"}, 4.0, t)
        out.family("kube_pod_labels")
        for replica in replicas:
            for pod in self.pods:
                for t in times:
                    if not pod.exists(t):
                        continue
                    labels = {"namespace": pod.namespace, "pod": pod.name, "uid": pod.uid}
                    if pod.cluster_queue:
                        labels["label_kueue_x_k8s_io_cluster_queue_name"] = pod.cluster_queue
                        labels["label_kueue_x_k8s_io_local_queue_name"] = pod.local_queue
                    out.sample({**labels, **self._ksm_target(replica)}, 1.0, t)


# --- the two clusters -------------------------------------------------------------------------


def alpha_scenario() -> Scenario:
    h100, a100 = MODELS["h100"], MODELS["a100"]

    def pod(ns: str, name: str, gpus: int, node: str, **kw: object) -> Pod:
        return Pod(ns, name, "main", gpus=gpus, node=node, **kw)  # type: ignore[arg-type]

    train = pod("team-a", "train-0", 2, "h100-a", cluster_queue="cq-a", local_queue="lq-a")
    share0 = pod("team-b", "share-0", 1, "h100-a")
    share1 = pod("team-b", "share-1", 1, "h100-a")
    notebook = pod("team-a", "notebook-0", 1, "h100-a", cluster_queue="cq-a", local_queue="lq-a")
    grjob = pod("team-b", "grjob-0", 1, "h100-a")
    nanjob = pod("team-c", "nanjob-0", 1, "h100-a")
    late = pod(
        "team-c", "late-0", 1, "h100-a", running_from=LATE_POD_START, pending_from=LATE_POD_PENDING
    )
    mig_big = pod("team-a", "mig-big-0", 1, "a100-m", resource="nvidia_com_mig_3g_40gb")
    mig_small = pod("team-b", "mig-small-0", 1, "a100-m", resource="nvidia_com_mig_1g_10gb")
    a100_job = pod("team-a", "a100-job-0", 1, "a100-m")
    big = pod("team-c", "big-0", 4, "h100-b")
    lost = pod("team-c", "lost-0", 2, "h100-b")
    pending = Pod("team-b", "pending-0", "main", gpus=4, node="", always_pending=True)

    def uuid(host: str, index: int) -> str:
        return f"GPU-{host}-{index:02d}-0000-0000-000000000000"

    gpus = [
        GpuSpec("h100-a", 0, uuid("h100-a", 0), h100, 0.8, pods=(train,)),
        GpuSpec("h100-a", 1, uuid("h100-a", 1), h100, 0.75, pods=(train,)),
        GpuSpec("h100-a", 2, uuid("h100-a", 2), h100, 0.4, pods=(share0, share1)),
        GpuSpec("h100-a", 3, uuid("h100-a", 3), h100, 0.004, pods=(notebook,)),
        GpuSpec("h100-a", 4, uuid("h100-a", 4), h100, 0.6, pods=(grjob,), has_sm=False),
        GpuSpec("h100-a", 5, uuid("h100-a", 5), h100, 0.5, pods=(nanjob,), nan_at=NAN_AT),
        GpuSpec("h100-a", 6, uuid("h100-a", 6), h100, 0.7, pods=(late,), pods_from=LATE_POD_START),
        GpuSpec("h100-a", 7, uuid("h100-a", 7), h100, 0.0),
        GpuSpec("a100-m", 0, uuid("a100-m", 0), a100, 0.3, "2", "3g.40gb", pods=(mig_big,)),
        GpuSpec("a100-m", 0, uuid("a100-m", 0), a100, 0.0, "3", "2g.20gb"),
        GpuSpec("a100-m", 0, uuid("a100-m", 0), a100, 0.0, "9", "1g.10gb", pods=(mig_small,)),
        GpuSpec("a100-m", 0, uuid("a100-m", 0), a100, 0.0, "10", "1g.10gb"),
        GpuSpec("a100-m", 1, uuid("a100-m", 1), a100, 0.55, pods=(a100_job,)),
        *[GpuSpec("a100-m", i, uuid("a100-m", i), a100, 0.0) for i in range(2, 8)],
        *[GpuSpec("h100-b", i, uuid("h100-b", i), h100, 0.9, pods=(big,)) for i in range(4)],
        *[GpuSpec("h100-b", i, uuid("h100-b", i), h100, 0.0) for i in range(4, 8)],
    ]
    pods = [train, share0, share1, notebook, grjob, nanjob, late, mig_big, mig_small]
    pods += [a100_job, big, lost, pending]
    scenario = Scenario("alpha", "exported", "Hostname", gpus, pods, ksm_replicas=2, seed=11)
    scenario.generate_values()
    return scenario


def beta_scenario() -> Scenario:
    model = MODELS["h100"]
    train = Pod("proj-x", "train-x", "main", gpus=2, node="dgx-1")
    idle = Pod("proj-y", "idle-y", "main", gpus=1, node="dgx-1")
    busy = Pod("proj-y", "busy-y", "main", gpus=1, node="dgx-1")

    def uuid(index: int) -> str:
        return f"GPU-dgx-1-{index:02d}-1111-1111-111111111111"

    gpus = [
        GpuSpec("dgx-1", 0, uuid(0), model, 0.65, pods=(train,)),
        GpuSpec("dgx-1", 1, uuid(1), model, 0.6, pods=(train,)),
        GpuSpec("dgx-1", 2, uuid(2), model, 0.003, pods=(idle,)),
        GpuSpec("dgx-1", 3, uuid(3), model, 0.45, pods=(busy,)),
        *[GpuSpec("dgx-1", i, uuid(i), model, 0.0) for i in range(4, 8)],
    ]
    scenario = Scenario("beta", "plain", "hostname", gpus, [train, idle, busy], seed=22)
    scenario.generate_values()
    return scenario


# --- ground truth -----------------------------------------------------------------------------


@dataclass
class Figures:
    capacity: float = 0.0
    allocated: float = 0.0
    telemetry: float = 0.0
    active: float = 0.0
    idle: float = 0.0

    @property
    def utilization(self) -> float:
        return self.active / self.telemetry


def window_ends(start: datetime, end: datetime) -> list[datetime]:
    ends = []
    moment = start + timedelta(seconds=WINDOW_SECONDS)
    while moment <= end:
        ends.append(moment)
        moment += timedelta(seconds=WINDOW_SECONDS)
    return ends


@dataclass
class Truth:
    fleet: Figures
    namespaces: dict[str, Figures]
    nodes: dict[str, Figures]


def ground_truth(scenario: Scenario, hour: datetime) -> Truth:
    """Fleet, per-namespace and per-node figures of one hour, from the generated samples alone."""
    fleet = Figures()
    by_ns: dict[str, Figures] = defaultdict(Figures)
    by_node: dict[str, Figures] = defaultdict(Figures)
    hours = WINDOW_SECONDS / 3600
    times = sample_times()
    for end in window_ends(hour, hour + timedelta(hours=1)):
        lo, hi = end.timestamp() - WINDOW_SECONDS, end.timestamp()
        in_window = [t for t in times if lo < t <= hi]
        for gpu in scenario.gpus:
            fleet.capacity += gpu.fraction * hours
            by_node[gpu.host].capacity += gpu.fraction * hours
            pods = gpu.pods_at(in_window[-1])
            if not pods:
                continue
            metric = "sm" if gpu.has_sm else "gr"
            samples = [scenario.values[(scenario.gpu_id(gpu), metric)][t] for t in in_window]
            activity = sum(samples) / len(samples)
            share = gpu.fraction / len(pods)
            for pod in pods:
                for figures in (fleet, by_ns[pod.namespace], by_node[gpu.host]):
                    figures.allocated += share * hours
                    if math.isnan(activity):
                        continue
                    figures.telemetry += share * hours
                    figures.active += activity * share * hours
                    if activity < IDLE_THRESHOLD:
                        figures.idle += share * hours
        # Allocated pods with no DCGM series at all: allocated, no telemetry.
        on_series = {p.name for g in scenario.gpus for p in g.pods_at(in_window[-1])}
        for pod in scenario.pods:
            if pod.phase(in_window[-1]) == "Running" and pod.name not in on_series:
                for figures in (fleet, by_ns[pod.namespace], by_node[pod.node]):
                    figures.allocated += pod.gpus * hours
    return Truth(fleet, dict(by_ns), dict(by_node))


# --- fixtures -----------------------------------------------------------------------------------


@dataclass
class PrometheusFleet:
    scenario: Scenario
    pristine: Path


def _build(scenario: Scenario, root: Path) -> PrometheusFleet:
    require_binary("promtool")
    openmetrics = root / f"{scenario.name}.om"
    scenario.write_openmetrics(openmetrics)
    pristine = root / f"{scenario.name}-tsdb"
    create_blocks(openmetrics, pristine)
    openmetrics.unlink()
    return PrometheusFleet(scenario, pristine)


@pytest.fixture(scope="session")
def alpha_fleet(tmp_path_factory: pytest.TempPathFactory) -> PrometheusFleet:
    return _build(alpha_scenario(), tmp_path_factory.mktemp("alpha"))


@pytest.fixture(scope="session")
def beta_fleet(tmp_path_factory: pytest.TempPathFactory) -> PrometheusFleet:
    return _build(beta_scenario(), tmp_path_factory.mktemp("beta"))


def start_server(fleet: PrometheusFleet, root: Path) -> PrometheusServer:
    """A Prometheus on a private copy of the pristine TSDB (it compacts blocks in place)."""
    tsdb = copy_tsdb(fleet.pristine, root / "tsdb")
    return PrometheusServer(tsdb).start()


@pytest.fixture(scope="module")
def alpha_prometheus(alpha_fleet: PrometheusFleet, tmp_path_factory: pytest.TempPathFactory):
    server = start_server(alpha_fleet, tmp_path_factory.mktemp("alpha-run"))
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def beta_prometheus(beta_fleet: PrometheusFleet, tmp_path_factory: pytest.TempPathFactory):
    server = start_server(beta_fleet, tmp_path_factory.mktemp("beta-run"))
    yield server
    server.cleanup()
