"""The throughput knee of a serving workload: the most it delivered per replica while within
its latency targets and not queueing (README "Serving: metrics"; pure, no I/O).

Over a workload's hours (``ServingHour`` rows, or ``serving.ingest.ServingFigures``), an hour
*qualifies* when its p95 time to first token and p95 inter-token latency are known and within
the targets (a target left None is not judged) and its waiting requests per replica are at
most ``max_waiting_per_replica`` (≈ 0: requests were not queueing). The knee is the qualifying
hour with the highest throughput per replica: output tokens per second per replica-hour where
every qualifying hour has token counts, else requests per second per replica-hour (Triton).
A figure that is missing never qualifies an hour: no telemetry is not "within target".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

OUTPUT_TOKENS = "output_tokens_per_second"
REQUESTS = "requests_per_second"


class HourFigures(Protocol):
    replica_hours: float
    output_tokens_per_second: float | None
    requests_per_second: float | None
    mean_waiting: float | None
    ttft_p95_seconds: float | None
    itl_p95_seconds: float | None


@dataclass(frozen=True)
class Targets:
    """Latency objectives of a deployment; None leaves that figure unjudged."""

    ttft_p95_seconds: float | None
    itl_p95_seconds: float | None
    max_waiting_per_replica: float = 0.1


@dataclass(frozen=True)
class Knee:
    hour: datetime | None
    per_replica: float
    unit: str  # OUTPUT_TOKENS or REQUESTS, per second and replica
    replicas: float


def _within(value: float | None, target: float | None) -> bool:
    return target is None or (value is not None and value <= target)


def qualifies(figures: HourFigures, targets: Targets) -> bool:
    if figures.replica_hours <= 0 or figures.mean_waiting is None:
        return False
    return (
        figures.mean_waiting / figures.replica_hours <= targets.max_waiting_per_replica
        and _within(figures.ttft_p95_seconds, targets.ttft_p95_seconds)
        and _within(figures.itl_p95_seconds, targets.itl_p95_seconds)
    )


def knee(hours: Iterable[HourFigures], targets: Targets) -> Knee | None:
    """The knee over ``hours`` (None when no hour qualifies); ties go to the earliest hour."""
    qualifying = [figures for figures in hours if qualifies(figures, targets)]
    unit = (
        OUTPUT_TOKENS
        if qualifying and all(f.output_tokens_per_second is not None for f in qualifying)
        else REQUESTS
    )
    best: Knee | None = None
    for figures in qualifying:
        throughput = getattr(figures, unit)
        if throughput is None:
            continue
        per_replica = throughput / figures.replica_hours
        if best is None or per_replica > best.per_replica:
            best = Knee(getattr(figures, "hour", None), per_replica, unit, figures.replica_hours)
    return best
