"""The rows of the DCGM ingest: one window's Prometheus answers in (``WindowInput``), GPU, usage
and allocation rows out (``WindowBatch``), and what was read and skipped (``IngestStats``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from core.mig import MIG_COMPUTE_SLICES
from core.timewindows import Window
from fleet.choices import ActivitySource, PodLabelStyle
from fleet.models import gpu_key


@dataclass
class IngestStats:
    """What a run read and what it skipped, and why (copied into IngestRun)."""

    records_read: int = 0
    skipped: int = 0
    nonfinite_skipped: int = 0
    skip_reasons: Counter[str] = field(default_factory=Counter)
    # Requests of pods with node="" (not scheduled): expected, not bad input, so not "skipped".
    pending_requests: int = 0

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped += count
        self.skip_reasons[reason] += count

    def merge(self, other: IngestStats) -> IngestStats:
        """Add ``other`` into this one (for a run over several windows); returns self."""
        self.records_read += other.records_read
        self.skipped += other.skipped
        self.nonfinite_skipped += other.nonfinite_skipped
        self.skip_reasons.update(other.skip_reasons)
        self.pending_requests += other.pending_requests
        return self


@dataclass
class WindowInput:
    """Everything Prometheus said about one window."""

    window: Window
    # DCGM_METRICS key -> vector items of avg_over_time(<metric>[window]) per series.
    dcgm_avg: dict[str, list[dict]]
    # DCGM_METRICS key -> vector items of count_over_time(<metric>[window]); missing -> one sample
    # per averaged series.
    dcgm_count: dict[str, list[dict]] = field(default_factory=dict)
    # GPUs requested by Running pods: labels namespace, pod, uid, resource, node; value = count.
    gpu_requests: list[dict] = field(default_factory=list)
    # kube_pod_labels items (Kueue queue labels when allowlisted).
    pod_labels: list[dict] = field(default_factory=list)
    # kube_pod_owner items of the GPU pods, and kube_job_owner items of their Jobs.
    pod_owners: list[dict] = field(default_factory=list)
    job_owners: list[dict] = field(default_factory=list)
    # kube_pod_annotations items of the GPU pods: their Volcano / KAI PodGroup.
    pod_groups: list[dict] = field(default_factory=list)
    label_style: str = PodLabelStyle.AUTO
    # Samples expected per series in the window (0 = unknown).
    expected_samples: int = 0


@dataclass
class GpuRow:
    """A GPU (or MIG GPU instance) seen in the window."""

    host: str
    uuid: str
    gi_id: str
    index: int
    model_name: str
    pci_bus_id: str
    mig_profile: str
    slices: int
    time_sliced: bool = False

    @property
    def key(self) -> str:
        return gpu_key(self.host, self.uuid, self.gi_id)

    @property
    def fraction(self) -> float:
        return self.slices / MIG_COMPUTE_SLICES


@dataclass
class UsageRow:
    """One GPU, or one pod's share of it, over the window (becomes a GpuUsage row)."""

    gpu_key: str
    host: str
    uuid: str
    gi_id: str
    namespace: str
    pod: str
    container: str
    pod_uid: str
    node_name: str
    allocated: bool
    gpus: float
    capacity_gpus: float
    shared: bool = False
    sm_active: float | None = None
    pipe_tensor_active: float | None = None
    dram_active: float | None = None
    gr_engine_active: float | None = None
    gpu_util: float | None = None
    fb_used_mib: float | None = None
    activity: float | None = None
    activity_source: str = ActivitySource.NONE
    samples: int = 0
    expected_samples: int = 0
    cluster_queue_name: str = ""
    local_queue_name: str = ""


@dataclass
class PodAllocationRow:
    """A pod holding GPUs in the window (becomes / extends an Allocation row)."""

    namespace: str
    pod: str
    pod_uid: str
    node_name: str
    resource: str
    gpus: float
    gpu_keys: list[str]
    cluster_queue_name: str = ""
    local_queue_name: str = ""


@dataclass(frozen=True)
class PodOwner:
    """What owns a pod, as kube-state-metrics saw it: its controller (``kind``/``name``), the
    top of the chain that is known (a JobSet child Job's JobSet, else the controller), and the
    Kueue pod group it belongs to (``kueue.x-k8s.io/pod-group-name``, when allowlisted)."""

    uid: str
    kind: str = ""
    name: str = ""
    top_kind: str = ""
    top_name: str = ""
    pod_group: str = ""


@dataclass
class WindowBatch:
    window: Window
    gpus: list[GpuRow]
    usage: list[UsageRow]
    allocations: list[PodAllocationRow]
    stats: IngestStats
    label_style_used: str
    # (namespace, pod) -> owner, for the pods of the window that kube-state-metrics names.
    owners: dict[tuple[str, str], PodOwner] = field(default_factory=dict)
