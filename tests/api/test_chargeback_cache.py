"""Stored chargeback reports (ledger/chargeback/cache.py): the stored report is the built one in
JSON, CSV and on every page, and any change to what it was built from builds it again."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.test import Client, override_settings
from django.urls import reverse

from ledger import chargeback
from ledger.chargeback import cache as report_cache
from ledger.choices import RateKind
from ledger.models import RateCard
from ledger.rollup import roll_up_hour
from quotas.models import ClusterQueue, Workload
from tests.api.conftest import END, HOURS, LONG_AGO, START

URL = "/api/v1/chargeback/"
WINDOW = {"start": "2026-01-31T22:00:00Z", "end": "2026-02-01T02:00:00Z"}
# The page over the same whole hours (a custom range of the range picker).
PAGE_RANGE = {"start": "2026-01-31T22:00", "end": "2026-02-01T02:00"}


@pytest.fixture
def builds(monkeypatch):
    """How many times a report was built (not read from the cache)."""
    calls = []
    real = report_cache.build_report

    def counting(**params):
        calls.append(params["group_by"])
        return real(**params)

    monkeypatch.setattr(report_cache, "build_report", counting)
    return calls


@pytest.fixture
def small_chunks(monkeypatch):
    # A few rows per stored chunk, so a page spans chunks and a report has many.
    monkeypatch.setattr(report_cache, "CHUNK_ROWS", 3)


def api(client, **params):
    response = client.get(URL, {**WINDOW, **params})
    assert response.status_code == 200, response.content
    return response


def page_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def page_view(client, number: int, **params):
    response = client.get(reverse("dashboard:chargeback"), {**PAGE_RANGE, **params, "page": number})
    assert response.status_code == 200
    context = response.context
    return context["rows"], context["totals"], context["pricing"], context["page_obj"]


def alpha_total(client, **params) -> Decimal:
    rows = {row["group"]: row for row in api(client, group_by="team", **params).json()["rows"]}
    return Decimal(str(rows["alpha"]["cost"]["total"]))


# --- The stored report is the built one ----------------------------------------------------------


@pytest.mark.parametrize(
    ("group_by", "step"),
    [("team", "none"), ("cluster_queue", "hour"), ("workload", "day"), ("node", "none")],
)
def test_json_and_csv_from_the_store_equal_a_fresh_build(
    staff_client, scenario, small_chunks, builds, group_by, step
):
    with override_settings(GPULEDGER_CHARGEBACK_CACHE_SECONDS=0):
        fresh_json = api(staff_client, group_by=group_by, step=step).json()
        fresh_csv = b"".join(api(staff_client, group_by=group_by, step=step, format="csv"))
    assert len(builds) == 2

    built = api(staff_client, group_by=group_by, step=step).json()
    stored_json = api(staff_client, group_by=group_by, step=step).json()
    stored_csv = b"".join(api(staff_client, group_by=group_by, step=step, format="csv"))

    assert len(builds) == 3  # built once, then read twice
    assert built == fresh_json
    assert stored_json == fresh_json
    assert stored_csv == fresh_csv


def test_every_page_from_the_store_equals_a_fresh_build(
    staff, staff_client, scenario, small_chunks, builds
):
    """cluster_queue × hour over 4 hours: 12 rows, pages of 5 over stored chunks of 3."""
    client = page_client(staff)
    params = {"group_by": "cluster_queue", "step": "hour"}
    with (
        override_settings(GPULEDGER_CHARGEBACK_CACHE_SECONDS=0),
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr("dashboard.views.chargeback.PAGE_SIZE", 5)
        fresh = [page_view(client, number, **params) for number in (1, 2, 3, 4, 99)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("dashboard.views.chargeback.PAGE_SIZE", 5)
        stored = [page_view(client, number, **params) for number in (1, 2, 3, 4, 99)]

    assert len(builds) == 5 + 1
    assert fresh[0][3].paginator.count == 12
    for (rows, totals, pricing, page), (s_rows, s_totals, s_pricing, s_page) in zip(
        fresh, stored, strict=True
    ):
        assert s_rows == rows
        assert s_totals == totals
        assert s_pricing == pricing
        assert (s_page.number, s_page.paginator.count) == (page.number, page.paginator.count)
    shown = [row["group"] for rows, *_ in stored[:3] for row in rows]
    api_rows = api(staff_client, group_by="cluster_queue", step="hour").json()["rows"]
    assert shown == [row["group"] for row in api_rows]
    assert len(builds) == 6  # the API read the report the page stored


def test_a_report_missing_a_stored_chunk_is_built_again(staff, scenario, small_chunks, builds):
    client = page_client(staff)
    params = {"group_by": "cluster_queue", "step": "hour"}
    first = page_view(client, 2, **params)
    # LocMemCache keeps "<prefix>:<version>:<key>": evict the report's second chunk.
    stored = [key.split(":", 2)[2] for key in cache._cache]  # type: ignore[attr-defined]
    evicted = [key for key in stored if key.endswith(":rows:1")]
    assert len(evicted) == 1
    cache.delete(evicted[0])

    again = page_view(client, 2, **params)

    assert len(builds) == 2
    assert again[:3] == first[:3]


def test_a_failing_cache_costs_a_build_not_the_answer(staff_client, scenario, monkeypatch, builds):
    class Down:
        def __getattr__(self, name):
            def fail(*args, **kwargs):
                raise ConnectionError("cache down")

            return fail

    expected = api(staff_client, group_by="team").json()
    monkeypatch.setattr(report_cache, "cache", Down())

    assert api(staff_client, group_by="team").json() == expected
    assert len(builds) == 2


# --- Whatever it was built from changes: built again --------------------------------------------


def test_a_rolled_up_hour_builds_the_report_again(staff_client, scenario, builds):
    before = api(staff_client, group_by="team").json()
    assert api(staff_client, group_by="team").json() == before
    assert len(builds) == 1

    # No usage was collected for the window's first hour: its rollup rows are replaced by none.
    roll_up_hour(scenario["cluster"].pk, HOURS[0])
    after = api(staff_client, group_by="team").json()

    assert len(builds) == 2
    alpha = {row["group"]: row for row in after["rows"]}["alpha"]
    assert alpha["allocated_gpu_hours"] == pytest.approx(12.0)  # 16 before, 4 of them gone
    with override_settings(GPULEDGER_CHARGEBACK_CACHE_SECONDS=0):
        assert api(staff_client, group_by="team").json() == after


def test_a_new_changed_or_deleted_rate_card_builds_the_report_again(staff_client, scenario, builds):
    assert alpha_total(staff_client) == 56  # README "Chargeback API" worked example
    h100 = RateCard.objects.get(flavor="h100", currency="USD", effective_from=LONG_AGO)

    h100.price_per_gpu_hour = Decimal("3.50")
    h100.save()
    assert alpha_total(staff_client) == 8 * Decimal("3.50") + 8 * 4

    RateCard.objects.create(
        kind=RateKind.ALLOCATED,
        flavor="h100",
        price_per_gpu_hour=Decimal("5.00"),
        effective_from=START + timedelta(hours=1),
    )
    assert alpha_total(staff_client) == 4 * Decimal("3.50") + 4 * 5 + 8 * 4

    RateCard.objects.filter(flavor="h100", currency="USD").delete()
    # No flavor card left: the default card (1.00) prices alpha's hours.
    assert alpha_total(staff_client) == 16
    assert len(builds) == 4


def test_a_new_queue_or_a_renamed_cluster_builds_the_report_again(staff_client, scenario, builds):
    groups = {row["group"] for row in api(staff_client, group_by="cluster_queue").json()["rows"]}
    assert "cq-new" not in groups

    ClusterQueue.objects.create(cluster=scenario["cluster"], name="cq-new", team=scenario["gamma"])
    rows = api(staff_client, group_by="cluster_queue").json()["rows"]
    assert "cq-new" in {row["group"] for row in rows}

    scenario["cluster"].name = "renamed"
    scenario["cluster"].save()
    rows = api(staff_client, group_by="cluster_queue").json()["rows"]
    assert {row["cluster"] for row in rows} == {"renamed"}
    assert len(builds) == 3


def test_a_workload_ending_after_the_window_keeps_the_report_one_ending_in_it_does_not(
    staff_client, scenario, builds
):
    first = api(staff_client, group_by="workload", step="hour").json()
    train = Workload.objects.get(name="train-1")

    train.finished_at = END + timedelta(hours=5)  # finishes now, after the window
    train.save()
    assert api(staff_client, group_by="workload", step="hour").json() == first
    assert len(builds) == 1

    train.finished_at = START + timedelta(hours=1)
    train.save()
    inside = api(staff_client, group_by="workload", step="hour").json()
    assert len(builds) == 2
    with override_settings(GPULEDGER_CHARGEBACK_CACHE_SECONDS=0):
        assert api(staff_client, group_by="workload", step="hour").json() == inside


def test_a_team_leads_report_is_never_stored(lead_client, scenario, builds):
    first = api(lead_client, group_by="cluster_queue").json()
    second = api(lead_client, group_by="cluster_queue").json()

    assert first == second
    assert [row["group"] for row in first["rows"]] == ["cq-alpha"]
    assert len(builds) == 2


@override_settings(GPULEDGER_CHARGEBACK_CACHE_SECONDS=0)
def test_with_the_cache_off_every_request_builds(staff_client, scenario, builds):
    api(staff_client, group_by="team")
    api(staff_client, group_by="team")

    assert len(builds) == 2


def test_a_bad_window_is_refused_before_anything_is_read(staff_client, scenario, builds):
    response = staff_client.get(
        URL, {"start": WINDOW["end"], "end": WINDOW["start"], "group_by": "team"}
    )

    assert response.status_code == 400
    assert "end" in response.json()
    assert builds == []


def test_the_version_names_the_window_and_the_grouping(scenario):
    def version(**overrides):
        params = {"start": START, "end": END, "group_by": "team", "step": "none", "cluster": None}
        params.update(overrides)
        inputs = chargeback.read_inputs(params["group_by"], START, params["end"], None, None)
        return chargeback.data_version(**params, inputs=inputs)

    assert version() == version()
    assert version(step="hour") != version()
    assert version(end=END - timedelta(hours=1)) != version()
    assert version(group_by="cohort") != version()
