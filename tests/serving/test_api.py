"""``POST /api/v1/capacity-plan/``: the answer, a 400 naming each bad field, pricing by the rate
card in force, and who may ask."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from ledger.choices import RateKind
from ledger.models import RateCard
from quotas.choices import ApiTokenScope
from quotas.models import ApiToken, ResourceFlavor

URL = "/api/v1/capacity-plan/"
SEED = {
    "request_rate": 0.5,
    "input_tokens": 1500,
    "output_tokens": 400,
    "replica_throughput_tokens_per_second": 138,
    "replica_max_concurrency": 4,
    "kv_cache_tokens": 57000,
    "headroom": 0.3,
    "spare_replicas": 1,
    "tensor_parallel": 1,
}
LONG_AGO = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture
def user(db):
    return User.objects.create_user("planner", password="planner-password")


@pytest.fixture
def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def card(price: str, *, flavor: str = "", gpu_model: str = "", **fields) -> RateCard:
    return RateCard.objects.create(
        kind=fields.pop("kind", RateKind.ALLOCATED),
        flavor=flavor,
        gpu_model=gpu_model,
        price_per_gpu_hour=Decimal(price),
        effective_from=fields.pop("effective_from", LONG_AGO),
        **fields,
    )


def test_the_seed_example_answers_every_figure(api):
    response = api.post(URL, SEED, format="json")

    assert response.status_code == 200
    body = response.json()
    assert round(body["replicas_by_throughput"], 2) == 1.45
    assert round(body["replicas_by_concurrency"], 2) == 1.45
    assert body["replicas_by_kv_cache"] == pytest.approx(0.2)
    assert round(body["response_seconds"], 1) == 11.6
    assert round(body["concurrent_requests"], 1) == 5.8
    assert round(body["slot_utilization"], 2) == 0.72
    assert body["kv_tokens_needed"] == 11400
    assert body["kv_fits"] is True
    assert body["replicas"] == 3
    assert body["gpus"] == 3
    assert body["cost_per_month"] is None
    assert body["currency"] is None
    assert body["rate_card"] is None
    assert body["meets_latency_target"] is None
    assert len(body["steps"]) == 7
    assert body["steps"][3].endswith("= 3 replicas.")


def test_decimals_given_as_text_are_read_exactly(api):
    # "0.1" × 30 ÷ "1.5" = 2 exactly: 2 replicas with no headroom, not 3.
    body = {
        **SEED,
        "request_rate": "0.1",
        "output_tokens": 30,
        "input_tokens": 0,
        "replica_throughput_tokens_per_second": "1.5",
        "replica_max_concurrency": 1,
        "headroom": 0,
        "spare_replicas": 0,
    }

    assert api.post(URL, body, format="json").json()["replicas"] == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("request_rate", -1),
        ("input_tokens", -5),
        ("output_tokens", 0),
        ("replica_throughput_tokens_per_second", 0),
        ("replica_max_concurrency", 0),
        ("replica_max_concurrency", 1.5),
        ("kv_cache_tokens", 0),
        ("headroom", -0.3),
        ("spare_replicas", -1),
        ("tensor_parallel", 0),
        ("latency_target_seconds", -2),
        ("request_rate", "fast"),
        ("headroom", "NaN"),
        ("kv_cache_tokens", "lots"),
        ("tensor_parallel", True),
        ("request_rate", None),
    ],
)
def test_a_bad_value_is_a_400_naming_its_field(api, field, value):
    response = api.post(URL, {**SEED, field: value}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_every_bad_field_is_named_at_once(api):
    body = {**SEED, "request_rate": "fast", "headroom": -1, "tensor_parallel": 0, "flavor": "x"}

    response = api.post(URL, body, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "request_rate": ["A valid number is required."],
        "headroom": ["must be at least 0"],
        "tensor_parallel": ["must be at least 1"],
        "flavor": ["No ResourceFlavor named 'x'."],
    }


@pytest.mark.parametrize("field", sorted(SEED))
def test_a_missing_field_is_a_400_naming_it(api, field):
    body = {key: value for key, value in SEED.items() if key != field}

    response = api.post(URL, body, format="json")

    assert response.status_code == 400
    assert response.json() == {field: ["This field is required."]}


def test_an_unknown_field_or_flavor_is_a_400_naming_it(api, cluster):
    unknown_field = api.post(URL, {**SEED, "headrom": 0.3}, format="json")
    unknown_flavor = api.post(URL, {**SEED, "flavor": "h200"}, format="json")

    assert unknown_field.status_code == 400
    assert unknown_field.json() == {"headrom": ["Unknown field."]}
    assert unknown_flavor.status_code == 400
    assert unknown_flavor.json() == {"flavor": ["No ResourceFlavor named 'h200'."]}


def test_a_deleted_flavor_is_unknown(api, cluster):
    ResourceFlavor.objects.create(cluster=cluster, name="old", deleted_at=timezone.now())

    assert list(api.post(URL, {**SEED, "flavor": "old"}, format="json").json()) == ["flavor"]


def test_a_flavor_is_priced_by_its_card_in_force_now(api, cluster, settings):
    settings.GPULEDGER_CURRENCY = "EUR"
    ResourceFlavor.objects.create(cluster=cluster, name="h100", gpu_model="NVIDIA H100 80GB HBM3")
    card("1.00", currency="EUR")
    card("2.00", flavor="h100", currency="EUR")
    card("2.50", flavor="h100", currency="EUR", effective_from=timezone.now() - timedelta(days=1))
    card("9.00", flavor="h100", currency="EUR", effective_from=timezone.now() + timedelta(days=2))
    card("7.00", flavor="h100", currency="USD")
    card("6.00", flavor="h100", currency="EUR", kind=RateKind.BORROWING)

    body = api.post(URL, {**SEED, "flavor": "h100", "tensor_parallel": 2}, format="json").json()

    # 3 replicas × TP 2 = 6 GPUs × 2.50 × 730 h = 10,950.00
    assert body["gpus"] == 6
    assert body["price_per_gpu_hour"] == 2.5
    assert body["cost_per_month"] == 10950.0
    assert body["currency"] == "EUR"
    assert body["rate_card"].startswith("flavor h100, from ")
    assert body["steps"][6] == (
        "Cost: 6 GPUs × 2.5 EUR per GPU-hour × 730 h a month = 10,950.00 EUR a month."
    )


def test_a_flavor_without_a_card_of_its_own_is_priced_by_its_gpu_model(api, cluster, settings):
    settings.GPULEDGER_CURRENCY = "USD"
    ResourceFlavor.objects.create(cluster=cluster, name="a100", gpu_model="NVIDIA A100")
    card("1.00")
    card("2.00", gpu_model="NVIDIA A100")

    body = api.post(URL, {**SEED, "flavor": "a100"}, format="json").json()

    # 3 GPUs × 2.00 × 730 = 4,380.00
    assert body["cost_per_month"] == 4380.0
    assert body["rate_card"].startswith("GPU model NVIDIA A100")


def test_a_gpu_model_falls_back_to_the_default_card(api, settings):
    settings.GPULEDGER_CURRENCY = "USD"
    card("1.20")

    body = api.post(URL, {**SEED, "gpu_model": "NVIDIA L4"}, format="json").json()

    # 3 × 1.20 × 730 = 2,628.00
    assert body["cost_per_month"] == 2628.0
    assert body["rate_card"].startswith("the default card")


def test_no_card_or_nothing_to_price_leaves_the_cost_null(api, settings):
    settings.GPULEDGER_CURRENCY = "USD"
    card("3.00", gpu_model="NVIDIA H100", currency="EUR")

    unpriced = api.post(URL, {**SEED, "gpu_model": "NVIDIA H100"}, format="json").json()
    card("1.00")
    unnamed = api.post(URL, SEED, format="json").json()

    assert unpriced["cost_per_month"] is None
    assert unpriced["currency"] is None
    assert unpriced["steps"][6] == "Cost: no rate card prices these GPUs, so no cost."
    # a default card exists, but the plan names no flavor or GPU model to price
    assert unnamed["cost_per_month"] is None


def test_the_latency_target_is_answered(api):
    body = api.post(URL, {**SEED, "latency_target_seconds": 10}, format="json").json()

    assert body["meets_latency_target"] is False
    assert "misses the 10 s response-time target" in body["steps"][1]


def test_anonymous_callers_are_refused(db):
    assert APIClient().post(URL, SEED, format="json").status_code in (401, 403)


def test_any_full_scope_token_may_ask_and_a_chargeback_token_may_not(user):
    _row, full = ApiToken.issue(user, "script", ApiTokenScope.FULL)
    _row, chargeback = ApiToken.issue(user, "finance", ApiTokenScope.CHARGEBACK)
    client = APIClient()

    client.credentials(HTTP_AUTHORIZATION=f"Bearer {full}")
    assert client.post(URL, SEED, format="json").status_code == 200
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {chargeback}")
    assert client.post(URL, SEED, format="json").status_code == 403


def test_a_get_is_not_allowed(api):
    assert api.get(URL).status_code == 405


def test_the_schema_documents_the_endpoint(api):
    schema = api.get("/api/schema/", {"format": "json"}).json()

    operation = schema["paths"][URL]["post"]
    assert operation["operationId"] == "capacity_plan"
    assert set(operation["responses"]) == {"200", "400"}
