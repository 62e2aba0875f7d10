"""One window's answers -> GPU, usage and allocation rows (``build_window``).

Series of one GPU are shared among its pods; requests without (all their) DCGM series become
allocated rows without telemetry, and pods on DCGM series missing from the requests are still
allocated (see the package docstring).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from core.mig import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from fleet import constants as c
from fleet.choices import ActivitySource
from fleet.ingest.answers import gc_paused
from fleet.ingest.dcgm import DcgmSeries, collect_dcgm, resolve_style
from fleet.ingest.kube_state import (
    PodRequest,
    collect_pod_labels,
    collect_pod_owners,
    collect_requests,
)
from fleet.ingest.rows import (
    GpuRow,
    IngestStats,
    PodAllocationRow,
    UsageRow,
    WindowBatch,
    WindowInput,
)

logger = logging.getLogger(__name__)

# Shares below this are float noise from subtracting GPU fractions.
_EPSILON = 1e-9


def build_window(inp: WindowInput) -> WindowBatch:
    """Turn one window's Prometheus answers into GPU, usage and allocation rows."""
    with gc_paused():
        return _build_window(inp)


def _build_window(inp: WindowInput) -> WindowBatch:
    stats = IngestStats()
    style = resolve_style(inp)
    gpus, series = collect_dcgm(inp, style, stats)
    requests = collect_requests(inp.gpu_requests, stats)
    labels = collect_pod_labels(inp.pod_labels, stats)
    owners = collect_pod_owners(
        inp.pod_owners, inp.job_owners, inp.pod_labels, stats, inp.pod_groups
    )

    # Per GPU: the pods seen on it. A GPU seen with pods and also without (a pod started or
    # ended inside the window) is held: the pod series win and the bare series is dropped.
    by_gpu: dict[str, list[DcgmSeries]] = defaultdict(list)
    for entry in series.values():
        by_gpu[entry.gpu].append(entry)

    requests_by_pod: dict[tuple[str, str], list[PodRequest]] = defaultdict(list)
    for request in requests.values():
        requests_by_pod[(request.namespace, request.pod)].append(request)

    facts = _PodFacts(labels, requests_by_pod)
    expected = max(int(inp.expected_samples or 0), 0)
    usage, seen = _usage_on_series(by_gpu, gpus, facts, expected)
    allocations = _requested_allocations(requests_by_pod, facts, seen, expected, usage)
    allocations += _unrequested_allocations(requests_by_pod, facts, seen, gpus)
    _log_skips(inp, stats)
    return WindowBatch(
        window=inp.window,
        gpus=sorted((gpus[key] for key in by_gpu), key=_gpu_order),
        usage=sorted(usage, key=lambda r: (r.gpu_key, r.namespace, r.pod)),
        allocations=sorted(allocations, key=lambda a: (a.namespace, a.pod, a.pod_uid)),
        stats=stats,
        label_style_used=style,
        owners=owners,
    )


class _PodFacts:
    """What the rows of a pod share, worked out once per pod (a pod holds several GPUs):
    uid, node (None: no request names one), cluster queue, local queue."""

    def __init__(
        self,
        labels: dict[tuple[str, str], tuple[str, str, str]],
        requests_by_pod: dict[tuple[str, str], list[PodRequest]],
    ) -> None:
        self.labels = labels
        self.requests_by_pod = requests_by_pod
        self.known: dict[tuple[str, str], tuple[str, str | None, str, str]] = {}

    def of(self, ident: tuple[str, str]) -> tuple[str, str | None, str, str]:
        facts = self.known.get(ident)
        if facts is None:
            label = self.labels.get(ident)
            pod_requests = self.requests_by_pod.get(ident)
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
            self.known[ident] = facts
        return facts

    def uid(self, ident: tuple[str, str]) -> str:
        return self.of(ident)[0]

    def queues(self, ident: tuple[str, str]) -> tuple[str, str]:
        facts = self.of(ident)
        return facts[2], facts[3]


@dataclass
class _Seen:
    """What the DCGM series showed: per pod, the GPU keys it was seen on and the GPUs those
    stand for; the hosts with any series."""

    gpus: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    fraction: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    hosts: set[str] = field(default_factory=set)


def _held_entries(key: str, entries: list[DcgmSeries]) -> list[DcgmSeries]:
    """The series that count for one GPU: its pod series when it has any besides a bare one."""
    if len(entries) <= 1:
        return entries
    held = [e for e in entries if e.pod]
    if not held:
        # Cannot happen: series without a pod share one identity per GPU.
        return entries[:1]
    dropped = len(entries) - len(held)
    if dropped:
        logger.debug("GPU %s: %d series without pod dropped for pod series", key, dropped)
    return sorted(held, key=lambda e: (e.namespace, e.pod))


def _usage_on_series(
    by_gpu: dict[str, list[DcgmSeries]],
    gpus: dict[str, GpuRow],
    facts: _PodFacts,
    expected: int,
) -> tuple[list[UsageRow], _Seen]:
    """One usage row per series that counts; a time-sliced GPU's share is split among its pods."""
    usage: list[UsageRow] = []
    seen = _Seen()
    sources = {metric_key: ActivitySource(metric_key) for metric_key in c.ACTIVITY_METRICS}
    for key, all_entries in by_gpu.items():
        gpu = gpus[key]
        host = gpu.host
        seen.hosts.add(host)
        entries = _held_entries(key, all_entries)
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
                uid, node, cluster_queue, local_queue = facts.of(ident)
                node_name = host if node is None else node
                seen.gpus[ident].append(key)
                seen.fraction[ident] += fraction
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
    return usage, seen


def _requested_allocations(
    requests_by_pod: dict[tuple[str, str], list[PodRequest]],
    facts: _PodFacts,
    seen: _Seen,
    expected: int,
    usage: list[UsageRow],
) -> list[PodAllocationRow]:
    """One allocation per GPU request; GPUs requested but not (all) on DCGM series are added to
    ``usage`` as allocated rows without telemetry."""
    allocations: list[PodAllocationRow] = []
    for (namespace, pod), pod_requests in requests_by_pod.items():
        cluster_queue, local_queue = facts.queues((namespace, pod))
        keys = sorted(seen.gpus.get((namespace, pod), []))
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
        missing = requested - seen.fraction.get((namespace, pod), 0.0)
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
                    capacity_gpus=0.0 if request.node in seen.hosts else missing,
                    expected_samples=expected,
                    cluster_queue_name=cluster_queue,
                    local_queue_name=local_queue,
                )
            )
    return allocations


def _unrequested_allocations(
    requests_by_pod: dict[tuple[str, str], list[PodRequest]],
    facts: _PodFacts,
    seen: _Seen,
    gpus: dict[str, GpuRow],
) -> list[PodAllocationRow]:
    """Pods on DCGM series but not in the requests: still held (see the module docstring)."""
    allocations: list[PodAllocationRow] = []
    for (namespace, pod), keys in seen.gpus.items():
        if (namespace, pod) in requests_by_pod:
            continue
        held_keys = sorted(keys)
        profiles = sorted(gpus[k].mig_profile for k in held_keys if gpus[k].gi_id)
        resource = (
            MIG_RESOURCE_PREFIX + profiles[0] if len(profiles) == len(held_keys) else GPU_RESOURCE
        )
        cluster_queue, local_queue = facts.queues((namespace, pod))
        allocations.append(
            PodAllocationRow(
                namespace=namespace,
                pod=pod,
                pod_uid=facts.uid((namespace, pod)),
                node_name=gpus[held_keys[0]].host,
                resource=resource,
                gpus=sum(gpus[k].fraction for k in held_keys),
                gpu_keys=held_keys,
                cluster_queue_name=cluster_queue,
                local_queue_name=local_queue,
            )
        )
    return allocations


def _log_skips(inp: WindowInput, stats: IngestStats) -> None:
    if stats.skipped or stats.nonfinite_skipped:
        logger.warning(
            "window %s: read %d records, skipped %d malformed %s and %d non-finite",
            inp.window.end.isoformat(),
            stats.records_read,
            stats.skipped,
            dict(stats.skip_reasons),
            stats.nonfinite_skipped,
        )


def _gpu_order(gpu: GpuRow) -> tuple:
    gi = int(gpu.gi_id) if gpu.gi_id.isdigit() else -1
    return (gpu.host, gpu.index, gi, gpu.uuid, gpu.gi_id)
