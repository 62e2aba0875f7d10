"""The capacity plan's request and answer. The request serializer checks types, presence and
each number's bounds, the planner's own (``serving.planner.check`` over ``LIMITS``), so every bad
field is named at once; the page reads its query string with it too."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ledger.api.serializers import StrictSerializer
from serving.planner import Plan, PlanError, PlanInput, check, plan
from serving.pricing import Price, flavor_exists, price_now


class Within:
    """A field validator: the planner's bounds for ``field``."""

    def __init__(self, field: str) -> None:
        self.field = field

    def __call__(self, value: Any) -> None:
        try:
            check(self.field, value)
        except PlanError as exc:
            raise serializers.ValidationError(exc.errors[self.field]) from None


def _number(field: str, help_text: str, **kwargs: Any) -> serializers.DecimalField:
    # Decimal, not float: "0.1" stays 0.1 for the planner's exact arithmetic, and NaN or
    # Infinity are refused as "A valid number is required."
    return serializers.DecimalField(
        max_digits=None,
        decimal_places=None,
        help_text=help_text,
        validators=[Within(field)],
        **kwargs,
    )


def _whole(field: str, help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(help_text=help_text, validators=[Within(field)])


class CapacityPlanRequestSerializer(StrictSerializer):
    request_rate = _number("request_rate", "Requests per second (λ), 0 or more.")
    input_tokens = _number("input_tokens", "Mean input (prompt) tokens per request.")
    output_tokens = _number(
        "output_tokens", "Mean output (generated) tokens per request, more than 0."
    )
    replica_throughput_tokens_per_second = _number(
        "replica_throughput_tokens_per_second",
        "Output tokens per second one replica delivers at its max concurrency.",
    )
    replica_max_concurrency = _whole(
        "replica_max_concurrency", "Requests one replica serves at once (its slots), 1 or more."
    )
    kv_cache_tokens = _whole("kv_cache_tokens", "KV-cache tokens one replica holds.")
    headroom = _number("headroom", "Spare fraction on top of the largest bound: 0.3 = 30 %.")
    spare_replicas = _whole("spare_replicas", "Replicas added after rounding (N+k).")
    tensor_parallel = _whole("tensor_parallel", "GPUs per replica, 1 or more.")
    latency_target_seconds = _number(
        "latency_target_seconds",
        "End-to-end response-time target: the steps say whether Little's law's response time "
        "meets it.",
        required=False,
        allow_null=True,
    )
    flavor = serializers.CharField(
        max_length=253,
        required=False,
        allow_blank=True,
        help_text="A ResourceFlavor name: priced by its rate card (else its GPU model's).",
    )
    gpu_model = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        help_text="A GPU model (DCGM modelName), priced by its rate card.",
    )

    def validate_flavor(self, value: str) -> str:
        if value and not flavor_exists(value):
            raise serializers.ValidationError(f"No ResourceFlavor named {value!r}.")
        return value

    def plan(self) -> tuple[Plan, Price | None]:
        """The plan of the validated input, priced by the rate card in force now;
        ``serving.planner.PlanError`` names an input out of its bounds."""
        values = dict(self.validated_data)
        price = price_now(values.pop("flavor", ""), values.pop("gpu_model", ""))
        given = PlanInput(
            **values,
            price_per_gpu_hour=None if price is None else price.per_gpu_hour,
            currency="" if price is None else price.currency,
        )
        return plan(given), price


def answer(result: Plan, price: Price | None) -> dict[str, Any]:
    """The API's body for a plan (``CapacityPlanSerializer``)."""
    return {
        "replicas_by_throughput": result.replicas_by_throughput,
        "replicas_by_concurrency": result.replicas_by_concurrency,
        "replicas_by_kv_cache": result.replicas_by_kv_cache,
        "deciding_bounds": list(result.deciding_bounds),
        "concurrent_requests": result.concurrent_requests,
        "response_seconds": result.response_seconds,
        "meets_latency_target": result.meets_latency_target,
        "slot_utilization": result.slot_utilization,
        "kv_tokens_needed": result.kv_tokens_needed,
        "kv_tokens_busiest_replica": result.kv_tokens_busiest_replica,
        "kv_fits": result.kv_fits,
        "replicas": result.replicas,
        "gpus": result.gpus,
        "price_per_gpu_hour": None if price is None else float(price.per_gpu_hour),
        "rate_card": None if price is None else price.card,
        "cost_per_month": None if result.cost_per_month is None else float(result.cost_per_month),
        "currency": result.currency,
        "steps": list(result.steps),
    }


class CapacityPlanSerializer(serializers.Serializer):
    """The plan (README "Serving: capacity planner"), for the OpenAPI schema."""

    replicas_by_throughput = serializers.FloatField()
    replicas_by_concurrency = serializers.FloatField()
    replicas_by_kv_cache = serializers.FloatField()
    deciding_bounds = serializers.ListField(
        child=serializers.ChoiceField(choices=["throughput", "concurrency", "KV cache"]),
        help_text="The bound(s) equal to the largest.",
    )
    concurrent_requests = serializers.FloatField(help_text="C, requests in flight.")
    response_seconds = serializers.FloatField(help_text="Little's law's response time.")
    meets_latency_target = serializers.BooleanField(
        allow_null=True, help_text="Null without latency_target_seconds."
    )
    slot_utilization = serializers.FloatField(
        allow_null=True, help_text="C ÷ slots of ⌈replicas by concurrency⌉; null at λ = 0."
    )
    kv_tokens_needed = serializers.IntegerField(help_text="⌈C⌉ × (input + output tokens).")
    kv_tokens_busiest_replica = serializers.IntegerField()
    kv_fits = serializers.BooleanField(
        help_text="The busiest of the ⌈replicas by concurrency⌉ replicas holds its requests' "
        "KV tokens."
    )
    replicas = serializers.IntegerField()
    gpus = serializers.IntegerField()
    price_per_gpu_hour = serializers.FloatField(allow_null=True)
    rate_card = serializers.CharField(allow_null=True, help_text="Which card priced it.")
    cost_per_month = serializers.FloatField(
        allow_null=True, help_text="GPUs × price × 730 h; null without a rate card."
    )
    currency = serializers.CharField(allow_null=True)
    steps = serializers.ListField(child=serializers.CharField())
