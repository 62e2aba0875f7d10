"""The demo's inference deployments, collected by the real serving collector from the simulated
Prometheus: vllm-llama-8b shows its throughput knee, vllm-qwen-chat an open over-provisioned
episode. The bounds are worked out from the load model in ``demo/simulation/serving.py``."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.core.management import call_command

from alerts.choices import Rule
from alerts.models import Episode
from ledger.models import GpuUsage
from serving.knee import OUTPUT_TOKENS, knee
from serving.models import ServingHour, ServingWorkload
from tests.databases import kept_for_the_module

END = datetime.fromisoformat("2026-06-15T12:00:00+00:00")
DAY = timedelta(days=1)
CAPACITY = 2400.0  # vllm-llama-8b's output tokens/s per replica at most
# Waiting per replica is 40 (ρ - 0.9) above 0.9: at most 0.1 (the knee's limit) up to ρ 0.9025.
KNEE_HIGHEST = 0.9025 * CAPACITY
# Its quietest hour offers 1.5 x 0.47 x capacity, less 4 % noise: every hour qualifies up to there.
KNEE_LOWEST = 1.5 * 0.47 * 0.96 * CAPACITY


@pytest.fixture(scope="module")
def demo(django_db_setup, django_db_blocker):
    """Four simulated days, written once for the module and rolled back after it."""
    with kept_for_the_module(django_db_blocker):
        call_command(
            "simulate", "--days", "4", "--step", "3600", "--seed", "5", "--end", END.isoformat()
        )
        yield


def known(value: float | None) -> float:
    assert value is not None, "a figure the simulation always sends is missing"
    return value


def hours_of(name: str) -> list[ServingHour]:
    workload = ServingWorkload.objects.get(namespace="ml-serving", kind="Deployment", name=name)
    return list(workload.hours.order_by("hour"))


@pytest.mark.django_db
def test_vllm_llama_8b_shows_its_knee(demo):
    hours = hours_of("vllm-llama-8b")
    assert len(hours) == 4 * 24  # an hour collected at the end of every simulated hour
    per_replica = [known(h.output_tokens_per_second) / h.replica_hours for h in hours]
    # Throughput per replica plateaus at the capacity through the afternoons.
    assert max(per_replica) == pytest.approx(CAPACITY)
    assert sum(value == pytest.approx(CAPACITY) for value in per_replica) >= 4

    found = knee(hours, ServingWorkload.objects.get(name="vllm-llama-8b").targets())
    assert found is not None and found.unit == OUTPUT_TOKENS
    assert KNEE_LOWEST <= found.per_replica <= KNEE_HIGHEST
    at_knee = next(h for h in hours if h.hour == found.hour)
    assert at_knee.mean_waiting == 0.0
    # Above the knee requests queue and the time to first token climbs past the 2 s target.
    above = [h for h, value in zip(hours, per_replica, strict=True) if value > found.per_replica]
    assert above
    assert all(known(h.mean_waiting) / h.replica_hours > 0.1 for h in above)
    knee_ttft = known(at_knee.ttft_p95_seconds)
    assert all(known(h.ttft_p95_seconds) > knee_ttft for h in above)
    assert max(known(h.ttft_p95_seconds) for h in above) > 2.0
    assert not Episode.objects.filter(serving_workload__name="vllm-llama-8b").exists()


@pytest.mark.django_db
def test_vllm_qwen_chat_has_an_open_over_provisioned_episode(demo):
    hours = hours_of("vllm-qwen-chat")
    assert {h.replicas_seen for h in hours} == {4}
    # Its GPUs join: 4 H100s held every hour, seen by DCGM as the serving team's.
    assert {h.gpu_hours for h in hours} == {4.0}
    usage = GpuUsage.objects.filter(namespace="ml-serving", pod__startswith="vllm-qwen-chat-")
    assert usage.filter(allocated=True, flavor="h100").values("pod").distinct().count() == 4

    episode = Episode.objects.get(rule=Rule.SERVING_OVERPROVISIONED)
    assert str(episode.serving_workload) == "ml-serving/Deployment/vllm-qwen-chat"
    # Days from June 11 (its first, from 12:00) to June 14 count; the third fired it.
    assert episode.started_at == datetime.fromisoformat("2026-06-11T00:00:00+00:00")
    assert episode.fired_at == episode.started_at + 3 * DAY
    assert episode.resolved_at is None
    assert episode.gpus == 4 and str(episode.team) == "serving"
    # The peak offers 900 tokens/s per replica (3600 over 4) at 10:00, ± 4 %.
    assert 0.96 * 896 <= episode.evidence["knee_per_replica"] <= 1.04 * 900
    assert episode.evidence["share_below"] > 0.5
    assert episode.cost > 0
