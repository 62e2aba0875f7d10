"""The capacity planner page's read: its query string through the API's request serializer
(``serving.api.serializers``), so the page and ``POST /api/v1/capacity-plan/`` accept and refuse
the same input, then the plan (``serving.planner``) priced by the rate card in force."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.http import QueryDict

from serving.api.serializers import MEASURABLE, CapacityPlanRequestSerializer, answer
from serving.planner import Plan, PlanError
from serving.pricing import Price

# The form's fields in order: (name, label, unit, hint).
FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("request_rate", "Request rate λ", "req/s", "Requests arriving per second."),
    ("input_tokens", "Input tokens", "per request", "Mean prompt length."),
    ("output_tokens", "Output tokens", "per request", "Mean generated length."),
    (
        "replica_throughput_tokens_per_second",
        "Replica throughput",
        "tokens/s",
        "Output tokens/s one replica delivers at its max concurrency.",
    ),
    (
        "replica_max_concurrency",
        "Max concurrency",
        "per replica",
        "Requests a replica serves at once.",
    ),
    ("kv_cache_tokens", "KV cache per replica", "tokens", "Tokens its KV cache holds."),
    ("headroom", "Headroom", "fraction", "0.3 = 30 % on top of the largest bound."),
    ("spare_replicas", "Spare replicas", "N+k", "Added after rounding up."),
    ("tensor_parallel", "Tensor parallel", "GPUs/replica", "GPUs one replica spans."),
    (
        "latency_target_seconds",
        "Latency target",
        "s (optional)",
        "End-to-end response time to meet.",
    ),
)
NAMES = (*(name for name, _label, _unit, _hint in FIELDS), "flavor", "gpu_model", "workload")
# Opened with only a deployment (its page's "Plan capacity" link): the example's request shape,
# and the inputs its measurement gives left empty so they are measured.
FROM_WORKLOAD_BLANK = frozenset(MEASURABLE)

# The worked example of README "Serving: capacity planner": the form's values on a first visit.
SEED = {
    "request_rate": "0.5",
    "input_tokens": "1500",
    "output_tokens": "400",
    "replica_throughput_tokens_per_second": "138",
    "replica_max_concurrency": "4",
    "kv_cache_tokens": "57000",
    "headroom": "0.3",
    "spare_replicas": "1",
    "tensor_parallel": "1",
    "latency_target_seconds": "",
    "flavor": "",
    "gpu_model": "",
    "workload": "",
}


@dataclass(frozen=True)
class PlannerForm:
    """The form's values as typed, each field's errors, and the plan when there are none."""

    values: dict[str, str]
    errors: dict[str, list[str]] = field(default_factory=dict)
    plan: Plan | None = None
    price: Price | None = None
    # With a deployment: what was taken from it, and the plan against what it runs.
    measured: dict[str, Any] | None = None
    comparison: dict[str, Any] | None = None


def _values(params: QueryDict) -> dict[str, str]:
    """The form's values: the query string's, the seed example's on a first visit, and with
    only ``workload`` given the example's request with the measurable inputs left to it."""
    if not any(name in params for name in NAMES):
        return dict(SEED)
    if set(NAMES) & set(params) == {"workload"}:
        return {
            name: params.get("workload", "")
            if name == "workload"
            else ("" if name in FROM_WORKLOAD_BLANK else SEED[name])
            for name in NAMES
        }
    return {name: params.get(name, "") for name in NAMES}


def planner_form(params: QueryDict, allowed: set[int] | None) -> PlannerForm:
    """The plan of the query string's fields, or the seed example's when none is given;
    ``allowed``: the teams whose deployments ``workload`` may name."""
    values = _values(params)
    # Only the planner's own fields: anything else in the URL is not the form's.
    data = QueryDict(mutable=True)
    for name, value in values.items():
        data[name] = value.strip()
    request = CapacityPlanRequestSerializer(data=data, context={"allowed": allowed})
    if not request.is_valid():
        return PlannerForm(values=values, errors=_messages(request.errors))
    try:
        result, price = request.plan()
    except PlanError as exc:
        return PlannerForm(
            values=values, errors={name: [reason] for name, reason in exc.errors.items()}
        )
    body = answer(result, price, request)
    return PlannerForm(
        values=values,
        plan=result,
        price=price,
        measured=body["measured"],
        comparison=body["comparison"],
    )


def _messages(errors: Any) -> dict[str, list[str]]:
    return {name: [str(message) for message in messages] for name, messages in errors.items()}
