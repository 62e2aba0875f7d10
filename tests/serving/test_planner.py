"""The capacity planner's arithmetic (serving/planner.py), against numbers worked by hand."""

from __future__ import annotations

from decimal import Decimal

import pytest

from serving.planner import HOURS_PER_MONTH, PlanError, PlanInput, plan

# The worked example of README "Serving: capacity planner".
SEED = PlanInput(
    request_rate=0.5,
    input_tokens=1500,
    output_tokens=400,
    replica_throughput_tokens_per_second=138,
    replica_max_concurrency=4,
    kv_cache_tokens=57000,
    headroom=0.3,
    spare_replicas=1,
    tensor_parallel=1,
)


def given(**changes) -> PlanInput:
    return PlanInput(**{**SEED.__dict__, **changes})


def test_the_seed_example_gives_every_number_of_the_worked_example():
    result = plan(SEED)

    # 0.5 × 400 = 200 tokens/s ÷ 138 = 1.4493
    assert result.replicas_by_throughput == pytest.approx(200 / 138)
    assert round(result.replicas_by_throughput, 2) == 1.45
    # per request 138 ÷ 4 = 34.5 tokens/s; 400 ÷ 34.5 = 11.594 s
    assert result.response_seconds == pytest.approx(400 / 34.5)
    assert round(result.response_seconds, 1) == 11.6
    # C = 0.5 × 11.594 = 5.797
    assert result.concurrent_requests == pytest.approx(0.5 * 400 / 34.5)
    assert round(result.concurrent_requests, 1) == 5.8
    # 5.797 ÷ 4 = 1.4493
    assert round(result.replicas_by_concurrency, 2) == 1.45
    # 5.797 ÷ (⌈1.4493⌉ = 2 replicas × 4 slots) = 72.5 %
    assert result.slot_utilization == pytest.approx((0.5 * 400 / 34.5) / 8)
    assert result.slot_utilization is not None
    assert round(result.slot_utilization * 100) == 72
    # ⌈5.797⌉ = 6 × (1,500 + 400) = 11,400 tokens; ÷ 57,000 = 0.2
    assert result.kv_tokens_needed == 11_400
    assert result.replicas_by_kv_cache == pytest.approx(0.2)
    # on 2 replicas the busiest holds ⌈6 ÷ 2⌉ = 3 requests × 1,900 = 5,700 ≤ 57,000
    assert result.kv_tokens_busiest_replica == 5_700
    assert result.kv_fits is True
    # 1.4493 × 1.3 = 1.884 → 2, + 1 spare = 3; TP 1 → 3 GPUs
    assert result.deciding_bounds == ("throughput", "concurrency")
    assert result.replicas_before_spares == 2
    assert result.replicas == 3
    assert result.gpus == 3
    assert result.cost_per_month is None
    assert result.currency is None
    assert result.meets_latency_target is None


def test_the_seed_steps_carry_the_numbers():
    steps = plan(SEED).steps

    assert len(steps) == 7
    assert steps[0] == (
        "By throughput: 0.5 req/s × 400 output tokens = 200 tokens/s ÷ 138 tokens/s per "
        "replica = 1.45 replicas."
    )
    assert "400 ÷ 34.5 = 11.6 s" in steps[1]
    assert "C = 0.5 req/s × 11.6 s = 5.8 requests ÷ 4 per replica = 1.45 replicas" in steps[1]
    assert "⌈5.8⌉ = 6 requests × (1,500 + 400) tokens = 11,400 tokens" in steps[2]
    assert "÷ 57,000 tokens per replica = 0.2 replicas" in steps[2]
    assert "fits in 57,000" in steps[2]
    assert steps[3] == (
        "Largest bound: 1.45 (throughput and concurrency) × (1 + 0.3 headroom) = 1.88 → "
        "2 replicas, + 1 spare = 3 replicas."
    )
    assert steps[4] == "GPUs: 3 replicas × tensor-parallel 1 = 3 GPUs."
    assert steps[5] == "Slot utilization: 5.8 ÷ (2 replicas × 4 slots) = 72 %."
    assert steps[6] == "Cost: no rate card prices these GPUs, so no cost."


def test_the_latency_target_is_met_or_missed_by_littles_law_response_time():
    # response 11.594 s
    met = plan(given(latency_target_seconds=12))
    missed = plan(given(latency_target_seconds=10))

    assert met.meets_latency_target is True
    assert "meets the 12 s response-time target" in met.steps[1]
    assert missed.meets_latency_target is False
    assert "misses the 10 s response-time target" in missed.steps[1]
    # the target changes no replica count
    assert met.replicas == missed.replicas == 3


def test_throughput_decides_with_a_high_request_rate_and_a_small_context():
    result = plan(
        given(
            request_rate=10,
            input_tokens=100,
            output_tokens=200,
            replica_throughput_tokens_per_second=1000,
            replica_max_concurrency=16,
            kv_cache_tokens=100_000,
            headroom=0.25,
            spare_replicas=0,
        )
    )

    # throughput: 10 × 200 = 2,000 ÷ 1,000 = 2.0
    assert result.replicas_by_throughput == 2.0
    # response 200 ÷ (1,000 ÷ 16 = 62.5) = 3.2 s; C = 10 × 3.2 = 32; ÷ 16 = 2.0 (the same)
    assert result.response_seconds == pytest.approx(3.2)
    assert result.concurrent_requests == pytest.approx(32)
    assert result.replicas_by_concurrency == 2.0
    # KV: 32 × 300 = 9,600 ÷ 100,000 = 0.096
    assert result.kv_tokens_needed == 9_600
    assert result.replicas_by_kv_cache == pytest.approx(0.096)
    # 2.0 × 1.25 = 2.5 → 3
    assert result.deciding_bounds == ("throughput", "concurrency")
    assert result.replicas == 3
    # slots: 32 ÷ (2 × 16) = 100 %
    assert result.slot_utilization == pytest.approx(1.0)


def test_concurrency_equals_throughput_whenever_the_throughput_is_at_max_concurrency():
    # C ÷ slots = λ × (out × slots ÷ T) ÷ slots = λ × out ÷ T: concurrency can tie throughput,
    # never exceed it; the plan names both when they decide.
    for rate, out, throughput, slots in [(0.7, 333, 97.3, 3), (12, 1, 0.5, 1000), (3, 2, 7, 5)]:
        result = plan(
            given(
                request_rate=rate,
                output_tokens=out,
                replica_throughput_tokens_per_second=throughput,
                replica_max_concurrency=slots,
                input_tokens=0,
            )
        )
        assert result.replicas_by_concurrency == result.replicas_by_throughput
        assert "concurrency" in result.deciding_bounds


def test_the_kv_cache_decides_with_long_contexts_and_a_small_cache():
    result = plan(
        given(
            request_rate=2,
            input_tokens=30_000,
            output_tokens=500,
            replica_throughput_tokens_per_second=1000,
            replica_max_concurrency=8,
            kv_cache_tokens=60_000,
            headroom=0.2,
            spare_replicas=1,
            tensor_parallel=2,
        )
    )

    # throughput: 2 × 500 = 1,000 ÷ 1,000 = 1.0
    assert result.replicas_by_throughput == 1.0
    # response 500 ÷ (1,000 ÷ 8 = 125) = 4 s; C = 8; ÷ 8 = 1.0
    assert result.concurrent_requests == pytest.approx(8)
    # KV: 8 × 30,500 = 244,000 ÷ 60,000 = 4.0667
    assert result.kv_tokens_needed == 244_000
    assert result.replicas_by_kv_cache == pytest.approx(244_000 / 60_000)
    # the 8 requests on the 1 replica concurrency asks for need 244,000 > 60,000
    assert result.kv_tokens_busiest_replica == 244_000
    assert result.kv_fits is False
    assert "does not fit in 60,000" in result.steps[2]
    # 4.0667 × 1.2 = 4.88 → 5, + 1 = 6 replicas × TP 2 = 12 GPUs
    assert result.deciding_bounds == ("KV cache",)
    assert result.replicas == 6
    assert result.gpus == 12


def test_kv_fits_counts_whole_requests_on_the_busiest_replica():
    # λ 1, out 100, T 100, 4 slots: response 100 ÷ 25 = 4 s, C = 4, by concurrency 1.0 → 1
    # replica holding ⌈4⌉ = 4 requests × (900 + 100) = 4,000 tokens.
    four_requests = {
        "request_rate": 1,
        "input_tokens": 900,
        "output_tokens": 100,
        "replica_throughput_tokens_per_second": 100,
        "replica_max_concurrency": 4,
    }
    exactly = plan(given(**four_requests, kv_cache_tokens=4000))
    one_short = plan(given(**four_requests, kv_cache_tokens=3999))

    assert exactly.kv_tokens_busiest_replica == 4000
    assert exactly.kv_fits is True
    assert one_short.kv_fits is False


def test_an_exact_bound_is_not_rounded_up_by_float_error():
    # 0.1 × 30 = 3 tokens/s ÷ 1.5 = 2.0 exactly (0.1 × 30 / 1.5 is 2.0000000000000004 in floats);
    # × (1 + 0.5) = 3.0 → 3, not 4.
    result = plan(
        given(
            request_rate=0.1,
            output_tokens=30,
            replica_throughput_tokens_per_second=1.5,
            replica_max_concurrency=1,
            input_tokens=0,
            headroom=0.5,
            spare_replicas=0,
        )
    )

    assert result.replicas_by_throughput == 2.0
    assert result.replicas == 3


def test_spares_and_tensor_parallel_come_after_rounding():
    # 1.4493 × (1 + 0) = 1.4493 → 2, + 3 spares = 5 replicas × TP 4 = 20 GPUs
    result = plan(given(headroom=0, spare_replicas=3, tensor_parallel=4))

    assert result.replicas_before_spares == 2
    assert result.replicas == 5
    assert result.gpus == 20
    assert result.steps[4] == "GPUs: 5 replicas × tensor-parallel 4 = 20 GPUs."


def test_no_traffic_needs_only_the_spares():
    result = plan(given(request_rate=0, spare_replicas=2, tensor_parallel=2))

    assert result.replicas_by_throughput == 0
    assert result.concurrent_requests == 0
    assert result.kv_tokens_needed == 0
    assert result.replicas == 2
    assert result.gpus == 4
    assert result.slot_utilization is None
    assert result.kv_fits is True


def test_the_cost_is_gpus_times_the_price_times_730_hours():
    # 3 GPUs × 2.50 × 730 = 5,475.00
    result = plan(given(price_per_gpu_hour=Decimal("2.50"), currency="EUR"))

    assert HOURS_PER_MONTH == 730
    assert result.cost_per_month == Decimal("5475.00")
    assert result.currency == "EUR"
    assert result.steps[6] == (
        "Cost: 3 GPUs × 2.5 EUR per GPU-hour × 730 h a month = 5,475.00 EUR a month."
    )


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("request_rate", -0.1, "must be at least 0"),
        ("input_tokens", -1, "must be at least 0"),
        ("output_tokens", 0, "must be more than 0"),
        ("replica_throughput_tokens_per_second", 0, "must be at least 0.001"),
        ("replica_max_concurrency", 0, "must be at least 1"),
        ("replica_max_concurrency", 2.5, "must be a whole number"),
        ("kv_cache_tokens", 0, "must be at least 1"),
        ("headroom", -0.1, "must be at least 0"),
        ("headroom", 11, "must be at most 10"),
        ("spare_replicas", -1, "must be at least 0"),
        ("tensor_parallel", 0, "must be at least 1"),
        ("tensor_parallel", 1.5, "must be a whole number"),
        ("latency_target_seconds", 0, "must be more than 0"),
        ("request_rate", float("nan"), "must be a finite number"),
        ("request_rate", float("inf"), "must be a finite number"),
        ("request_rate", "0.5", "must be a number"),
        ("request_rate", True, "must be a number"),
        ("request_rate", 10**7, "must be at most 1,000,000"),
    ],
)
def test_inputs_out_of_bounds_are_refused_by_name(field, value, reason):
    with pytest.raises(PlanError) as error:
        plan(given(**{field: value}))

    assert error.value.errors == {field: reason}


def test_every_input_out_of_bounds_is_named_at_once():
    with pytest.raises(PlanError) as error:
        plan(given(request_rate=-1, headroom=-1, tensor_parallel=0))

    assert error.value.errors == {
        "request_rate": "must be at least 0",
        "headroom": "must be at least 0",
        "tensor_parallel": "must be at least 1",
    }


def test_the_largest_inputs_still_give_finite_figures():
    result = plan(
        PlanInput(
            request_rate=1_000_000,
            input_tokens=10_000_000,
            output_tokens=10_000_000,
            replica_throughput_tokens_per_second=Decimal("0.001"),
            replica_max_concurrency=1,
            kv_cache_tokens=1,
            headroom=10,
            spare_replicas=100_000,
            tensor_parallel=1024,
            price_per_gpu_hour=10**9,
            currency="USD",
        )
    )

    # response 1e7 ÷ 0.001 = 1e10 s; C = 1e6 × 1e10 = 1e16; KV 1e16 × 2e7 = 2e23 ÷ 1
    assert result.replicas_by_kv_cache == pytest.approx(2e23)
    assert result.cost_per_month is not None and result.cost_per_month > 0


def test_kv_fits_spreads_the_requests_over_the_replicas_concurrency_asks_for():
    # The seed with 6,000 KV tokens a replica: 11,400 needed in all, ÷ 6,000 = 1.9 replicas (the
    # KV cache decides: 1.9 × 1.3 = 2.47 → 3, + 1 = 4); on the 2 replicas concurrency asks for,
    # the busiest holds 3 requests × 1,900 = 5,700 ≤ 6,000: fits.
    result = plan(given(kv_cache_tokens=6000))

    assert result.replicas_by_kv_cache == pytest.approx(1.9)
    assert result.deciding_bounds == ("KV cache",)
    assert result.kv_tokens_busiest_replica == 5_700
    assert result.kv_fits is True
    assert result.replicas == 4
