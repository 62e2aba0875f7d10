"""Token scopes, team scoping and throttling of the API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from quotas.choices import ApiTokenScope
from quotas.models import ApiToken

WINDOW = {"start": "2026-01-31T22:00:00Z", "end": "2026-02-01T02:00:00Z"}
READ_URLS = [
    "/api/v1/clusters/",
    "/api/v1/nodes/",
    "/api/v1/gpus/",
    "/api/v1/ingest-runs/",
    "/api/v1/teams/",
    "/api/v1/cohorts/",
    "/api/v1/cluster-queues/",
    "/api/v1/local-queues/",
    "/api/v1/workloads/",
]


def groups(response):
    return {row["group"] for row in response.json()["rows"]}


def test_anonymous_requests_are_refused(scenario):
    response = APIClient().get("/api/v1/chargeback/", {**WINDOW, "group_by": "team"})

    assert response.status_code in (401, 403)


def test_a_chargeback_token_reads_chargeback_and_allocation(finance_token, scenario):
    charge = finance_token.get("/api/v1/chargeback/", {**WINDOW, "group_by": "team"})
    alloc = finance_token.get(
        "/api/v1/allocation", {"window": "2026-01-31T22:00:00Z,2026-02-01T02:00:00Z"}
    )

    assert charge.status_code == 200
    # Finance sees every team.
    assert groups(charge) == {"alpha", "beta", "gamma"}
    assert alloc.status_code == 200


@pytest.mark.parametrize("url", READ_URLS)
def test_a_chargeback_token_gets_403_elsewhere(finance_token, scenario, url):
    response = finance_token.get(url)

    assert response.status_code == 403
    assert "scope" in response.json()["detail"]


def test_a_full_scope_token_reads_everything_its_user_may(finance_user, scenario):
    _token, key = ApiToken.issue(finance_user, "full", ApiTokenScope.FULL)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    assert client.get("/api/v1/workloads/").status_code == 200


def test_a_full_scope_token_also_reads_the_chargeback(staff_token_key, scenario):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {staff_token_key}")

    assert client.get("/api/v1/workloads/").status_code == 200
    assert client.get("/api/v1/chargeback/", {**WINDOW, "group_by": "team"}).status_code == 200


def test_drf_plaintext_tokens_are_not_accepted(staff, scenario):
    # One kind of token, hashed at rest: DRF's plaintext `Token <key>` scheme is gone.
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef0123456789abcdef01234567")

    assert client.get("/api/v1/workloads/").status_code in (401, 403)


def test_tokens_are_stored_hashed_and_record_their_last_use(finance_user, scenario):
    token, key = ApiToken.issue(finance_user, "script")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    client.get("/api/v1/chargeback/", {**WINDOW, "group_by": "team"})

    token.refresh_from_db()
    assert key not in (token.key_hash, token.prefix)
    assert token.key_hash == ApiToken.hash_key(key)
    assert token.last_used_at is not None


@pytest.mark.parametrize("header", ["Bearer glt_wrong", "Bearer", "Bearer a b"])
def test_a_bad_bearer_token_is_refused(scenario, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)

    response = client.get("/api/v1/chargeback/", {**WINDOW, "group_by": "team"})

    assert response.status_code in (401, 403)


def test_an_expired_token_is_refused(finance_user, scenario):
    token, key = ApiToken.issue(finance_user, "old")
    token.expires_at = timezone.now() - timedelta(seconds=1)
    token.save()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    response = client.get("/api/v1/chargeback/", {**WINDOW, "group_by": "team"})

    assert response.status_code in (401, 403)
    assert "expired" in response.json()["detail"]


# --- Team scoping -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group_by", "expected"),
    [
        ("team", {"alpha"}),
        ("cluster_queue", {"cq-alpha"}),
        ("local_queue", {"alpha-ns/lq-a"}),
        ("namespace", {"alpha-ns"}),
        ("workload", {"alpha-ns/train-1"}),
        # Fleet-level aggregates are visible to every signed-in user; the standalone cq-gamma
        # is the "(no cohort)" group.
        ("cohort", {"research", "(no cohort)"}),
        ("node", {"node-1", "node-2"}),
        ("cluster", {"test"}),
        ("flavor", {"h100", "a100"}),
    ],
)
def test_a_team_lead_sees_only_their_teams_groups(lead_client, scenario, group_by, expected):
    response = lead_client.get("/api/v1/chargeback/", {**WINDOW, "group_by": group_by})

    assert response.status_code == 200
    assert groups(response) == expected


def test_a_team_leads_totals_cover_only_their_rows(lead_client, scenario):
    body = lead_client.get("/api/v1/chargeback/", {**WINDOW, "group_by": "team"}).json()

    assert body["totals"]["allocated_gpu_hours"] == 16
    assert body["totals"]["cost"]["total"] == 56


def test_a_team_leads_allocation_is_filtered_too(lead_client, scenario):
    body = lead_client.get(
        "/api/v1/allocation",
        {"window": "2026-01-31T22:00:00Z,2026-02-01T02:00:00Z", "aggregate": "namespace,team"},
    ).json()

    assert set(body["data"][0]) == {"alpha-ns/alpha"}


@pytest.mark.parametrize(
    ("url", "field", "expected"),
    [
        ("/api/v1/teams/", "name", {"alpha"}),
        ("/api/v1/cluster-queues/", "name", {"cq-alpha"}),
        ("/api/v1/local-queues/", "name", {"lq-a"}),
        ("/api/v1/workloads/", "name", {"train-1"}),
    ],
)
def test_a_team_lead_lists_only_their_teams_objects(lead_client, scenario, url, field, expected):
    response = lead_client.get(url)

    assert {item[field] for item in response.json()["results"]} == expected


def test_a_team_lead_gets_404_for_another_teams_workload(lead_client, scenario):
    from quotas.models import Workload

    other = Workload.objects.get(name="infer-1")

    assert lead_client.get(f"/api/v1/workloads/{other.pk}/").status_code == 404


def test_a_signed_in_user_without_teams_sees_no_team_rows(scenario, django_user_model):
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create_user("nobody"))

    response = client.get("/api/v1/chargeback/", {**WINDOW, "group_by": "team"})

    assert response.json()["rows"] == []


# --- Throttling ---------------------------------------------------------------------------------


def test_chargeback_is_throttled_per_user(staff_client, scenario):
    rates = {"user": None, "anon": None, "chargeback": "2/min"}
    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK,
                                           "DEFAULT_THROTTLE_RATES": rates}):  # fmt: skip
        codes = [
            staff_client.get("/api/v1/chargeback/", {**WINDOW, "group_by": "team"}).status_code
            for _ in range(3)
        ]
        other = staff_client.get("/api/v1/teams/").status_code

    assert codes == [200, 200, 429]
    assert other == 200
