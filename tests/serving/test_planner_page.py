"""The capacity planner page (``/serving/planner/``) and its chart, through Django's client."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.choices import RateKind
from ledger.models import RateCard
from quotas.models import ResourceFlavor

URL = "/serving/planner/"
CHART = "/serving/planner/charts/bounds.json"
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
}


@pytest.fixture
def signed_in(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("planner"))
    return client


def test_the_first_visit_plans_the_seed_example(signed_in):
    response = signed_in.get(URL)

    assert response.status_code == 200
    page = response.content.decode()
    assert 'value="0.5"' in page and 'value="57000"' in page
    assert response.context["plan"].replicas == 3
    stats = {card["testid"]: card["value"] for card in response.context["stats"]}
    assert stats == {"plan-replicas": "3", "plan-gpus": "3", "plan-cost": "—", "plan-slots": "72"}
    assert [round(b["value"], 2) for b in response.context["bounds"]] == [1.45, 1.45, 0.2]
    assert "Slot utilization: 5.8 ÷ (2 replicas × 4 slots) = 72 %." in page
    assert 'aria-current="page">Serving</a>' in page


def test_a_linked_plan_is_read_from_the_query_string(signed_in):
    # 2 req/s × 400 = 800 ÷ 138 = 5.80; × 1.3 = 7.54 → 8 + 1 = 9 replicas × TP 2 = 18 GPUs
    response = signed_in.get(
        URL + "?" + urlencode({**SEED, "request_rate": "2", "tensor_parallel": "2"})
    )

    assert response.context["plan"].replicas == 9
    assert response.context["plan"].gpus == 18
    assert response.context["form"].errors == {}


def test_bad_values_are_shown_at_their_fields_never_a_500(signed_in):
    query = {
        **SEED,
        "request_rate": "fast",
        "headroom": "-0.2",
        "replica_max_concurrency": "1.5",
        "flavor": "h200",
    }
    response = signed_in.get(URL + "?" + urlencode(query))

    assert response.status_code == 200
    assert response.context["plan"] is None
    errors = response.context["form"].errors
    assert errors == {
        "request_rate": ["A valid number is required."],
        "headroom": ["must be at least 0"],
        "replica_max_concurrency": ["A valid integer is required."],
        "flavor": ["No ResourceFlavor named 'h200'."],
    }
    page = response.content.decode()
    assert 'data-testid="error-request_rate">A valid number is required.' in page
    assert 'data-testid="error-flavor">No ResourceFlavor named &#x27;h200&#x27;.' in page
    # the typed text stays in its field
    assert 'value="fast"' in page
    assert 'data-testid="plan-result"' not in page


def test_the_bounds_are_the_planners(signed_in):
    response = signed_in.get(
        URL + "?" + urlencode({**SEED, "headroom": "-0.2", "tensor_parallel": "0"})
    )

    assert response.context["form"].errors == {
        "headroom": ["must be at least 0"],
        "tensor_parallel": ["must be at least 1"],
    }
    assert 'data-testid="error-headroom">must be at least 0' in response.content.decode()


def test_an_empty_required_field_is_named(signed_in):
    response = signed_in.get(URL + "?" + urlencode({**SEED, "output_tokens": ""}))

    assert list(response.context["form"].errors) == ["output_tokens"]


def test_a_flavor_prices_the_plan(signed_in, cluster, settings):
    settings.GPULEDGER_CURRENCY = "USD"
    ResourceFlavor.objects.create(cluster=cluster, name="h100")
    RateCard.objects.create(
        kind=RateKind.ALLOCATED,
        flavor="h100",
        price_per_gpu_hour=Decimal("3.00"),
        effective_from=datetime(2025, 1, 1, tzinfo=UTC),
    )

    response = signed_in.get(URL + "?" + urlencode({**SEED, "flavor": "h100"}))

    # 3 GPUs × 3.00 × 730 = 6,570.00
    stats = {card["testid"]: card for card in response.context["stats"]}
    assert stats["plan-cost"]["value"] == "6,570.00"
    assert stats["plan-cost"]["unit"] == "USD"
    assert '<option value="h100" selected>h100</option>' in response.content.decode()


def test_the_chart_shows_the_bounds_and_the_chosen_count(signed_in):
    response = signed_in.get(CHART + "?" + urlencode(SEED))

    assert response.status_code == 200
    trace = response.json()["data"][0]
    assert trace["x"] == ["By throughput", "By concurrency", "By KV cache", "Planned"]
    assert [round(value, 2) for value in trace["y"]] == [1.45, 1.45, 0.2, 3]


def test_the_chart_of_bad_values_is_a_400_naming_the_field(signed_in):
    response = signed_in.get(CHART + "?" + urlencode({**SEED, "kv_cache_tokens": "x"}))

    assert response.status_code == 400
    assert response.json()["error"].startswith("kv_cache_tokens:")


def test_the_page_needs_a_sign_in(db):
    response = Client().get(URL)

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@given(
    name=st.sampled_from(sorted([*SEED, "workload"])),
    value=st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_text_in_any_field_is_a_page_or_a_field_error_never_a_500(signed_in, name, value):
    for path in (URL, CHART):
        response = signed_in.get(path, {**SEED, name: value})
        assert response.status_code in (200, 400), (path, name, value)
