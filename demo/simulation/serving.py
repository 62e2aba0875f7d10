"""The simulated fleet's inference deployments and what Prometheus would answer about them.

Two vLLM Deployments in ``ml-serving`` (team ``serving``), each replica a pod holding one H100
through Kueue (so DCGM, kube-state-metrics and the ledger see them like every other pod):

* ``vllm-llama-8b``, 1 replica that delivers at most ``capacity`` output tokens/s. Its offered
  load follows the day, from 0.7 x to 1.5 x that: below 0.9 x capacity nothing waits and the p95
  time to first token stays under a second; above it requests queue (waiting > 0), TTFT climbs
  past the 2 s target, and throughput per replica plateaus at ``capacity``: the knee is visible.
* ``vllm-qwen-chat``, 4 replicas for a load that peaks at 0.6 x one replica's capacity per
  replica and is a tenth of that at night: below half its knee (its peak hour) in most hours,
  the demo's ``serving_overprovisioned`` episode.

The load model, per deployment and UTC hour ``h`` (a fixed shape, a little noise per seed and
hour): offered = peak x (trough + (1 - trough) x bump(h)), bump = ((1 + cos(2π(h - peak_hour)
/ 24)) / 2)²; per replica ρ = offered / replicas / capacity; served = min(offered per replica,
capacity); waiting per replica = 40 (ρ - 0.9) above 0.9, else 0; running = 32 min(ρ, 1); TTFT
p95 = 0.12 + 0.6 ρ² up to 0.9, then + 10 s per unit of ρ above it; ITL p95 = 18 ms + 30 ms x
min(ρ, 1). Latency histograms are vLLM's buckets filled from an exponential distribution with
that p95.

``hour_answers`` renders one hour as the answers to ``serving.queries.hour_queries`` (Prometheus
vector items, as the HTTP API returns them); ``SimPrometheus`` answers those PromQL texts the way
``fleet.prometheus.PrometheusClient.query`` does, so the real ``serving.collector.collect_hour``
collects the simulated hours.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from demo.simulation.scenario import (
    SERVING_DEPLOYMENTS,
    SERVING_NAMESPACE,
    ServingDeployment,
    SimFleet,
    SimWorkload,
)
from serving import queries as q

SCRAPE_SECONDS = 15
HOUR = timedelta(hours=1)
# vLLM's histogram buckets (vllm/v1/metrics/loggers.py), seconds.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
# Queueing starts here (share of a replica's capacity); a replica's largest batch.
SATURATION = 0.9
MAX_BATCH = 32


@dataclass(frozen=True)
class ReplicaHour:
    """One replica's figures over one hour, from the load model."""

    rho: float
    served: float  # output tokens/s
    waiting: float
    running: float
    ttft_p95: float
    itl_p95: float

    @classmethod
    def of(cls, deployment: ServingDeployment, offered: float) -> ReplicaHour:
        rho = offered / deployment.replicas / deployment.capacity
        ttft = 0.12 + 0.6 * min(rho, SATURATION) ** 2 + 10.0 * max(0.0, rho - SATURATION)
        return cls(
            rho=rho,
            served=min(rho, 1.0) * deployment.capacity,
            waiting=40.0 * max(0.0, rho - SATURATION),
            running=MAX_BATCH * min(rho, 1.0),
            ttft_p95=ttft,
            itl_p95=0.018 + 0.03 * min(rho, 1.0),
        )


def _cumulative(bounds: tuple[float, ...], p95: float, count: float) -> list[tuple[str, float]]:
    """(le, cumulative count) of ``count`` observations from an exponential with that p95."""
    mean = p95 / math.log(20)
    rows = [(repr(bound), round(count * (1 - math.exp(-bound / mean)), 3)) for bound in bounds]
    return [*rows, ("+Inf", round(count, 3))]


def _replicas(fleet: SimFleet, deployment: ServingDeployment) -> list[tuple[str, SimWorkload]]:
    names = set(deployment.pod_names(fleet.seed))
    return [
        (pod, workload)
        for workload in fleet.workloads
        if workload.holding and workload.namespace == SERVING_NAMESPACE
        for pod in workload.placement
        if pod in names
    ]


def hour_answers(fleet: SimFleet, hour: datetime) -> dict[str, list[dict[str, Any]]]:
    """The answers to ``serving.queries.hour_queries`` for the hour starting at ``hour``, by
    answer name, with the fleet where it stands (its replicas holding their GPUs)."""
    end = hour + HOUR
    ts = end.timestamp()
    answers: dict[str, list[dict[str, Any]]] = {name: [] for name in q.hour_queries()}

    def add(name: str, labels: dict[str, str], value: float) -> None:
        answers[name].append({"metric": labels, "value": [ts, repr(float(value))]})

    for deployment in SERVING_DEPLOYMENTS:
        replicas = _replicas(fleet, deployment)
        if not replicas:
            continue
        figures = ReplicaHour.of(deployment, deployment.offered(fleet.seed, hour))
        replica_set = deployment.replica_set(fleet.seed)
        requests = 0.0
        for pod, workload in replicas:
            started = workload.pod_started.get(pod, hour)
            share = max(0.0, min(1.0, (end - max(started, hour)) / HOUR))
            if share <= 0:
                continue
            pod_labels = {"namespace": SERVING_NAMESPACE, "pod": pod}
            served = {**pod_labels, "server": "vllm"}
            add(q.PRESENCE, served, round(share * 3600 / SCRAPE_SECONDS))
            tokens = figures.served * 3600 * share
            requests += tokens / deployment.output_tokens
            add("output_tokens", served, tokens)
            add("requests", served, tokens / deployment.output_tokens)
            add(
                "prompt_tokens",
                served,
                tokens / deployment.output_tokens * deployment.prompt_tokens,
            )
            add("running", served, figures.running)
            add("waiting", served, figures.waiting)
            kv = 0.2 + 0.7 * min(figures.rho, 1.0)
            add(q.KV_MEAN, served, round(kv, 4))
            add(q.KV_MAX, served, round(min(1.0, kv + 0.1), 4))
            add(q.GPUS, {**pod_labels, "resource": "nvidia_com_gpu"}, workload.gpus_per_pod)
            owner = {**pod_labels, "owner_kind": "ReplicaSet", "owner_name": replica_set}
            add(q.OWNERS, owner, 1)
        add(
            q.REPLICASET_OWNERS,
            {
                "namespace": SERVING_NAMESPACE,
                "replicaset": replica_set,
                "owner_kind": "Deployment",
                "owner_name": deployment.name,
            },
            1,
        )
        e2e = figures.ttft_p95 + figures.itl_p95 * deployment.output_tokens
        for name, bounds, p95, count in (
            ("ttft", TTFT_BUCKETS, figures.ttft_p95, requests),
            ("itl", ITL_BUCKETS, figures.itl_p95, requests * deployment.output_tokens),
            ("e2e", E2E_BUCKETS, e2e, requests),
        ):
            controller = {
                "namespace": SERVING_NAMESPACE,
                "owner_kind": "ReplicaSet",
                "owner_name": replica_set,
                "server": "vllm",
            }
            for le, cumulative in _cumulative(bounds, p95, count):
                add(name, {**controller, "le": le}, cumulative)
    return answers


class SimPrometheus:
    """Answers the serving hour's PromQL (``serving.queries.hour_queries``) about the simulated
    fleet at an hour's end, as ``PrometheusClient.query`` returns them; any other query is
    answered with an empty vector."""

    def __init__(self, fleet: SimFleet) -> None:
        self.fleet = fleet
        self.names = {promql: name for name, promql in q.hour_queries().items()}
        self._cached: tuple[datetime, dict[str, list[dict[str, Any]]]] | None = None
        # The collector asks an hour's queries from several threads at once.
        self._lock = threading.Lock()

    def query(self, promql: str, at: datetime) -> list[dict[str, Any]]:
        name = self.names.get(promql)
        if name is None:
            return []
        with self._lock:
            if self._cached is None or self._cached[0] != at:
                self._cached = (at, hour_answers(self.fleet, at - HOUR))
            return self._cached[1][name]
