"""``serving.deployments``: a deployment's figures over a range against the hand-worked values
of tests/serving/deployments_world.py, who sees which deployment, and a bounded query count."""

from __future__ import annotations

from decimal import Decimal

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.ranges import covered_hours
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from serving.deployments import deployment, deployments, measure
from serving.knee import OUTPUT_TOKENS
from tests.serving.deployments_world import H0, HOURS, NOW, add_deployments, build_world

SPAN = covered_hours(H0, NOW, NOW)


@pytest.fixture
def world(db):
    with time_machine.travel(NOW, tick=False):
        yield build_world()


def by_name(found):
    return {f"{d.workload.cluster.name}/{d.workload.namespace}/{d.workload.name}": d for d in found}


def test_the_figures_are_the_hand_worked_ones(world):
    llama = by_name(deployments(SPAN))["east/chat/llama"]

    assert llama.mean_replicas == pytest.approx(2.0)  # 10 replica-hours over 5 hours
    assert llama.mean_gpus == pytest.approx(2.0)
    # 5,100 tokens/s summed over 10 replica-hours (and 10 GPU-hours).
    assert llama.tokens_per_second_per_replica == pytest.approx(510.0)
    assert llama.tokens_per_second_per_gpu == pytest.approx(510.0)
    assert llama.tokens_per_gpu_hour == pytest.approx(1_836_000.0)
    # 10 GPU-hours x 3.60 = 36.00 for 18.36 million output tokens.
    assert llama.cost == Decimal("36.00")
    assert float(llama.cost_per_million_tokens) == pytest.approx(36 / 18.36)
    assert (llama.flavor, llama.gpu_model) == ("h100", "H100")
    # H0-H3 joined (the namespace held its 2 GPUs), H4 not (3 GPU-hours: a job beside it).
    assert llama.sm_active == pytest.approx((1.6 + 0.8 + 0.6 + 1.9) / 8)
    assert llama.sm_active_hours == 4
    assert [h.sm_active is not None for h in llama.hours] == [True, True, True, True, False]
    assert llama.kv_cache_mean == pytest.approx(2.25 / 5)
    assert llama.kv_cache_max == pytest.approx(1.0)
    assert llama.mean_waiting == pytest.approx(0.8)
    assert llama.running_per_replica == pytest.approx(26 / 10)


def test_the_knee_and_the_hours_below_half_of_it(world):
    llama = deployment(world.llama, SPAN)

    # H3 delivered 1,000 a replica but missed the TTFT target: the knee is H0's 800.
    assert llama.knee is not None
    assert (llama.knee.hour, llama.knee.per_replica, llama.knee.unit) == (
        H0,
        pytest.approx(800.0),
        OUTPUT_TOKENS,
    )
    assert llama.knee_running_per_replica == pytest.approx(4.0)
    # Under 400 a replica: H1 (300), H2 (250), H4 (200) of five judged hours.
    assert llama.below_knee_share == pytest.approx(0.6)
    assert llama.judged_hours == 5
    assert llama.overprovisioned is True


def test_missing_telemetry_is_none_never_zero(world):
    quiet = deployment(world.quiet, SPAN)

    assert quiet.mean_replicas == pytest.approx(1.0)
    for name in (
        "mean_gpus",
        "tokens_per_second_per_replica",
        "tokens_per_second_per_gpu",
        "tokens_per_gpu_hour",
        "cost",
        "cost_per_million_tokens",
        "sm_active",
        "kv_cache_mean",
        "kv_cache_max",
        "mean_waiting",
        "running_per_replica",
        "knee",
        "below_knee_share",
    ):
        assert getattr(quiet, name) is None, name
    assert quiet.overprovisioned is False


def test_a_deployment_without_hours_in_the_range_has_no_figures(world):
    empty = deployment(world.west_llama, SPAN)

    assert empty.hours == [] and empty.mean_replicas is None and empty.knee is None
    assert "west/chat/llama" not in by_name(deployments(SPAN))


def test_a_lead_sees_the_deployments_of_the_teams_namespaces_only(world):
    aspen = by_name(deployments(SPAN, allowed={world.aspen.pk}))
    birch = by_name(deployments(SPAN, allowed={world.birch.pk}))

    assert set(aspen) == {"east/chat/llama", "east/chat/quiet"}
    assert set(birch) == {"east/search/ranker"}
    assert aspen["east/chat/llama"].team == world.aspen
    assert deployments(SPAN, allowed=set()) == []


def test_the_queries_do_not_grow_with_the_deployments(world):
    with CaptureQueriesContext(connection) as few:
        deployments(SPAN)
    add_deployments(world.east, [f"extra-{n}" for n in range(20)], HOURS[0])
    with CaptureQueriesContext(connection) as many:
        assert len(deployments(SPAN)) == 23

    assert len(many) == len(few) <= 7


def test_the_planner_measures_the_knee_and_what_runs_now(world):
    measured = measure(world.llama, SPAN)

    assert measured.replica_throughput_tokens_per_second == pytest.approx(800.0)
    assert measured.replica_max_concurrency == 4
    assert measured.tensor_parallel == 1  # 2 GPU-hours over 2 replica-hours in H4
    assert measured.deployed_replicas == 2
    assert "kv_cache_tokens" in measured.why_not
    # The busiest hour (H3) finished 5 requests/s; 5,100 output tokens/s over 12.75 requests/s
    # in the five hours is 400 tokens a request, the prompts twice that.
    assert measured.request_rate == pytest.approx(5.0)
    assert measured.output_tokens == pytest.approx(400.0)
    assert measured.input_tokens == pytest.approx(800.0)


def test_a_deployment_counting_only_requests_has_its_rate_measured_and_not_its_tokens(world):
    measured = measure(world.ranker, SPAN)

    assert measured.request_rate == pytest.approx(20.0)
    assert (measured.input_tokens, measured.output_tokens) == (None, None)
    assert measured.why_not["output_tokens"] == "not measured: its servers count no output tokens"
    assert measured.why_not["input_tokens"] == "not measured: its servers count no input tokens"


def test_one_flavor_prices_a_namespace_whose_model_is_spelled_two_ways(world):
    # The same GPUs without telemetry an hour: the node label's spelling of the model.
    HourlyRollup.objects.filter(scope=RollupScope.NAMESPACE, key="chat", hour=HOURS[4]).update(
        gpu_model="NVIDIA-H100"
    )

    llama = deployment(world.llama, SPAN)

    assert (llama.flavor, llama.gpu_model) == ("h100", "")
    assert llama.cost == Decimal("36.00")  # still the h100 card's 3.60 x 10 GPU-hours
