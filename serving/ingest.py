"""Answers of one serving hour -> figures per workload (pure, no I/O).

A pod is in the hour when its server's presence series has samples in it. Its coverage is its
sample count over the best-covered serving pod's of the cluster and hour (the scrape interval
is not visible through the query API; the collector's DCGM coverage uses the same rule). Its
workload is, in order: the KServe InferenceService or LeaderWorkerSet its labels name (when
kube-state-metrics allowlists those labels), the Deployment of its ReplicaSet, its other
controller (StatefulSet, ...), else the pod itself. The hourly definitions are in README
"Serving: metrics"; a figure no pod of the workload exposes stays None ("no serving
telemetry"), never 0.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from core.mig import gpu_share
from fleet.ingest.rows import IngestStats
from servicelevels.metrics import bucket_quantile
from serving import constants as c
from serving import queries as q

PodKey = tuple[str, str]
WorkloadKey = tuple[str, str, str]  # namespace, kind, name

HOUR_SECONDS = 3600.0
QUANTILES = {"p50": 0.5, "p95": 0.95}


@dataclass
class ServingFigures:
    """One workload's figures for one hour (field names as ``serving.models.ServingHour``)."""

    server_kind: str
    replicas_seen: int
    replica_hours: float
    seconds_with_data: int
    gpu_hours: float | None = None
    # Filled in by ``serving.dcgm.attach_activity`` from the usage store, not from these answers.
    active_gpu_hours: float | None = None
    telemetry_gpu_hours: float | None = None
    requests_per_second: float | None = None
    prompt_tokens_per_second: float | None = None
    output_tokens_per_second: float | None = None
    mean_running: float | None = None
    mean_waiting: float | None = None
    kv_cache_mean: float | None = None
    kv_cache_max: float | None = None
    ttft_p50_seconds: float | None = None
    ttft_p95_seconds: float | None = None
    itl_p50_seconds: float | None = None
    itl_p95_seconds: float | None = None
    e2e_p95_seconds: float | None = None
    # The workload's pods in the hour (not a stored column: ``row_values`` leaves it out).
    pods: tuple[PodKey, ...] = field(default=(), repr=False)

    def row_values(self) -> dict[str, Any]:
        """The figures as ``ServingHour`` fields."""
        values = asdict(self)
        del values["pods"]
        return values


@dataclass
class _Pod:
    server: str
    samples: float
    coverage: float = 0.0


def _finite(item: object, stats: IngestStats) -> tuple[dict[str, str], float] | None:
    """(labels, value) of one instant-vector item; None (counted) for malformed or NaN."""
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        stats.skip("malformed_item")
        return None
    try:
        value = float(item["value"][1])
    except (KeyError, TypeError, ValueError, IndexError):
        stats.skip("malformed_value")
        return None
    if not math.isfinite(value):
        stats.skip("nonfinite_value")
        return None
    return {str(k): str(v) for k, v in item["metric"].items()}, value


def _by_pod(items: object, stats: IngestStats) -> dict[tuple[str, str, str], float]:
    """(namespace, pod, server) -> value; items without those labels are skipped."""
    found: dict[tuple[str, str, str], float] = {}
    if not isinstance(items, list):
        stats.skip("malformed_answer")
        return found
    stats.records_read += len(items)
    for item in items:
        parsed = _finite(item, stats)
        if parsed is None:
            continue
        labels, value = parsed
        key = (
            labels.get(c.LABEL_NAMESPACE, ""),
            labels.get(c.LABEL_POD, ""),
            labels.get(c.LABEL_SERVER, ""),
        )
        if not all(key):
            stats.skip("missing_pod_labels")
            continue
        found[key] = value
    return found


def _pods(answers: Mapping[str, object], stats: IngestStats) -> dict[PodKey, _Pod]:
    pods: dict[PodKey, _Pod] = {}
    for (namespace, pod, server), samples in sorted(
        _by_pod(answers.get(q.PRESENCE, []), stats).items()
    ):
        if samples <= 0 or server not in c.SERVERS_BY_KIND:
            continue
        current = pods.get((namespace, pod))
        # A pod answering as two servers (both name sets): the better-covered one, by name on
        # a tie, so the choice does not depend on answer order.
        if current is None or (samples, server) > (current.samples, current.server):
            pods[(namespace, pod)] = _Pod(server, samples)
    expected = max((pod.samples for pod in pods.values()), default=0.0)
    for found in pods.values():
        found.coverage = min(1.0, found.samples / expected)
    return pods


def _pod_values(
    answers: Mapping[str, object], name: str, pods: Mapping[PodKey, _Pod], stats: IngestStats
) -> dict[PodKey, float]:
    """Values of one per-pod answer, for pods of the hour and their own server only."""
    values: dict[PodKey, float] = {}
    for (namespace, pod, server), value in _by_pod(answers.get(name, []), stats).items():
        found = pods.get((namespace, pod))
        if found is not None and found.server == server:
            values[(namespace, pod)] = value
    return values


def _labels(items: object, stats: IngestStats) -> Iterable[tuple[dict[str, str], float]]:
    if not isinstance(items, list):
        stats.skip("malformed_answer")
        return
    stats.records_read += len(items)
    for item in items:
        parsed = _finite(item, stats)
        if parsed is not None:
            yield parsed


def resolve_workloads(
    answers: Mapping[str, object], pods: Iterable[PodKey], stats: IngestStats
) -> tuple[dict[PodKey, WorkloadKey], dict[WorkloadKey, WorkloadKey]]:
    """(namespace, pod) -> (namespace, kind, name) of the workload it serves; see the module
    docstring for the order. Several answers for one pod keep the highest sorted one.

    Also (namespace, controller kind, controller name) -> workload, for the histograms summed
    per controller (``serving.queries.histogram_query``); every pod is also its own
    (kind ``Pod``), the grouping of a pod without a controller at the hour's end."""
    labelled: dict[PodKey, tuple[str, str]] = {}
    for labels, _ in _labels(answers.get(q.POD_LABELS, []), stats):
        key = (labels.get(c.LABEL_NAMESPACE, ""), labels.get(c.LABEL_POD, ""))
        if labels.get(c.KSM_LABEL_KSERVE):
            found = ("InferenceService", labels[c.KSM_LABEL_KSERVE])
        elif labels.get(c.KSM_LABEL_LWS):
            found = ("LeaderWorkerSet", labels[c.KSM_LABEL_LWS])
        else:
            continue
        labelled[key] = max(labelled.get(key, found), found)
    deployments: dict[tuple[str, str], tuple[str, str]] = {}
    for labels, _ in _labels(answers.get(q.REPLICASET_OWNERS, []), stats):
        kind, name = labels.get("owner_kind", ""), labels.get("owner_name", "")
        key = (labels.get(c.LABEL_NAMESPACE, ""), labels.get("replicaset", ""))
        if kind and name and all(key):
            deployments[key] = max(deployments.get(key, (kind, name)), (kind, name))
    owners: dict[PodKey, tuple[str, str]] = {}
    controllers: dict[PodKey, set[tuple[str, str]]] = defaultdict(set)
    for labels, _ in _labels(answers.get(q.OWNERS, []), stats):
        kind, name = labels.get("owner_kind", ""), labels.get("owner_name", "")
        key = (labels.get(c.LABEL_NAMESPACE, ""), labels.get(c.LABEL_POD, ""))
        if not kind or not name or kind == "<none>":
            continue
        controllers[key].add((kind, name))
        if kind == "ReplicaSet":
            kind, name = deployments.get((key[0], name), (kind, name))
        owners[key] = max(owners.get(key, (kind, name)), (kind, name))
    resolved: dict[PodKey, WorkloadKey] = {}
    by_controller: dict[WorkloadKey, WorkloadKey] = {}
    for namespace, pod in pods:
        kind, name = labelled.get((namespace, pod)) or owners.get((namespace, pod)) or ("Pod", pod)
        workload = resolved[(namespace, pod)] = (namespace, kind, name)
        # A pod is grouped by its controller if it was alive at the hour's end, else as itself.
        for controller_kind, controller_name in controllers.get((namespace, pod), set()) | {
            ("Pod", pod)
        }:
            by_controller[(namespace, controller_kind, controller_name)] = workload
    return resolved, by_controller


def _gpus(
    answers: Mapping[str, object], pods: Mapping[PodKey, _Pod], stats: IngestStats
) -> dict[PodKey, float]:
    gpus: dict[PodKey, float] = defaultdict(float)
    for labels, value in _labels(answers.get(q.GPUS, []), stats):
        key = (labels.get(c.LABEL_NAMESPACE, ""), labels.get(c.LABEL_POD, ""))
        resource = labels.get("resource", "")
        # kube-state-metrics writes nvidia.com/mig-1g.10gb as nvidia_com_mig_1g_10gb.
        if resource.startswith("nvidia_com_mig_"):
            resource = "nvidia.com/mig-" + resource[len("nvidia_com_mig_") :].replace("_", ".", 1)
        elif resource == "nvidia_com_gpu":
            resource = "nvidia.com/gpu"
        share = gpu_share(resource)
        if share is None:
            stats.skip("unknown_gpu_resource")
            continue
        if key in pods:
            gpus[key] += value * share
    return gpus


def _buckets(
    answers: Mapping[str, object],
    figure: str,
    by_controller: Mapping[WorkloadKey, WorkloadKey],
    stats: IngestStats,
) -> dict[WorkloadKey, dict[float, float]]:
    """Per workload: bucket upper bound in seconds -> increase over the hour, from the answer
    summed per pod controller and server."""
    buckets: dict[WorkloadKey, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for labels, value in _labels(answers.get(figure, []), stats):
        controller = (
            labels.get(c.LABEL_NAMESPACE, ""),
            labels.get("owner_kind", ""),
            labels.get("owner_name", ""),
        )
        workload = by_controller.get(controller)
        server = c.SERVERS_BY_KIND.get(labels.get(c.LABEL_SERVER, ""))
        if workload is None or server is None:
            continue
        try:
            bound = float(labels.get(c.LABEL_LE, ""))
        except ValueError:
            stats.skip("malformed_le")
            continue
        histograms = getattr(server, figure)
        if not math.isinf(bound) and histograms:
            bound *= histograms[0].seconds_per_unit
        buckets[workload][bound] += value
    return buckets


def build_hour(answers: Mapping[str, Any]) -> tuple[dict[WorkloadKey, ServingFigures], IngestStats]:
    """The figures of every workload that had serving telemetry in the hour."""
    stats = IngestStats()
    pods = _pods(answers, stats)
    if not pods:
        return {}, stats
    workloads, by_controller = resolve_workloads(answers, pods, stats)
    values = {
        name: _pod_values(answers, name, pods, stats)
        for name in (*c.COUNTERS, *c.GAUGES, q.KV_MEAN, q.KV_MAX)
    }
    gpus = _gpus(answers, pods, stats)
    buckets = {figure: _buckets(answers, figure, by_controller, stats) for figure in c.HISTOGRAMS}
    members: dict[WorkloadKey, list[PodKey]] = defaultdict(list)
    for pod_key, workload in workloads.items():
        members[workload].append(pod_key)
    figures: dict[WorkloadKey, ServingFigures] = {}
    for workload, keys in sorted(members.items()):
        histograms = {figure: buckets[figure].get(workload, {}) for figure in c.HISTOGRAMS}
        figures[workload] = _workload_figures(keys, pods, values, gpus, histograms)
    return figures, stats


def _sum_of(values: Mapping[PodKey, float], keys: list[PodKey]) -> float | None:
    present = [values[key] for key in keys if key in values]
    return sum(present) if present else None


def _weighted_sum(
    values: Mapping[PodKey, float], keys: list[PodKey], pods: Mapping[PodKey, _Pod]
) -> float | None:
    """Σ value x coverage: a time average of the workload's total (an absent replica adds 0)."""
    present = [values[key] * pods[key].coverage for key in keys if key in values]
    return sum(present) if present else None


def _workload_figures(
    keys: list[PodKey],
    pods: Mapping[PodKey, _Pod],
    values: Mapping[str, Mapping[PodKey, float]],
    gpus: Mapping[PodKey, float],
    histograms: Mapping[str, Mapping[float, float]],
) -> ServingFigures:
    servers = Counter(pods[key].server for key in keys)
    server = sorted(servers.items(), key=lambda item: (-item[1], item[0]))[0][0]
    replica_hours = sum(pods[key].coverage for key in keys)
    figures = ServingFigures(
        server_kind=server,
        replicas_seen=len(keys),
        replica_hours=replica_hours,
        seconds_with_data=round(max(pods[key].coverage for key in keys) * HOUR_SECONDS),
        pods=tuple(sorted(keys)),
    )
    if any(key in gpus for key in keys):
        figures.gpu_hours = sum(gpus[key] * pods[key].coverage for key in keys if key in gpus)
    for figure, attribute in (
        ("requests", "requests_per_second"),
        ("prompt_tokens", "prompt_tokens_per_second"),
        ("output_tokens", "output_tokens_per_second"),
    ):
        total = _sum_of(values[figure], keys)
        setattr(figures, attribute, None if total is None else total / HOUR_SECONDS)
    figures.mean_running = _weighted_sum(values["running"], keys, pods)
    figures.mean_waiting = _weighted_sum(values["waiting"], keys, pods)
    with_kv = [key for key in keys if key in values[q.KV_MEAN]]
    weight = sum(pods[key].coverage for key in with_kv)
    if with_kv and weight > 0:
        # Mean over replica-time: each replica's mean weighted by the time it was there.
        figures.kv_cache_mean = (
            sum(values[q.KV_MEAN][key] * pods[key].coverage for key in with_kv) / weight
        )
    kv_max = [values[q.KV_MAX][key] for key in keys if key in values[q.KV_MAX]]
    figures.kv_cache_max = max(kv_max) if kv_max else None
    histogram_fields: tuple[tuple[str, tuple[str | None, str]], ...] = (
        ("ttft", ("ttft_p50_seconds", "ttft_p95_seconds")),
        ("itl", ("itl_p50_seconds", "itl_p95_seconds")),
        ("e2e", (None, "e2e_p95_seconds")),
    )
    for figure, names in histogram_fields:
        # Prometheus' histogram_quantile over the workload's summed bucket increases.
        by_le = {
            ("+Inf" if math.isinf(bound) else repr(bound)): count
            for bound, count in histograms[figure].items()
        }
        for field_name, quantile in zip(names, QUANTILES.values(), strict=True):
            if field_name is not None:
                setattr(figures, field_name, bucket_quantile(quantile, by_le) if by_le else None)
    return figures
