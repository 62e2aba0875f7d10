"""A deep-backfilled hour's Prometheus answers -> the hour's usage grain: one ``Piece`` per pod
series, per GPU (capacity) and per pod requesting GPUs it is not seen on, with its GPU-hours,
and the GPUs each pod and host held in each window (peaks and window counts).

The per-window rules are those of ``fleet.ingest.build_window`` (docs/architecture.md "Deep
backfill"): the figures come summed over the hour's windows from ``ledger.deep.presence``; here
they are multiplied by the GPU's fraction (MIG slices / 7) and the window's hours. A pod's node
is the node its GPU request names, else the host of its series; its uid and Kueue labels are
those of the hour (``fleet.ingest.kube_state`` choosing among several as it does per window).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from core.mig import MIG_COMPUTE_SLICES, mig_slices
from fleet import constants as c
from fleet.ingest import IngestStats, split_matrix
from fleet.ingest.kube_state import PodRequest, collect_pod_labels, collect_requests
from fleet.ingest.samples import parse_samples
from fleet.models import gpu_key
from ledger.deep import queries as q

# Shares below this are float noise from subtracting GPU fractions (as in build_window).
_EPSILON = 1e-9
# queries.SERIES_FIGURES -> the rollup figure (GPU-hours) it becomes.
FIGURE_OF = {
    "allocated": "allocated_gpu_hours",
    "shared": "shared_gpu_hours",
    "telemetry": "telemetry_gpu_hours",
    "active": "active_gpu_hours",
    "idle": "idle_gpu_hours",
    "fallback": "fallback_gpu_hours",
    "tensor": "tensor_active_gpu_hours",
    "tensor_covered": "tensor_covered_gpu_hours",
    "util": "gpu_util_gpu_hours",
    "util_covered": "gpu_util_covered_gpu_hours",
    "busy": "busy_not_working_gpu_hours",
}

PodKey = tuple[str, str]


@dataclass
class Piece:
    """GPU-hours of one pod series, GPU or pod-without-series, and where they belong."""

    namespace: str
    pod: str
    node_name: str
    host: str
    model: str
    allocated: bool
    figures: dict[str, float] = field(default_factory=lambda: defaultdict(float))


@dataclass
class Grain:
    """The hour's pieces, and per window end (a Unix time) the allocated GPUs of each
    (namespace, pod, node, model) and the (host, model) pairs with any DCGM series."""

    pieces: list[Piece] = field(default_factory=list)
    held: dict[float, dict[tuple[str, str, str, str], float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    hosts: dict[float, set[tuple[str, str]]] = field(default_factory=lambda: defaultdict(set))
    # Pods of the hour: the uid of their GPU request (else of their labels) and Kueue labels.
    pod_facts: dict[PodKey, tuple[str, str, str]] = field(default_factory=dict)
    stats: IngestStats = field(default_factory=IngestStats)


def profile_fraction(profile: str) -> float:
    """A series' share of a physical GPU by its MIG profile label ("" for a whole GPU)."""
    if not profile:
        return 1.0
    slices = mig_slices(profile)
    return (slices or MIG_COMPUTE_SLICES) / MIG_COMPUTE_SLICES


def _host(metric: dict) -> str:
    for name in c.LABEL_HOSTNAMES:
        if metric.get(name):
            return str(metric[name])
    return ""


def _series_key(metric: dict, style: str, stats: IngestStats) -> tuple[str, str, str] | None:
    """(GPU key, namespace, pod) of a series; None after counting why it cannot be used."""
    ns_label, pod_label, _ = c.POD_LABELS_BY_STYLE[style]
    uuid, host = metric.get(c.LABEL_UUID), _host(metric)
    pod, namespace = str(metric.get(pod_label) or ""), str(metric.get(ns_label) or "")
    if not uuid:
        stats.skip("missing_uuid")
        return None
    if not host:
        stats.skip("missing_host")
        return None
    if pod and not namespace:
        stats.skip("pod_without_namespace")
        return None
    return gpu_key(host, str(uuid), str(metric.get(c.LABEL_GPU_INSTANCE_ID) or "")), namespace, pod


class GrainBuilder:
    """Turns one hour's answers (all shards merged) into a ``Grain``."""

    def __init__(self, style: str, window_seconds: int) -> None:
        self.style = style
        self.window_hours = window_seconds / 3600.0
        self.grain = Grain()
        self.requests: dict[float, dict[PodKey, list[PodRequest]]] = {}
        self.pod_nodes: dict[PodKey, str] = {}

    def add_kube_state(self, requests: list[dict], pod_labels: list[dict]) -> None:
        """GPU requests per window (a matrix) and the hour's pod labels."""
        stats = self.grain.stats
        labels = collect_pod_labels(pod_labels, stats)
        for ts, items in split_matrix(requests, stats).items():
            by_pod: dict[PodKey, list[PodRequest]] = defaultdict(list)
            for request in collect_requests(items, stats).values():
                by_pod[(request.namespace, request.pod)].append(request)
            self.requests[ts] = by_pod
        best: dict[PodKey, PodRequest] = {}
        for by_pod in self.requests.values():
            for ident, pod_requests in by_pod.items():
                top = max(pod_requests, key=lambda r: (r.gpus, r.uid))
                if ident not in best or (top.gpus, top.uid) > (best[ident].gpus, best[ident].uid):
                    best[ident] = top
        for ident in set(best) | set(labels):
            label = labels.get(ident)
            uid = best[ident].uid if ident in best else (label[0] if label else "")
            self.grain.pod_facts[ident] = (uid, *(label[1:] if label else ("", "")))
            if ident in best:
                self.pod_nodes[ident] = best[ident].node

    def add_series(self, answers: dict[str, list[dict]]) -> None:
        """The per-hour answers of one shard: per pod series and per GPU."""
        stats = self.grain.stats
        pieces: dict[tuple[str, str, str], Piece] = {}
        for name in q.SERIES_FIGURES:
            figure = FIGURE_OF[name]
            for metric, value in parse_samples(answers.get(name, []), stats):
                key = _series_key(metric, self.style, stats)
                if key is None or not key[2] or value is None:
                    continue
                piece = pieces.get(key)
                if piece is None:
                    piece = pieces[key] = self._pod_piece(metric, key)
                fraction = profile_fraction(str(metric.get(c.LABEL_GPU_INSTANCE_PROFILE) or ""))
                piece.figures[figure] += value * fraction * self.window_hours
        self.grain.pieces.extend(pieces.values())
        for metric, value in parse_samples(answers.get(q.CAPACITY, []), stats):
            if value is None or _series_key(metric, self.style, stats) is None:
                continue
            host = _host(metric)
            fraction = profile_fraction(str(metric.get(c.LABEL_GPU_INSTANCE_PROFILE) or ""))
            piece = Piece("", "", host, host, str(metric.get(c.LABEL_MODEL_NAME) or ""), False)
            piece.figures["capacity_gpu_hours"] = value * fraction * self.window_hours
            self.grain.pieces.append(piece)

    def _pod_piece(self, metric: dict, key: tuple[str, str, str]) -> Piece:
        host = _host(metric)
        node = self.pod_nodes.get((key[1], key[2])) or host
        return Piece(key[1], key[2], node, host, str(metric.get(c.LABEL_MODEL_NAME) or ""), True)

    def add_windows(self, answers: dict[str, list[dict]]) -> dict[float, dict[PodKey, float]]:
        """The per-window answers of one shard; returns the GPUs each pod is seen on."""
        stats = self.grain.stats
        ns_label, pod_label, _ = c.POD_LABELS_BY_STYLE[self.style]
        for ts, items in split_matrix(answers.get(q.POD_SHARES, []), stats).items():
            for metric, value in parse_samples(items, stats):
                ident = (str(metric.get(ns_label) or ""), str(metric.get(pod_label) or ""))
                if value is None or not ident[1]:
                    continue
                host = _host(metric)
                node = self.pod_nodes.get(ident) or host
                fraction = profile_fraction(str(metric.get(c.LABEL_GPU_INSTANCE_PROFILE) or ""))
                model = str(metric.get(c.LABEL_MODEL_NAME) or "")
                self.grain.held[ts][(*ident, node, model)] += value * fraction
        for ts, items in split_matrix(answers.get(q.HOSTS, []), stats).items():
            for metric, _value in parse_samples(items, stats):
                self.grain.hosts[ts].add((_host(metric), str(metric.get(c.LABEL_MODEL_NAME) or "")))
        seen: dict[float, dict[PodKey, float]] = defaultdict(lambda: defaultdict(float))
        for ts, items in split_matrix(answers.get(q.POD_SEEN, []), stats).items():
            for metric, value in parse_samples(items, stats):
                ident = (str(metric.get(ns_label) or ""), str(metric.get(pod_label) or ""))
                if value is None or not ident[1]:
                    continue
                profile = str(metric.get(c.LABEL_GPU_INSTANCE_PROFILE) or "")
                seen[ts][ident] += value * profile_fraction(profile)
        return seen

    def add_unseen_requests(self, seen: dict[float, dict[PodKey, float]], models: Any) -> None:
        """GPUs requested but not (all) on DCGM series, window by window: allocated without
        telemetry, with capacity only on a node with no DCGM series in that window.

        ``models``: node name -> the GPU product its rows take (a row without a GPU)."""
        pieces: dict[PodKey, Piece] = {}
        for ts, by_pod in self.requests.items():
            hosts = {host for host, _model in self.grain.hosts.get(ts, set())}
            for ident, pod_requests in by_pod.items():
                missing = max(r.gpus for r in pod_requests) - seen.get(ts, {}).get(ident, 0.0)
                if missing <= _EPSILON:
                    continue
                request = max(pod_requests, key=lambda r: (r.gpus, r.uid))
                model = models.get(request.node, "")
                piece = pieces.get(ident)
                if piece is None:
                    piece = pieces[ident] = Piece(ident[0], ident[1], request.node, "", model, True)
                piece.figures["allocated_gpu_hours"] += missing * self.window_hours
                if request.node not in hosts:
                    piece.figures["capacity_gpu_hours"] += missing * self.window_hours
                self.grain.held[ts][(*ident, request.node, model)] += missing
        self.grain.pieces.extend(pieces.values())

    def nodes(self) -> dict[str, str]:
        """Every node the hour names, with the DCGM modelName of its GPUs when known."""
        products: dict[str, str] = {}
        for by_host in self.grain.hosts.values():
            for host, model in by_host:
                if host and model:
                    products.setdefault(host, model)
        names = {piece.node_name for piece in self.grain.pieces if piece.node_name}
        names |= set(products)
        for by_pod in self.requests.values():
            names |= {r.node for rs in by_pod.values() for r in rs if r.node}
        return {name: products.get(name, "") for name in sorted(names)}
