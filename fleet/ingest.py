"""Pure DCGM / kube-state-metrics ingest: Prometheus answers in, per-window rows out. No I/O.

The collector (``fleet/tasks.py``) queries Prometheus for one aligned window and hands the
vector items to :func:`build_window`; :mod:`ledger.store` writes the :class:`WindowBatch`.

Rules (DESIGN "Upstream facts" and "Figures"):

* A GPU is (host, UUID, GPU_I_ID). On MIG, ``UUID`` is the parent GPU's, so the GPU instance id
  is part of the key; a ``Ng.Mgb`` instance is N/7 of a GPU.
* The workload pod is named by ``exported_namespace/exported_pod/exported_container`` when
  Prometheus scraped with ``honor_labels: false`` (the plain labels then name the exporter pod),
  by plain ``namespace/pod/container`` otherwise. A series with no pod labels is an unallocated GPU.
* activity = SM_ACTIVE, else GR_ENGINE_ACTIVE; no sample is "no data" (None), never idle.
* Several pods on one GPU in a window (time-slicing, or one pod ending and the next starting):
  one row per pod, each with 1/n of the GPU, ``shared``; the physical capacity sits on the first
  row only, so neither capacity nor GPU-hours are double counted.
* Allocation = GPUs requested by Running pods (kube-state-metrics); ``node=""`` is pending and
  holds nothing. A pod with more GPUs requested than DCGM shows gets a row with ``gpu_key=""``
  for the rest (allocated, no telemetry). A pod on DCGM series but absent from the requests is
  still allocated: the exporter only labels a GPU with a pod the kubelet assigned it to, and
  kube-state-metrics is the side more often missing (scrape gaps, pods shorter than its scrape).
* Bad input (malformed items, NaN/±Inf, missing labels, duplicate series) is skipped, counted in
  :class:`IngestStats` and logged; it never raises. Only an unusable top-level payload raises
  :class:`IngestError`.
"""

from __future__ import annotations

import gc
import json
import logging
import math
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from core.mig import GPU_RESOURCE, MIG_COMPUTE_SLICES, MIG_RESOURCE_PREFIX, mig_slices
from core.timewindows import Window
from fleet import constants as c
from fleet.choices import ActivitySource, PodLabelStyle
from fleet.models import gpu_key

logger = logging.getLogger(__name__)

# Shares below this are float noise from subtracting GPU fractions.
_EPSILON = 1e-9


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small, acyclic objects.

    A 50,000-GPU window makes millions of dicts and lists; the collector would rescan the
    growing heap over and over (bench/ingest_pure.py: parsing took twice as long with it on).
    Reference counting still frees everything; nothing built here is cyclic.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class IngestError(ValueError):
    """The top-level payload is unusable (status error, wrong resultType, not JSON)."""


# --- Prometheus answers -------------------------------------------------------------------------


def parse_query_response(payload: dict | str | bytes, expect: str | None = None) -> list[dict]:
    """Validate a Prometheus /api/v1/query or /query_range answer; return data.result items.

    ``expect='vector'|'matrix'`` checks resultType. Raises IngestError for unusable payloads.
    The items themselves are validated later, one by one, so one bad item never loses the rest.
    """
    if isinstance(payload, bytes | str):
        try:
            with _gc_paused():
                payload = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            raise IngestError(f"answer is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise IngestError(f"answer is a {type(payload).__name__}, not an object")
    status = payload.get("status")
    if status != "success":
        raise IngestError(
            f"status {status!r}: {payload.get('errorType', '')} {payload.get('error', '')}".strip()
        )
    data = payload.get("data")
    if not isinstance(data, dict):
        raise IngestError("answer has no data object")
    result_type = data.get("resultType")
    if expect is not None and result_type != expect:
        raise IngestError(f"resultType {result_type!r}, expected {expect!r}")
    if result_type not in {"vector", "matrix", "scalar", "string"}:
        raise IngestError(f"unknown resultType {result_type!r}")
    result = data.get("result")
    if result_type in {"scalar", "string"}:
        raise IngestError(f"resultType {result_type!r} carries no series")
    if not isinstance(result, list):
        raise IngestError("data.result is not a list")
    warnings = payload.get("warnings")
    if warnings:
        logger.warning("Prometheus answered with warnings: %s", warnings)
    return result


def split_matrix(
    items: list[dict],
    stats: IngestStats | None = None,
) -> dict[float, list[dict]]:
    """Turn matrix items ({'metric', 'values': [[ts, 'v'], ...]}) into vector items per timestamp.

    Timestamps come back as floats in ascending order. Malformed items and points are skipped
    (counted in ``stats`` when given); their values are validated by :func:`build_window`.
    """
    by_ts: dict[float, list[dict]] = defaultdict(list)
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            _skip(stats, "malformed_matrix_item")
            continue
        values = item.get("values")
        if not isinstance(values, list):
            _skip(stats, "malformed_matrix_item")
            continue
        metric = item["metric"]
        for point in values:
            if not isinstance(point, list | tuple) or len(point) != 2:
                _skip(stats, "malformed_matrix_point")
                continue
            ts = point[0]
            if isinstance(ts, bool) or not isinstance(ts, int | float | str):
                _skip(stats, "malformed_matrix_point")
                continue
            try:
                ts_float = float(ts)
            except ValueError:
                _skip(stats, "malformed_matrix_point")
                continue
            by_ts[ts_float].append({"metric": metric, "value": [ts_float, point[1]]})
    return {ts: by_ts[ts] for ts in sorted(by_ts)}


def _skip(stats: IngestStats | None, reason: str) -> None:
    if stats is not None:
        stats.skip(reason)


# --- Inputs and outputs -------------------------------------------------------------------------


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


@dataclass
class WindowBatch:
    window: Window
    gpus: list[GpuRow]
    usage: list[UsageRow]
    allocations: list[PodAllocationRow]
    stats: IngestStats
    label_style_used: str


# --- Label style -------------------------------------------------------------------------------


def detect_label_style(items: list[dict]) -> str:
    """'exported' if any series has exported_pod/exported_namespace, else 'plain'."""
    for item in items:
        metric = item.get("metric") if isinstance(item, dict) else None
        if isinstance(metric, dict) and (
            c.LABEL_EXPORTED_POD in metric or c.LABEL_EXPORTED_NAMESPACE in metric
        ):
            return PodLabelStyle.EXPORTED
    return PodLabelStyle.PLAIN


def _resolve_style(inp: WindowInput) -> str:
    if inp.label_style in (PodLabelStyle.EXPORTED, PodLabelStyle.PLAIN):
        return str(inp.label_style)
    for items in inp.dcgm_avg.values():
        if isinstance(items, list) and detect_label_style(items) == PodLabelStyle.EXPORTED:
            return PodLabelStyle.EXPORTED
    return PodLabelStyle.PLAIN


# --- Sample parsing ------------------------------------------------------------------------------


def _sample(item: Any, stats: IngestStats) -> tuple[dict, float | None] | None:
    """(labels, value) of a vector item, or None after counting why it was skipped.

    A NaN or ±Inf value is counted and returned as None: the series (a GPU, a pod) is real, it
    just has no telemetry in the window.
    """
    if not isinstance(item, dict):
        stats.skip("malformed_item")
        return None
    metric = item.get("metric")
    if not isinstance(metric, dict):
        stats.skip("missing_metric")
        return None
    value = item.get("value")
    if not isinstance(value, list | tuple) or len(value) != 2:
        stats.skip("malformed_value")
        return None
    raw = value[1]
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        stats.skip("malformed_value")
        return None
    try:
        number = float(raw)
    except ValueError:
        stats.skip("unparsable_value")
        return None
    if not math.isfinite(number):
        stats.nonfinite_skipped += 1
        return metric, None
    return metric, number


def _label_sort_key(metric: dict) -> tuple:
    return tuple(sorted((str(k), str(v)) for k, v in metric.items()))


# --- build_window ------------------------------------------------------------------------------


class _Series:
    """One (GPU, pod) series across the DCGM metrics of a window.

    A plain class with slots rather than a dataclass: a 50,000-GPU window makes 50,000 of these,
    and their construction showed in bench/ingest_pure.py's profile.
    """

    __slots__ = (
        "gpu",
        "namespace",
        "pod",
        "container",
        "values",
        "chosen",
        "counts",
        "count_chosen",
    )

    def __init__(self, gpu: str, namespace: str, pod: str, container: str) -> None:
        self.gpu = gpu
        self.namespace = namespace
        self.pod = pod
        self.container = container
        self.values: dict[str, float] = {}
        # metric key -> labels of the chosen item, kept to break ties between duplicates.
        self.chosen: dict[str, dict] = {}
        self.counts: dict[str, float] = {}
        self.count_chosen: dict[str, dict] = {}


def _samples(items: list, stats: IngestStats) -> Iterator[tuple[dict, float | None]]:
    """(labels, value) of each usable vector item; see :func:`_sample` for the rules.

    Items of the usual shape (``{"metric": {...}, "value": [ts, "1.5"]}``) take a short path;
    anything else goes through :func:`_sample`'s checks, which count why it was skipped.
    """
    isfinite = math.isfinite
    for item in items:
        if (
            type(item) is dict
            and type(metric := item.get("metric")) is dict
            and type(pair := item.get("value")) is list
            and len(pair) == 2
            and type(raw := pair[1]) is str
        ):
            try:
                number = float(raw)
            except ValueError:
                stats.skip("unparsable_value")
                continue
            if isfinite(number):
                yield metric, number
            else:
                stats.nonfinite_skipped += 1
                yield metric, None
            continue
        sample = _sample(item, stats)
        if sample is not None:
            yield sample


def _register_gpu(
    metric: dict,
    key: str,
    host: str,
    uuid: str,
    gi_id: Any,
    stats: IngestStats,
    gpus: dict[str, GpuRow],
) -> bool:
    """Add the GPU a series names to ``gpus``; False after counting why it cannot be."""
    profile = ""
    slices = MIG_COMPUTE_SLICES
    if gi_id:
        profile = metric.get(c.LABEL_GPU_INSTANCE_PROFILE) or ""
        parsed = mig_slices(profile) if isinstance(profile, str) else None
        if parsed is None:
            stats.skip("invalid_mig_profile")
            return False
        slices = parsed
    index_label = metric.get(c.LABEL_GPU_INDEX)
    index = int(index_label) if isinstance(index_label, str) and index_label.isdigit() else 0
    gpus[key] = GpuRow(
        host=host,
        uuid=uuid,
        gi_id=str(gi_id),
        index=index,
        model_name=str(metric.get(c.LABEL_MODEL_NAME) or ""),
        pci_bus_id=str(metric.get(c.LABEL_PCI_BUS_ID) or ""),
        mig_profile=profile,
        slices=slices,
    )
    return True


def _collect_dcgm(
    inp: WindowInput,
    style: str,
    stats: IngestStats,
) -> tuple[dict[str, GpuRow], dict[tuple[str, str, str], _Series]]:
    ns_label, pod_label, container_label = c.POD_LABELS_BY_STYLE[style]
    first_host, *other_hosts = c.LABEL_HOSTNAMES
    gpus: dict[str, GpuRow] = {}
    series: dict[tuple[str, str, str], _Series] = {}
    skip = stats.skip

    # Called once per item (250,000 for 50,000 GPUs x 5 metrics): one function, local names.
    def identify(metric: dict, register: bool) -> tuple[str, str, str] | None:
        """(GPU key, namespace, pod) of a series, registering a new GPU; None after counting
        why it was skipped. With ``register=False`` (sample counts) an unknown GPU is None
        without a count: counts attach to averages."""
        uuid = metric.get(c.LABEL_UUID)
        if not uuid or not isinstance(uuid, str):
            skip("missing_uuid")
            return None
        host = metric.get(first_host) or ""
        if not host:
            for name in other_hosts:
                host = metric.get(name) or ""
                if host:
                    break
        if not host or not isinstance(host, str):
            skip("missing_host")
            return None
        gi_id = metric.get(c.LABEL_GPU_INSTANCE_ID) or ""
        key = gpu_key(host, uuid, str(gi_id))
        if key not in gpus and (
            not register or not _register_gpu(metric, key, host, uuid, gi_id, stats, gpus)
        ):
            return None
        pod = metric.get(pod_label) or ""
        namespace = metric.get(ns_label) or ""
        if pod and not namespace:
            skip("pod_without_namespace")
            return None
        return key, str(namespace), str(pod)

    for metric_key in c.DCGM_METRICS:
        items = inp.dcgm_avg.get(metric_key) or []
        if not isinstance(items, list):
            skip("malformed_metric_result")
            continue
        stats.records_read += len(items)
        for metric, value in _samples(items, stats):
            ident = identify(metric, True)
            if ident is None:
                continue
            entry = series.get(ident)
            if entry is None:
                pod = ident[2]
                container = str(metric.get(container_label) or "") if pod else ""
                entry = series[ident] = _Series(ident[0], ident[1], pod, container)
            previous = entry.chosen.get(metric_key)
            if previous is not None:
                # Two series for one GPU, pod and metric (two scrape jobs, a relabelled copy):
                # keep the one whose sorted labels come first, whatever the answer's order.
                skip("duplicate_series")
                if _label_sort_key(metric) >= _label_sort_key(previous):
                    continue
            entry.chosen[metric_key] = metric
            if value is None:
                entry.values.pop(metric_key, None)
            else:
                entry.values[metric_key] = value

    for metric_key, items in (inp.dcgm_count or {}).items():
        if metric_key not in c.DCGM_METRICS or not isinstance(items, list):
            skip("malformed_metric_result")
            continue
        stats.records_read += len(items)
        for metric, value in _samples(items, stats):
            if value is None:
                continue
            if value < 0:
                skip("negative_count")
                continue
            ident = identify(metric, False)
            if ident is None:
                continue
            entry = series.get(ident)
            if entry is None:
                # Samples counted but none averaged (all NaN): no telemetry, nothing to attach to.
                continue
            previous = entry.count_chosen.get(metric_key)
            if previous is not None:
                skip("duplicate_series")
                if _label_sort_key(metric) >= _label_sort_key(previous):
                    continue
            entry.counts[metric_key] = value
            entry.count_chosen[metric_key] = metric
    return gpus, series


@dataclass
class _PodRequest:
    namespace: str
    pod: str
    uid: str
    node: str
    gpus: float = 0.0
    # resource (k8s spelling) -> GPUs
    resources: dict[str, float] = field(default_factory=dict)
    containers: set[str] = field(default_factory=set)


def _k8s_resource(ksm_resource: str) -> tuple[str, int] | None:
    """('nvidia.com/gpu', 7) or ('nvidia.com/mig-1g.10gb', 1) for a kube-state-metrics name."""
    if ksm_resource == c.KSM_RESOURCE_GPU:
        return GPU_RESOURCE, MIG_COMPUTE_SLICES
    if ksm_resource.startswith(c.KSM_RESOURCE_MIG_PREFIX):
        # kube-state-metrics turns every character outside [a-zA-Z0-9_] into "_":
        # 1g.10gb -> 1g_10gb, 1g.10gb+me -> 1g_10gb_me. Undo the first one, which is the dot.
        profile = ksm_resource[len(c.KSM_RESOURCE_MIG_PREFIX) :].replace("_", ".", 1)
        slices = mig_slices(profile)
        if slices is None:
            return None
        return MIG_RESOURCE_PREFIX + profile, slices
    return None


def _collect_requests(
    items: list[dict], stats: IngestStats
) -> dict[tuple[str, str, str], _PodRequest]:
    seen: dict[tuple[str, str, str, str, str], dict] = {}
    values: dict[tuple[str, str, str, str, str], float] = {}
    nodes: dict[tuple[str, str, str, str, str], str] = {}
    if not isinstance(items, list):
        stats.skip("malformed_metric_result")
        return {}
    stats.records_read += len(items)
    for item in items:
        sample = _sample(item, stats)
        if sample is None:
            continue
        metric, value = sample
        if value is None:
            continue
        namespace = metric.get(c.LABEL_NAMESPACE) or ""
        pod = metric.get(c.LABEL_POD) or ""
        resource = metric.get(c.KSM_LABEL_RESOURCE) or ""
        if not namespace or not pod or not resource:
            stats.skip("request_missing_labels")
            continue
        node = metric.get(c.KSM_LABEL_NODE) or ""
        if not node:
            # Not scheduled: a pending pod holds nothing (fixture: team-b/resnet-eval-0-q7z4t).
            stats.pending_requests += 1
            continue
        if value <= 0:
            stats.skip("request_not_positive")
            continue
        ident = (
            str(namespace),
            str(pod),
            str(metric.get(c.KSM_LABEL_UID) or ""),
            str(metric.get(c.LABEL_CONTAINER) or ""),
            str(resource),
        )
        previous = seen.get(ident)
        if previous is not None:
            # Two kube-state-metrics replicas scraped side by side: count the container once.
            stats.skip("duplicate_series")
            if _label_sort_key(metric) >= _label_sort_key(previous):
                continue
        seen[ident] = metric
        values[ident] = value
        nodes[ident] = str(node)

    pods: dict[tuple[str, str, str], _PodRequest] = {}
    for ident in sorted(values):
        namespace, pod, uid, container, ksm_resource = ident
        resolved = _k8s_resource(ksm_resource)
        if resolved is None:
            stats.skip("request_unknown_resource")
            continue
        resource, slices = resolved
        gpus = values[ident] * slices / MIG_COMPUTE_SLICES
        entry = pods.get((namespace, pod, uid))
        if entry is None:
            entry = _PodRequest(namespace=namespace, pod=pod, uid=uid, node=nodes[ident])
            pods[(namespace, pod, uid)] = entry
        entry.gpus += gpus
        entry.resources[resource] = entry.resources.get(resource, 0.0) + gpus
        if container:
            entry.containers.add(container)
    return pods


def _collect_pod_labels(
    items: list[dict],
    stats: IngestStats,
) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(namespace, pod) -> (uid, cluster queue, local queue)."""
    if not isinstance(items, list):
        stats.skip("malformed_metric_result")
        return {}
    stats.records_read += len(items)
    found: dict[tuple[str, str], list[tuple[str, str, str]]] = defaultdict(list)
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            stats.skip("missing_metric")
            continue
        metric = item["metric"]
        namespace = metric.get(c.LABEL_NAMESPACE) or ""
        pod = metric.get(c.LABEL_POD) or ""
        if not namespace or not pod:
            stats.skip("pod_labels_missing_labels")
            continue
        cluster_queue = metric.get(c.KSM_LABEL_CLUSTER_QUEUE) or ""
        local_queue = (
            metric.get(c.KSM_LABEL_LOCAL_QUEUE) or metric.get(c.KSM_LABEL_QUEUE_NAME) or ""
        )
        found[(str(namespace), str(pod))].append(
            (str(metric.get(c.KSM_LABEL_UID) or ""), str(cluster_queue), str(local_queue))
        )
    # Several answers for one pod (kube-state-metrics replicas, a recreated pod): prefer the one
    # naming queues, then the highest sorted tuple, so the choice does not depend on order.
    return {
        ident: max(options, key=lambda o: (bool(o[1] or o[2]), o))
        for ident, options in found.items()
    }


def build_window(inp: WindowInput) -> WindowBatch:
    """Turn one window's Prometheus answers into GPU, usage and allocation rows."""
    with _gc_paused():
        return _build_window(inp)


def _build_window(inp: WindowInput) -> WindowBatch:
    stats = IngestStats()
    style = _resolve_style(inp)
    gpus, series = _collect_dcgm(inp, style, stats)
    requests = _collect_requests(inp.gpu_requests, stats)
    labels = _collect_pod_labels(inp.pod_labels, stats)

    # Per GPU: the pods seen on it. A GPU seen with pods and also without (a pod started or
    # ended inside the window) is held: the pod series win and the bare series is dropped.
    by_gpu: dict[str, list[_Series]] = defaultdict(list)
    for entry in series.values():
        by_gpu[entry.gpu].append(entry)

    requests_by_pod: dict[tuple[str, str], list[_PodRequest]] = defaultdict(list)
    for request in requests.values():
        requests_by_pod[(request.namespace, request.pod)].append(request)

    # What the rows of a pod share, worked out once per pod (a pod holds several GPUs):
    # uid, node (None: no request names one), cluster queue, local queue.
    pod_facts: dict[tuple[str, str], tuple[str, str | None, str, str]] = {}

    def facts_of(ident: tuple[str, str]) -> tuple[str, str | None, str, str]:
        facts = pod_facts.get(ident)
        if facts is None:
            label = labels.get(ident)
            pod_requests = requests_by_pod.get(ident)
            if pod_requests:
                # A recreated pod with the same name: the uid with the most GPUs, then the highest.
                uid = max(pod_requests, key=lambda r: (r.gpus, r.uid)).uid
                node: str | None = pod_requests[0].node
            else:
                uid = label[0] if label else ""
                node = None
            if label:
                facts = (uid, node, label[1], label[2])
            else:
                facts = (uid, node, "", "")
            pod_facts[ident] = facts
        return facts

    def pod_uid(namespace: str, pod: str) -> str:
        return facts_of((namespace, pod))[0]

    def queues(namespace: str, pod: str) -> tuple[str, str]:
        facts = facts_of((namespace, pod))
        return facts[2], facts[3]

    usage: list[UsageRow] = []
    # (namespace, pod) -> GPU keys it was seen on, and the GPUs those stand for.
    seen_gpus: dict[tuple[str, str], list[str]] = defaultdict(list)
    seen_fraction: dict[tuple[str, str], float] = defaultdict(float)
    hosts_with_series: set[str] = set()
    expected = max(int(inp.expected_samples or 0), 0)
    sources = {metric_key: ActivitySource(metric_key) for metric_key in c.ACTIVITY_METRICS}

    for key, entries in by_gpu.items():
        gpu = gpus[key]
        host = gpu.host
        hosts_with_series.add(host)
        if len(entries) > 1:
            held = [e for e in entries if e.pod]
            if held:
                dropped = len(entries) - len(held)
                if dropped:
                    logger.debug(
                        "GPU %s: %d series without pod dropped for pod series", key, dropped
                    )
                entries = sorted(held, key=lambda e: (e.namespace, e.pod))
            else:
                # Cannot happen: series without a pod share one identity per GPU.
                entries = entries[:1]
        shared = len(entries) > 1
        gpu.time_sliced = shared
        fraction = gpu.fraction
        share = fraction / len(entries)
        for position, entry in enumerate(entries):
            values = entry.values
            activity = None
            source = ActivitySource.NONE
            samples = 0
            for activity_key in c.ACTIVITY_METRICS:
                if activity_key in values:
                    activity = values[activity_key]
                    source = sources[activity_key]
                    samples = int(entry.counts.get(activity_key, 1))
                    break
            namespace = entry.namespace
            pod = entry.pod
            if pod:
                ident = (namespace, pod)
                uid, node, cluster_queue, local_queue = facts_of(ident)
                node_name = host if node is None else node
                seen_gpus[ident].append(key)
                seen_fraction[ident] += fraction
            else:
                # No pod labels: unallocated, and no pod to name a uid, node or queue.
                uid = cluster_queue = local_queue = ""
                node_name = host
            usage.append(
                UsageRow(
                    gpu_key=key,
                    host=host,
                    uuid=gpu.uuid,
                    gi_id=gpu.gi_id,
                    namespace=namespace,
                    pod=pod,
                    container=entry.container,
                    pod_uid=uid,
                    node_name=node_name,
                    allocated=bool(pod),
                    gpus=share,
                    capacity_gpus=fraction if position == 0 else 0.0,
                    shared=shared,
                    sm_active=values.get("sm_active"),
                    pipe_tensor_active=values.get("pipe_tensor_active"),
                    dram_active=values.get("dram_active"),
                    gr_engine_active=values.get("gr_engine_active"),
                    gpu_util=values.get("gpu_util"),
                    fb_used_mib=values.get("fb_used"),
                    activity=activity,
                    activity_source=source,
                    samples=samples,
                    expected_samples=expected,
                    cluster_queue_name=cluster_queue,
                    local_queue_name=local_queue,
                )
            )

    allocations: list[PodAllocationRow] = []
    for (namespace, pod), pod_requests in requests_by_pod.items():
        cluster_queue, local_queue = queues(namespace, pod)
        keys = sorted(seen_gpus.get((namespace, pod), []))
        for request in pod_requests:
            resource = max(request.resources.items(), key=lambda kv: (kv[1], kv[0]))[0]
            allocations.append(
                PodAllocationRow(
                    namespace=namespace,
                    pod=pod,
                    pod_uid=request.uid,
                    node_name=request.node,
                    resource=resource,
                    gpus=request.gpus,
                    gpu_keys=keys,
                    cluster_queue_name=cluster_queue,
                    local_queue_name=local_queue,
                )
            )
        # Requested but not (all) on DCGM series: allocated without telemetry. A recreated pod
        # name counts once, with its largest request.
        requested = max(r.gpus for r in pod_requests)
        missing = requested - seen_fraction.get((namespace, pod), 0.0)
        if missing > _EPSILON:
            request = max(pod_requests, key=lambda r: (r.gpus, r.uid))
            usage.append(
                UsageRow(
                    gpu_key="",
                    host="",
                    uuid="",
                    gi_id="",
                    namespace=namespace,
                    pod=pod,
                    container=min(request.containers) if request.containers else "",
                    pod_uid=request.uid,
                    node_name=request.node,
                    allocated=True,
                    gpus=missing,
                    # A node with no DCGM series at all (exporter down) has its GPUs counted
                    # nowhere else; on a node with series they are already counted there.
                    capacity_gpus=0.0 if request.node in hosts_with_series else missing,
                    expected_samples=expected,
                    cluster_queue_name=cluster_queue,
                    local_queue_name=local_queue,
                )
            )

    for (namespace, pod), keys in seen_gpus.items():
        if (namespace, pod) in requests_by_pod:
            continue
        # On DCGM series but not in the requests: still held (see the module docstring).
        held_keys = sorted(keys)
        profiles = sorted(gpus[k].mig_profile for k in held_keys if gpus[k].gi_id)
        resource = (
            MIG_RESOURCE_PREFIX + profiles[0] if len(profiles) == len(held_keys) else GPU_RESOURCE
        )
        cluster_queue, local_queue = queues(namespace, pod)
        allocations.append(
            PodAllocationRow(
                namespace=namespace,
                pod=pod,
                pod_uid=pod_uid(namespace, pod),
                node_name=gpus[held_keys[0]].host,
                resource=resource,
                gpus=sum(gpus[k].fraction for k in held_keys),
                gpu_keys=held_keys,
                cluster_queue_name=cluster_queue,
                local_queue_name=local_queue,
            )
        )

    if stats.skipped or stats.nonfinite_skipped:
        logger.warning(
            "window %s: read %d records, skipped %d malformed %s and %d non-finite",
            inp.window.end.isoformat(),
            stats.records_read,
            stats.skipped,
            dict(stats.skip_reasons),
            stats.nonfinite_skipped,
        )

    return WindowBatch(
        window=inp.window,
        gpus=sorted((gpus[key] for key in by_gpu), key=_gpu_order),
        usage=sorted(usage, key=lambda r: (r.gpu_key, r.namespace, r.pod)),
        allocations=sorted(allocations, key=lambda a: (a.namespace, a.pod, a.pod_uid)),
        stats=stats,
        label_style_used=style,
    )


def _gpu_order(gpu: GpuRow) -> tuple:
    gi = int(gpu.gi_id) if gpu.gi_id.isdigit() else -1
    return (gpu.host, gpu.index, gi, gpu.uuid, gpu.gi_id)
