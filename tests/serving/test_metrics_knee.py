"""The throughput knee: highest throughput per replica within the latency targets, not queueing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from serving.knee import OUTPUT_TOKENS, REQUESTS, Targets, knee

T0 = datetime(2026, 5, 4, tzinfo=UTC)


@dataclass
class Hour:
    hour: datetime
    replica_hours: float
    output_tokens_per_second: float | None
    requests_per_second: float | None
    mean_waiting: float | None
    ttft_p95_seconds: float | None
    itl_p95_seconds: float | None


def at(n: int, *figures: object) -> Hour:
    return Hour(T0 + timedelta(hours=n), *figures)  # type: ignore[arg-type]


TARGETS = Targets(ttft_p95_seconds=0.5, itl_p95_seconds=0.05)


def test_the_knee_is_the_best_hour_per_replica_within_targets():
    hours = [
        at(0, 2.0, 1000.0, 5.0, 0.0, 0.2, 0.03),  # 500 tokens/s per replica
        at(1, 2.0, 1600.0, 8.0, 0.1, 0.4, 0.045),  # 800: the knee (waiting 0.05 a replica)
        at(2, 2.0, 2000.0, 10.0, 0.0, 0.9, 0.04),  # 1000, but TTFT p95 above 0.5 s
        at(3, 1.0, 950.0, 5.0, 3.0, 0.3, 0.04),  # 950, but 3 requests waiting
        at(4, 1.0, 900.0, 4.0, 0.0, 0.3, 0.06),  # 900, but ITL p95 above 50 ms
    ]

    found = knee(hours, TARGETS)

    assert found is not None
    assert (found.hour, found.unit, found.replicas) == (T0 + timedelta(hours=1), OUTPUT_TOKENS, 2.0)
    assert found.per_replica == pytest.approx(1600.0 / 2.0)


def test_missing_latency_never_qualifies_and_requests_stand_in_for_tokens():
    hours = [
        at(0, 1.0, None, 2.0, 0.0, 0.3, None),  # Triton: no tokens, no inter-token histogram
        at(1, 1.0, None, 3.0, 0.0, None, None),  # no TTFT either: cannot be judged
    ]

    assert knee(hours, TARGETS) is None
    found = knee(hours, Targets(ttft_p95_seconds=0.5, itl_p95_seconds=None))
    assert found is not None
    assert (found.hour, found.unit, found.per_replica) == (T0, REQUESTS, 2.0)


def test_no_qualifying_hour_has_no_knee():
    assert knee([], TARGETS) is None
    assert knee([at(0, 0.0, 10.0, 1.0, 0.0, 0.1, 0.01)], TARGETS) is None  # no replica-time


@pytest.mark.django_db
def test_a_deployment_is_judged_by_its_own_targets_else_the_settings(settings):
    from fleet.models import Cluster
    from serving.models import ServingWorkload

    settings.GPULEDGER_SERVING_TTFT_P95_SECONDS = 1.5
    settings.GPULEDGER_SERVING_ITL_P95_SECONDS = 0.0
    cluster = Cluster.objects.create(name="c", prometheus_url="http://127.0.0.1:9")
    workload = ServingWorkload.objects.create(
        cluster=cluster, namespace="n", kind="Deployment", name="llm"
    )
    assert workload.targets() == Targets(ttft_p95_seconds=1.5, itl_p95_seconds=None)

    workload.ttft_p95_target_seconds, workload.itl_p95_target_seconds = 0.8, 0.05
    assert workload.targets() == Targets(ttft_p95_seconds=0.8, itl_p95_seconds=0.05)
