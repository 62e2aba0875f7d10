"""``/api/v1/quota-changes/``: POST runs the write-back service, GET lists the audit trail.
Against the loopback Kubernetes API server with the fixture fleet synced."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from quotas.choices import ApiTokenScope, QuotaChangeStatus
from quotas.models import ApiToken, QuotaChange, Team
from tests.api.conftest import client_for

# Every test starts from cluster gpu-east synced from the recorded fleet on `kube`.
pytestmark = pytest.mark.usefixtures("gpu_east")

URL = "/api/v1/quota-changes/"
GPU = "nvidia.com/gpu"


@pytest.fixture
def quota_admin(db: None) -> User:
    user = User.objects.create_user("quota-admin", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="apply_quota_change"))
    return User.objects.get(pk=user.pk)


def body(**overrides: Any) -> dict[str, Any]:
    return {
        "cluster": "gpu-east",
        "cluster_queue": "team-a",
        "changes": [
            {
                "flavor": "h100",
                "resource": GPU,
                "nominal": "12",
                "borrowing_limit": "8",
                "lending_limit": "8",
            }
        ],
        "reason": "shrink team-a",
        **overrides,
    }


def test_a_dry_run_returns_the_preview_and_the_servers_answer(kube, quota_admin) -> None:
    answer = client_for(quota_admin).post(URL, body(), format="json")

    assert answer.status_code == 201, answer.json()
    data = answer.json()
    assert data["status"] == QuotaChangeStatus.PREVIEWED
    assert data["dry_run"] == {"ok": True}
    assert data["after"][0]["nominal"] == "12"
    assert data["preview"]["borrowers_after"][0]["name"] == "team-a/jobset-mixtral-ft-7f630"
    assert data["utilization"]["days"] == 7
    assert [w.query.get("dryRun") for w in kube.writes("clusterqueues")] == ["All"]


def test_without_dry_run_it_applies(kube, quota_admin) -> None:
    answer = client_for(quota_admin).post(URL, body(dry_run=False), format="json")

    assert answer.status_code == 201
    assert answer.json()["status"] == QuotaChangeStatus.APPLIED
    sent = kube.writes("clusterqueues")[-1]
    assert sent.query == {"fieldManager": "gpu-ledger"}
    assert (
        sent.json["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] == "12"
    )


def test_bad_values_are_a_400_naming_the_field(kube, quota_admin) -> None:
    bad = body(changes=[{"flavor": "h100", "resource": GPU, "nominal": "twelve"}])
    answer = client_for(quota_admin).post(URL, bad, format="json")
    assert answer.status_code == 400
    assert f"h100/{GPU}/nominal" in answer.json()
    assert kube.writes("clusterqueues") == []


def test_staff_without_the_permission_cannot_apply_nor_preview(kube) -> None:
    staff = User.objects.create_user("staff-only", is_staff=True)
    for dry_run in (True, False):
        answer = client_for(staff).post(URL, body(dry_run=dry_run), format="json")
        assert answer.status_code == 403
    assert kube.writes("clusterqueues") == []


def test_a_lead_can_request_but_not_apply(kube) -> None:
    lead = User.objects.create_user("lead-a")
    Team.objects.get(name="team-a").leads.add(lead)
    client = client_for(lead)

    assert client.post(URL, body(dry_run=False), format="json").status_code == 403
    answer = client.post(URL, body(), format="json")
    assert answer.status_code == 201
    assert answer.json()["status"] == QuotaChangeStatus.REQUESTED
    # Another team's queue: no, and the same answer as for a queue that does not exist.
    other = client.post(URL, body(cluster_queue="team-b"), format="json")
    missing = client.post(URL, body(cluster_queue="no-such-queue"), format="json")
    assert other.status_code == missing.status_code == 404
    assert other.json() == missing.json()
    # The lead sees their request in the trail.
    listed = client.get(URL).json()
    assert [row["target_name"] for row in listed["results"]] == ["team-a"]


@pytest.mark.parametrize("scope", [ApiTokenScope.FULL, ApiTokenScope.CHARGEBACK])
def test_api_tokens_never_write(kube, quota_admin, scope) -> None:
    _token, key = ApiToken.issue(quota_admin, "script", scope)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.post(URL, body(dry_run=False), format="json").status_code == 403
    assert kube.writes("clusterqueues") == []
    assert not QuotaChange.objects.exists()


def test_the_audit_trail_lists_changes_newest_first(kube, quota_admin) -> None:
    client = client_for(quota_admin)
    client.post(URL, body(), format="json")
    client.post(URL, body(reason="second", dry_run=False), format="json")
    rows = client.get(URL, {"cluster_queue": "team-a"}).json()["results"]
    assert [(r["reason"], r["status"]) for r in rows] == [
        ("second", QuotaChangeStatus.APPLIED),
        ("shrink team-a", QuotaChangeStatus.PREVIEWED),
    ]
    assert client.get(URL, {"status": "applied"}).json()["count"] == 1


def test_the_endpoint_is_in_the_openapi_schema(db, quota_admin) -> None:
    schema = client_for(quota_admin).get("/api/schema/", {"format": "json"}).json()
    assert {"get", "post"} <= set(schema["paths"]["/api/v1/quota-changes/"])
    assert "QuotaChangeRequest" in schema["components"]["schemas"]


def test_a_cohorts_own_quota_through_the_api(kube, quota_admin) -> None:
    cohort_body = body(
        cluster_queue="",
        cohort="research",
        changes=[{"flavor": "a100", "resource": GPU, "nominal": "16"}],
        dry_run=False,
    )
    answer = client_for(quota_admin).post(URL, cohort_body, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["status"] == QuotaChangeStatus.APPLIED
    sent = kube.writes("cohorts")[-1]
    assert sent.json["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2] == {
        "name": GPU,
        "nominalQuota": "16",
    }
    both = body(cohort="research")
    assert client_for(quota_admin).post(URL, both, format="json").status_code == 400
