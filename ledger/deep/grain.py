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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.mig import MIG_COMPUTE_SLICES, mig_slices
from fleet import constants as c
from fleet.ingest import IngestStats
from fleet.ingest.answers import matrix_points
from fleet.ingest.kube_state import PodRequest, collect_pod_labels, collect_requests
from fleet.models import gpu_key
from ledger.deep import queries as q
from ledger.deep.presence import PerWindow, Presence

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
    """The hour's pieces, and per window the allocated GPUs of each (namespace, pod, node, model)
    and the (host, model) pairs with any DCGM series, as columns (``held``, ``hosts``)."""

    pieces: list[Piece] = field(default_factory=list)
    # Window end (a Unix time) -> its column.
    slots: dict[float, int] = field(default_factory=dict)
    held: Columns = field(default_factory=lambda: Columns())
    hosts: Columns = field(default_factory=lambda: Columns())
    # Pods of the hour: the uid of their GPU request (else of their labels) and Kueue labels.
    pod_facts: dict[PodKey, tuple[str, str, str]] = field(default_factory=dict)
    stats: IngestStats = field(default_factory=IngestStats)

    def slots_of(self, ends: list[float]) -> np.ndarray:
        """The columns of window ends ``ends`` (new ends get the next ones)."""
        slots = self.slots
        return np.fromiter((slots.setdefault(end, len(slots)) for end in ends), np.int64, len(ends))


@dataclass
class Columns:
    """Values per key and window as three columns: the key's number (``keys``, in order of
    first appearance), the window's column (``Grain.slots``) and the value (added up where a
    key and window come more than once)."""

    keys: dict[tuple[str, ...], int] = field(default_factory=dict)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)

    def add(self, key: tuple[str, ...], slots: np.ndarray, values: np.ndarray) -> None:
        if len(slots):
            code = self.keys.setdefault(key, len(self.keys))
            self.parts.append((np.full(len(slots), code, dtype=np.int64), slots, values))

    def add_points(
        self, keys: list[tuple[str, ...]], slots: np.ndarray, values: Sequence[float]
    ) -> None:
        """Values of several keys, one key, window column and value each."""
        table = self.keys
        codes = np.fromiter(
            (table.setdefault(key, len(table)) for key in keys), np.int64, len(keys)
        )
        self.parts.append((codes, slots, np.asarray(values, dtype=np.float64)))

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(key numbers, window columns, values) of everything added."""
        if not self.parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        if len(self.parts) > 1:
            self.parts = [tuple(np.concatenate(part) for part in zip(*self.parts, strict=True))]  # type: ignore[list-item]
        return self.parts[0]


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


def requests_by_window(
    items: list[dict], stats: IngestStats
) -> dict[float, dict[PodKey, list[PodRequest]]]:
    """Per window end, ``collect_requests`` of a matrix answer of the pods' GPU requests, by
    pod. Windows with the same points (the usual case: the same pods all hour) share one
    reading of them; ``stats`` counts as if each window were read apart."""
    metrics: dict[int, dict] = {}
    points: dict[float, list[tuple[int, Any]]] = defaultdict(list)
    for metric, ts, value in matrix_points(items, stats):
        metrics.setdefault(id(metric), metric)
        points[ts].append((id(metric), value))
    read: dict[Any, tuple[dict[PodKey, list[PodRequest]], IngestStats]] = {}
    found: dict[float, dict[PodKey, list[PodRequest]]] = {}
    for ts in sorted(points):
        try:
            signature: Any = tuple(points[ts])
            hash(signature)
        except TypeError:  # an unhashable value: this window is read apart
            signature = ts
        known = read.get(signature)
        if known is None:
            window = [{"metric": metrics[n], "value": [ts, v]} for n, v in points[ts]]
            counted = IngestStats()
            by_pod: dict[PodKey, list[PodRequest]] = defaultdict(list)
            for request in collect_requests(window, counted).values():
                by_pod[(request.namespace, request.pod)].append(request)
            known = read[signature] = (dict(by_pod), counted)
        stats.merge(known[1])
        found[ts] = known[0]
    return found


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
        self.requests = requests_by_window(requests, stats)
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

    def add_series(self, found: Presence) -> None:
        """One shard's hour: per pod series its figures, per GPU its capacity."""
        stats = self.grain.stats
        figures = [FIGURE_OF[name] for name in q.SERIES_FIGURES]
        pieces: dict[tuple[str, str, str], Piece] = {}
        for labels, row in zip(found.series, found.figures.tolist(), strict=True):
            metric = dict(labels)
            key = _series_key(metric, self.style, stats)
            if key is None or not key[2]:
                continue
            piece = pieces.get(key)
            if piece is None:
                piece = pieces[key] = self._pod_piece(metric, key)
            scale = (
                profile_fraction(str(metric.get(c.LABEL_GPU_INSTANCE_PROFILE) or ""))
                * self.window_hours
            )
            for figure, value in zip(figures, row, strict=True):
                if value == value:  # noqa: PLR0124 (NaN: no window added to it)
                    piece.figures[figure] += value * scale
        self.grain.pieces.extend(pieces.values())
        for labels, value in found.capacity.items():
            metric = dict(labels)
            if _series_key(metric, self.style, stats) is None:
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

    def add_windows(self, found: Presence) -> dict[PodKey, dict[float, float]]:
        """One shard's per-window answers; returns the GPUs each pod is seen on per window."""
        grain = self.grain
        ns_label, pod_label, _ = c.POD_LABELS_BY_STYLE[self.style]
        empty = PerWindow()
        ends = [found.first + i * found.step for i in range(3600 // found.step)]
        slots = grain.slots_of(ends)
        shares = found.windows.get(q.POD_SHARES, empty)
        for labels, row in zip(shares.labels, shares.rows, strict=True):
            metric = dict(labels)
            ident = (str(metric.get(ns_label) or ""), str(metric.get(pod_label) or ""))
            where = np.flatnonzero(row)
            if not ident[1] or not len(where):
                continue
            host = _host(metric)
            node = self.pod_nodes.get(ident) or host
            fraction = profile_fraction(str(metric.get(c.LABEL_GPU_INSTANCE_PROFILE) or ""))
            model = str(metric.get(c.LABEL_MODEL_NAME) or "")
            grain.held.add((*ident, node, model), slots[where], row[where] * fraction)
        hosts = found.windows.get(q.HOSTS, empty)
        for labels, row in zip(hosts.labels, hosts.rows, strict=True):
            metric = dict(labels)
            where = np.flatnonzero(row)
            key = (_host(metric), str(metric.get(c.LABEL_MODEL_NAME) or ""))
            grain.hosts.add(key, slots[where], np.ones(len(where)))
        seen: dict[PodKey, dict[float, float]] = {}
        pods_seen = found.windows.get(q.POD_SEEN, empty)
        for labels, row in zip(pods_seen.labels, pods_seen.rows, strict=True):
            metric = dict(labels)
            ident = (str(metric.get(ns_label) or ""), str(metric.get(pod_label) or ""))
            if not ident[1]:
                continue
            profile = str(metric.get(c.LABEL_GPU_INSTANCE_PROFILE) or "")
            where = np.flatnonzero(row)
            by_end = seen.setdefault(ident, {})
            values = (row[where] * profile_fraction(profile)).tolist()
            for position, value in zip(where.tolist(), values, strict=True):
                by_end[ends[position]] = by_end.get(ends[position], 0.0) + value
        return seen

    def add_unseen_requests(self, seen: dict[PodKey, dict[float, float]], models: Any) -> None:
        """GPUs requested but not (all) on DCGM series, window by window: allocated without
        telemetry, with capacity only on a node with no DCGM series in that window.

        ``models``: node name -> the GPU product its rows take (a row without a GPU)."""
        pieces: dict[PodKey, Piece] = {}
        hosts_at = self._hosts_by_slot()
        nothing: dict[float, float] = {}
        held: list[tuple[tuple[str, str, str, str], float, float]] = []
        for ts, by_pod in self.requests.items():
            hosts = hosts_at.get(self.grain.slots.get(ts, -1), set())
            for ident, pod_requests in by_pod.items():
                missing = max(r.gpus for r in pod_requests) - seen.get(ident, nothing).get(ts, 0.0)
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
                held.append(((*ident, request.node, model), ts, missing))
        self.grain.pieces.extend(pieces.values())
        if held:
            keys, ends, values = zip(*held, strict=True)
            self.grain.held.add_points(list(keys), self.grain.slots_of(list(ends)), values)

    def _hosts_by_slot(self) -> dict[int, set[str]]:
        names = list(self.grain.hosts.keys)
        codes, slots, _ones = self.grain.hosts.columns()
        found: dict[int, set[str]] = {}
        for code, slot in zip(codes.tolist(), slots.tolist(), strict=True):
            found.setdefault(slot, set()).add(names[code][0])
        return found

    def nodes(self) -> dict[str, str]:
        """Every node the hour names, with the DCGM modelName of its GPUs when known."""
        products: dict[str, str] = {}
        for host, model in self.grain.hosts.keys:
            if host and model:
                products.setdefault(host, model)
        names = {piece.node_name for piece in self.grain.pieces if piece.node_name}
        names |= set(products)
        for by_pod in self.requests.values():
            names |= {r.node for rs in by_pod.values() for r in rs if r.node}
        return {name: products.get(name, "") for name in sorted(names)}
