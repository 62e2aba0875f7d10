"""The simulated fleet of bench/collect.py, defined once: its series and their values.

Nodes of 8 GPUs; 8 of every 10 nodes run one 8-GPU pod; six DCGM fields scraped every 30 s (the
DCGM exporter's labels, with ``exported_*`` pod labels on held GPUs), kube-state-metrics for the
pods, and optionally Kueue's ClusterQueue gauges. Two writers read this one definition:
``write_openmetrics`` (text for ``promtool tsdb create-blocks-from openmetrics``) and
``bench/_remote_write.py`` (snappy-compressed protobuf to Prometheus' remote-write receiver), so
both ways load the very same series, labels and values.

Values are made a block of ``BLOCK_STAMPS`` scrapes at a time, the random part seeded by the seed,
the family and the block's first scrape: a writer that walks the blocks in any order gets the same
numbers, and a day at 50,000 GPUs never has to be held at once. DCGM values are rounded to 4
decimals and written as the shortest text that reads back as the same double.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

SCRAPE_SECONDS = 30
# 15 minutes of scrapes per generated block (the remote-write stream sends a block at a time).
BLOCK_STAMPS = 30
# The first scrape is this many seconds after the fleet's start (never on a minute boundary).
FIRST_OFFSET_SECONDS = 11
FIELDS = (
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
)
KSM_TARGET = (("instance", "10.255.0.9:8080"), ("job", "kube-state-metrics"))
KUEUE_TARGET = (
    ("instance", "10.255.0.10:8443"),
    ("job", "kueue-controller-manager"),
    ("replica_role", "leader"),
)

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Family:
    """One metric family: its series' labels (without ``__name__``) and their values.

    ``values(first, count)`` is the ``(len(series), count)`` float64 array of scrapes
    ``first .. first + count - 1``; writers call it with the blocks of ``Fleet.blocks``.
    """

    name: str
    series: list[Labels]
    values: Callable[[int, int], np.ndarray]


def constant(values: list[float]) -> Callable[[int, int], np.ndarray]:
    column = np.asarray(values, dtype=np.float64)[:, None]
    return lambda first, count: np.broadcast_to(column, (len(column), count))


class Fleet:
    """``gpus`` GPUs and ``queues`` ClusterQueues scraped every 30 s for ``minutes`` to ``end``."""

    def __init__(
        self, gpus: int, minutes: int, end: datetime, seed: int = 7, queues: int = 0
    ) -> None:
        self.gpus, self.queues, self.seed = gpus, queues, seed
        self.start = end.timestamp() - minutes * 60
        self.stamps = minutes * 60 // SCRAPE_SECONDS
        nodes = gpus // 8
        self.families = [self._dcgm(index, field, nodes) for index, field in enumerate(FIELDS)]
        self.families += self._kube([node for node in range(nodes) if node % 10 < 8])
        self.families += self._kueue(queues)

    def blocks(self) -> Iterator[tuple[int, int]]:
        """``(first, count)`` of each block of scrapes, oldest first."""
        for first in range(0, self.stamps, BLOCK_STAMPS):
            yield first, min(BLOCK_STAMPS, self.stamps - first)

    def times(self, first: int, count: int) -> np.ndarray:
        """Unix times in seconds (whole: exact as float and as milliseconds) of those scrapes."""
        index = np.arange(first, first + count, dtype=np.int64)
        return int(self.start) + FIRST_OFFSET_SECONDS + SCRAPE_SECONDS * index

    def samples(self) -> int:
        return sum(len(family.series) for family in self.families) * self.stamps

    def _dcgm(self, index: int, field: str, nodes: int) -> Family:
        series: list[Labels] = []
        held = np.repeat(np.arange(nodes) % 10 < 8, 8)
        for node in range(nodes):
            exporter = (
                ("container", "nvidia-dcgm-exporter"),
                ("instance", f"10.{node // 250}.{node % 250}.9:9400"),
                ("job", "nvidia-dcgm-exporter"),
                ("namespace", "gpu-operator"),
                ("pod", f"dcgm-{node:05d}"),
            )
            workload = (
                (
                    ("exported_container", "main"),
                    ("exported_namespace", f"team-{node % 50:02d}"),
                    ("exported_pod", f"job-{node:05d}-0"),
                )
                if node % 10 < 8
                else ()
            )
            for gpu in range(8):
                gpu_labels = (
                    ("gpu", str(gpu)),
                    ("UUID", f"GPU-{node:05d}-{gpu}"),
                    ("modelName", "NVIDIA H100 80GB HBM3"),
                    ("Hostname", f"gpu-node-{node:05d}"),
                )
                series.append(gpu_labels + exporter + workload)
        # Held GPUs: a level of their own; idle ones: noise around 0 (clipped).
        base = np.where(held, np.random.default_rng([self.seed, index]).random(len(held)), 0.0)
        scale = 100.0 if field.endswith("UTIL") else 80000.0 if "FB" in field else 1.0
        seed = self.seed

        def values(first: int, count: int) -> np.ndarray:
            noise = np.random.default_rng([seed, index, first]).uniform(
                -0.1, 0.1, (len(base), count)
            )
            return np.round(np.clip(base[:, None] + noise, 0.0, 1.0) * scale, 4)

        return Family(field, series, values)

    @staticmethod
    def _kube(pods: list[int]) -> list[Family]:
        def pod(node: int) -> Labels:
            return (
                ("namespace", f"team-{node % 50:02d}"),
                ("pod", f"job-{node:05d}-0"),
                ("uid", f"u{node:05d}"),
            )

        def node_label(node: int) -> tuple[str, str]:
            return ("node", f"gpu-node-{node:05d}")

        per_pod: dict[str, Callable[[int], list[tuple[Labels, float]]]] = {
            "kube_pod_info": lambda n: [((node_label(n),), 1)],
            "kube_pod_status_phase": lambda n: [
                ((("phase", p),), 1 if p == "Running" else 0)
                for p in ("Pending", "Running", "Succeeded", "Failed", "Unknown")
            ],
            "kube_pod_container_resource_requests": lambda n: [
                ((("container", "main"), node_label(n), ("resource", "nvidia_com_gpu")), 8),
                ((("container", "main"), node_label(n), ("resource", "cpu")), 32),
            ],
            "kube_pod_labels": lambda n: [
                (
                    (
                        ("label_kueue_x_k8s_io_cluster_queue_name", f"cq-{n % 50:02d}"),
                        ("label_kueue_x_k8s_io_local_queue_name", f"lq-{n % 50:02d}"),
                    ),
                    1,
                )
            ],
        }
        families = []
        for name, series_of in per_pod.items():
            rows = [
                (pod(n) + extra + KSM_TARGET, value) for n in pods for extra, value in series_of(n)
            ]
            families.append(Family(name, [r[0] for r in rows], constant([r[1] for r in rows])))
        return families

    @staticmethod
    def _kueue(queues: int) -> list[Family]:
        """Kueue's ClusterQueue gauges (``metrics.enableClusterQueueResources``), two GPU flavors
        per queue, as Kueue v0.19 labels them."""
        families = []
        per_flavor: dict[str, Callable[[int], float]] = {
            "kueue_cluster_queue_nominal_quota": lambda q: 16,
            "kueue_cluster_queue_borrowing_limit": lambda q: math.inf,
            "kueue_cluster_queue_lending_limit": lambda q: 8,
            "kueue_cluster_queue_resource_usage": lambda q: 8 + q % 16,
            "kueue_cluster_queue_resource_reservation": lambda q: 8 + q % 16,
        }
        for name, value in per_flavor.items():
            rows = [
                (
                    (
                        ("cohort", f"cohort-{q % 50:02d}"),
                        ("cluster_queue", f"cq-{q:04d}"),
                        ("flavor", flavor),
                        ("resource", "nvidia.com/gpu"),
                    )
                    + KUEUE_TARGET,
                    value(q),
                )
                for q in range(queues)
                for flavor in ("h100", "a100")
            ]
            families.append(Family(name, [r[0] for r in rows], constant([r[1] for r in rows])))
        per_queue: dict[str, tuple[Callable[[int], Labels], float]] = {
            "kueue_cluster_queue_resource_pending": (
                lambda q: (("resource", "nvidia.com/gpu"),),
                4,
            ),
            "kueue_admitted_active_workloads": (lambda q: (), 3),
            "kueue_cluster_queue_info": (
                lambda q: (
                    ("parent_cohort", f"cohort-{q % 50:02d}"),
                    ("root_cohort", f"cohort-{q % 50:02d}"),
                ),
                1,
            ),
        }
        for name, (extra, number) in per_queue.items():
            series = [
                (("cluster_queue", f"cq-{q:04d}"),) + extra(q) + KUEUE_TARGET for q in range(queues)
            ]
            families.append(Family(name, series, constant([number] * len(series))))
        pending: list[Labels] = [
            (("cluster_queue", f"cq-{q:04d}"), ("status", status)) + KUEUE_TARGET
            for q in range(queues)
            for status in ("active", "inadmissible")
        ]
        families.append(Family("kueue_pending_workloads", pending, constant([1] * len(pending))))
        return families


def label_text(labels: Labels) -> str:
    from tests.prometheus_server import format_labels

    return format_labels(dict(labels))


def write_openmetrics(fleet: Fleet, path: Path) -> int:
    """The fleet as OpenMetrics text for promtool (families contiguous, each series' samples in
    time order); returns the samples written."""
    from tests.prometheus_server import OpenMetricsWriter, format_value

    with OpenMetricsWriter(path) as out:
        for family in fleet.families:
            out.family(family.name)
            prefixes = [f"{family.name}{{{label_text(labels)}}} " for labels in family.series]
            for first, count in fleet.blocks():
                stamps = [f" {t}.000\n" for t in fleet.times(first, count).tolist()]
                values = family.values(first, count)
                finite = bool(np.isfinite(values).all())
                for start in range(0, len(prefixes), 1000):
                    rows = values[start : start + 1000].tolist()
                    chunks: list[str] = []
                    for prefix, row in zip(prefixes[start : start + 1000], rows, strict=True):
                        texts = map(repr, row) if finite else map(format_value, row)
                        chunks.extend(
                            f"{prefix}{text}{stamp}"
                            for text, stamp in zip(texts, stamps, strict=True)
                        )
                    out.lines("".join(chunks), len(chunks))
        return out.samples
