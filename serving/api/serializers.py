"""The capacity plan's request and answer. The request serializer checks types, presence and
each number's bounds, the planner's own (``serving.planner.check`` over ``LIMITS``), so every bad
field is named at once; the page reads its query string with it too."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import serializers

from core.ranges import covered_hours
from ledger.api.serializers import StrictSerializer
from serving.deployments import MEASURED_DAYS, Measurement, UnknownWorkload, find_workload, measure
from serving.planner import Comparison, Plan, PlanError, PlanInput, check, compare, plan
from serving.pricing import Price, flavor_exists, price_now

# The inputs a deployment's measurement may give (serving.deployments.measure), in form order.
MEASURABLE = (
    "request_rate",
    "input_tokens",
    "output_tokens",
    "replica_throughput_tokens_per_second",
    "replica_max_concurrency",
    "kv_cache_tokens",
    "tensor_parallel",
)
REQUIRED = "This field is required."


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


def _whole(field: str, help_text: str, **kwargs: Any) -> serializers.IntegerField:
    return serializers.IntegerField(help_text=help_text, validators=[Within(field)], **kwargs)


class CapacityPlanRequestSerializer(StrictSerializer):
    request_rate = _number(
        "request_rate",
        "Requests per second (λ), 0 or more; with `workload`, its busiest hour's when omitted.",
        required=False,
    )
    input_tokens = _number(
        "input_tokens",
        "Mean input (prompt) tokens per request; with `workload`, its measured mean when omitted.",
        required=False,
    )
    output_tokens = _number(
        "output_tokens",
        "Mean output (generated) tokens per request, more than 0; with `workload`, its "
        "measured mean when omitted.",
        required=False,
    )
    replica_throughput_tokens_per_second = _number(
        "replica_throughput_tokens_per_second",
        "Output tokens per second one replica delivers at its max concurrency; with `workload`, "
        "its knee's when omitted.",
        required=False,
    )
    replica_max_concurrency = _whole(
        "replica_max_concurrency",
        "Requests one replica serves at once (its slots), 1 or more; with `workload`, the knee "
        "hour's running requests per replica when omitted.",
        required=False,
    )
    kv_cache_tokens = _whole(
        "kv_cache_tokens",
        "KV-cache tokens one replica holds (required: a deployment's servers report its use, "
        "not its size).",
        required=False,
    )
    headroom = _number("headroom", "Spare fraction on top of the largest bound: 0.3 = 30 %.")
    spare_replicas = _whole("spare_replicas", "Replicas added after rounding (N+k).")
    tensor_parallel = _whole(
        "tensor_parallel",
        "GPUs per replica, 1 or more; with `workload`, its GPUs per replica when omitted.",
        required=False,
    )
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

    workload = serializers.CharField(
        max_length=1100,
        required=False,
        allow_blank=True,
        help_text="A serving deployment, namespace/name (or cluster/namespace/kind/name when "
        "that names several): the omitted request rate (its busiest hour's), token lengths, "
        "throughput, max concurrency and tensor-parallel size are measured on it (the "
        f"throughput and concurrency at its knee) over its last {MEASURED_DAYS} days, its "
        "flavor prices the plan, and the answer compares the plan with the replicas it runs.",
    )

    # Set by validate(): the deployment's measurement and the fields it gave.
    measurement: Measurement | None = None
    measured_fields: tuple[str, ...] = ()
    measured_values: dict[str, Any] = {}  # replaced per instance by validate()

    def validate_flavor(self, value: str) -> str:
        if value and not flavor_exists(value):
            raise serializers.ValidationError(f"No ResourceFlavor named {value!r}.")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Fills what the request omits from the deployment's measurement; every input still
        missing is named, with why the deployment could not give it."""
        text = (attrs.pop("workload", "") or "").strip()
        measurement = None
        if text:
            try:
                workload = find_workload(text, self.context.get("allowed"))
            except UnknownWorkload as exc:
                raise serializers.ValidationError({"workload": [str(exc)]}) from None
            now = timezone.now()
            span = covered_hours(now - timedelta(days=MEASURED_DAYS), now, now)
            measurement = measure(workload, span)
        measured: list[str] = []
        values: dict[str, Any] = {}
        errors: dict[str, list[str]] = {}
        for name in MEASURABLE:
            if name in attrs:
                continue
            value = None if measurement is None else getattr(measurement, name, None)
            if value is None:
                why = None if measurement is None else measurement.why_not.get(name)
                errors[name] = [REQUIRED if why is None else f"{REQUIRED[:-1]}: {why}."]
                continue
            attrs[name] = value
            measured.append(name)
            values[name] = value
        if errors:
            raise serializers.ValidationError(errors)
        if measurement is not None and not attrs.get("flavor") and not attrs.get("gpu_model"):
            d = measurement.deployment
            if d.flavor or d.gpu_model:
                attrs["flavor"], attrs["gpu_model"] = d.flavor, d.gpu_model
                measured.append("flavor")
                values["flavor"] = d.flavor or d.gpu_model
        self.measurement = measurement
        self.measured_fields = tuple(measured)
        self.measured_values = values
        return attrs

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

    def comparison(self, result: Plan) -> Comparison | None:
        """The plan against the replicas the deployment runs now, priced by its flavor's card."""
        measurement = self.measurement
        if measurement is None or measurement.deployed_replicas is None:
            return None
        d = measurement.deployment
        price = price_now(d.flavor, d.gpu_model)
        return compare(
            measurement.deployed_replicas,
            result,
            int(self.validated_data["tensor_parallel"]),
            None if price is None else price.per_gpu_hour,
            "" if price is None else price.currency,
        )


def measured_answer(request: CapacityPlanRequestSerializer) -> dict[str, Any] | None:
    """What the plan took from the deployment, and the knee it was measured at."""
    measurement = request.measurement
    if measurement is None:
        return None
    d = measurement.deployment
    knee = d.knee
    return {
        "workload": d.full_path,
        "inputs": list(request.measured_fields),
        "values": request.measured_values,
        "hours": len(d.hours),
        "knee_hour": None if knee is None or knee.hour is None else knee.hour.isoformat(),
        "knee_per_replica": None if knee is None else knee.per_replica,
        "knee_unit": None if knee is None else knee.unit,
        "knee_running_per_replica": d.knee_running_per_replica,
        "deployed_hour": None if d.latest is None else d.latest.hour.isoformat(),
        "flavor": d.flavor or None,
        "gpu_model": d.gpu_model or None,
    }


def comparison_answer(found: Comparison | None) -> dict[str, Any] | None:
    if found is None:
        return None
    cost = found.surplus_cost_per_month
    return {
        "deployed_replicas": found.deployed_replicas,
        "needed_replicas": found.needed_replicas,
        "surplus_replicas": found.surplus_replicas,
        "surplus_gpus": found.surplus_gpus,
        "surplus_cost_per_month": None if cost is None else float(cost),
        "currency": found.currency,
        "text": found.text,
    }


def answer(
    result: Plan,
    price: Price | None,
    request: CapacityPlanRequestSerializer | None = None,
) -> dict[str, Any]:
    """The API's body for a plan (``CapacityPlanSerializer``); with the request, what it took
    from a deployment and how the plan compares with what it runs."""
    found = None if request is None else request.comparison(result)
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
        "measured": None if request is None else measured_answer(request),
        "deployed_replicas": None if found is None else found.deployed_replicas,
        "comparison": comparison_answer(found),
    }


class MeasuredSerializer(serializers.Serializer):
    """The inputs a plan took from a deployment's measurement."""

    workload = serializers.CharField(help_text="cluster/namespace/kind/name")
    inputs = serializers.ListField(
        child=serializers.CharField(), help_text="The request fields filled from it."
    )
    values = serializers.DictField(help_text="The value each of those fields took.")
    hours = serializers.IntegerField(help_text="Its hours with serving telemetry measured.")
    knee_hour = serializers.DateTimeField(allow_null=True)
    knee_per_replica = serializers.FloatField(allow_null=True)
    knee_unit = serializers.CharField(
        allow_null=True, help_text="output_tokens_per_second or requests_per_second"
    )
    knee_running_per_replica = serializers.FloatField(allow_null=True)
    deployed_hour = serializers.DateTimeField(
        allow_null=True, help_text="Its newest hour, whose replicas are `deployed_replicas`."
    )
    flavor = serializers.CharField(allow_null=True)
    gpu_model = serializers.CharField(allow_null=True)


class ComparisonSerializer(serializers.Serializer):
    """The plan against the replicas the deployment runs now."""

    deployed_replicas = serializers.IntegerField()
    needed_replicas = serializers.IntegerField()
    surplus_replicas = serializers.IntegerField(help_text="Deployed - needed; negative: short.")
    surplus_gpus = serializers.IntegerField()
    surplus_cost_per_month = serializers.FloatField(
        allow_null=True, help_text="Their GPUs at the deployment's flavor's card × 730 h."
    )
    currency = serializers.CharField(allow_null=True)
    text = serializers.CharField()


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
    measured = MeasuredSerializer(
        allow_null=True, help_text="Null without `workload`: what was taken from it."
    )
    deployed_replicas = serializers.IntegerField(
        allow_null=True, help_text="The replicas the deployment runs now (its newest hour)."
    )
    comparison = ComparisonSerializer(allow_null=True)
