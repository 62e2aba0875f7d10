"""One window's answers -> GPU, usage and allocation rows (``build_window``).

Series of one GPU are shared among its pods; requests without (all their) DCGM series become
allocated rows without telemetry, and pods on DCGM series missing from the requests are still
allocated (see the package docstring).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
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
    owners = collect_pod_owners(inp.pod_owners, inp.job_owners, inp.pod_labels, stats)

    # Per GPU: the pods seen on it. A GPU seen with pods and also without (a pod started or
    # ended inside the window) is held: the pod series win and the bare series is dropped.
    by_gpu: dict[str, list[DcgmSeries]] = defaultdict(list)
    for entry in series.values():
        by_gpu[entry.gpu].append(entry)

    pods = _Pods(requests.values(), labels)
    expected = max(int(inp.expected_samples or 0), 0)
    seen = _series_usage(gpus, by_gpu, pods, expected)
    allocations, unseen = _requested(pods, seen, expected)
    allocations += _unrequested(gpus, pods, seen)

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
        usage=sorted(seen.usage + unseen, key=lambda r: (r.gpu_key, r.namespace, r.pod)),
        allocations=sorted(allocations, key=lambda a: (a.namespace, a.pod, a.pod_uid)),
        stats=stats,
        label_style_used=style,
        owners=owners,
    )


class _Pods:
    """The window's pods: their GPU requests, and what the rows of a pod share, worked out once
    per pod (a pod holds several GPUs): uid, node (None: no request names one), cluster queue,
    local queue."""

    def __init__(
        self,
        requests: Iterable[PodRequest],
        labels: Mapping[tuple[str, str], tuple[str, str, str]],
    ) -> None:
        self.requests: dict[tuple[str, str], list[PodRequest]] = defaultdict(list)
        for request in requests:
            self.requests[(request.namespace, request.pod)].append(request)
        self._labels = labels
        self._facts: dict[tuple[str, str], tuple[str, str | None, str, str]] = {}

    def facts(self, ident: tuple[str, str]) -> tuple[str, str | None, str, str]:
        facts = self._facts.get(ident)
        if facts is None:
            label = self._labels.get(ident)
            pod_requests = self.requests.get(ident)
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
            self._facts[ident] = facts
        return facts

    def queues(self, ident: tuple[str, str]) -> tuple[str, str]:
        facts = self.facts(ident)
        return facts[2], facts[3]


@dataclass
class _Seen:
    """The usage rows of the DCGM series, and what they tell about pods and hosts."""

    usage: list[UsageRow] = field(default_factory=list)
    # (namespace, pod) -> GPU keys it was seen on, and the GPUs those stand for.
    gpus: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    fraction: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    hosts: set[str] = field(default_factory=set)


def _series_usage(
    gpus: Mapping[str, GpuRow],
    by_gpu: Mapping[str, list[DcgmSeries]],
    pods: _Pods,
    expected: int,
) -> _Seen:
    """One usage row per GPU and pod seen on it; a time-sliced GPU is split among its pods."""
    seen = _Seen()
    # Locals in the loop: it runs once per GPU and pod (50,000 a window at the largest).
    usage, seen_gpus, seen_fraction, facts_of = seen.usage, seen.gpus, seen.fraction, pods.facts
    sources = {metric_key: ActivitySource(metric_key) for metric_key in c.ACTIVITY_METRICS}
    for key, entries in by_gpu.items():
        gpu = gpus[key]
        host = gpu.host
        seen.hosts.add(host)
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
    return seen


def _requested(
    pods: _Pods, seen: _Seen, expected: int
) -> tuple[list[PodAllocationRow], list[UsageRow]]:
    """An allocation per GPU request, and a usage row without telemetry for the GPUs a pod
    requested beyond those it was seen on."""
    allocations: list[PodAllocationRow] = []
    usage: list[UsageRow] = []
    for (namespace, pod), pod_requests in pods.requests.items():
        cluster_queue, local_queue = pods.queues((namespace, pod))
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
    return allocations, usage


def _unrequested(gpus: Mapping[str, GpuRow], pods: _Pods, seen: _Seen) -> list[PodAllocationRow]:
    """Pods on DCGM series but not in the requests: still held (see the module docstring)."""
    allocations = []
    for (namespace, pod), keys in seen.gpus.items():
        if (namespace, pod) in pods.requests:
            continue
        held_keys = sorted(keys)
        profiles = sorted(gpus[k].mig_profile for k in held_keys if gpus[k].gi_id)
        resource = (
            MIG_RESOURCE_PREFIX + profiles[0] if len(profiles) == len(held_keys) else GPU_RESOURCE
        )
        cluster_queue, local_queue = pods.queues((namespace, pod))
        allocations.append(
            PodAllocationRow(
                namespace=namespace,
                pod=pod,
                pod_uid=pods.facts((namespace, pod))[0],
                node_name=gpus[held_keys[0]].host,
                resource=resource,
                gpus=sum(gpus[k].fraction for k in held_keys),
                gpu_keys=held_keys,
                cluster_queue_name=cluster_queue,
                local_queue_name=local_queue,
            )
        )
    return allocations


def _gpu_order(gpu: GpuRow) -> tuple:
    gi = int(gpu.gi_id) if gpu.gi_id.isdigit() else -1
    return (gpu.host, gpu.index, gi, gpu.uuid, gpu.gi_id)
