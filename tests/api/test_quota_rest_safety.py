"""``/api/v1/quota-changes/`` write safety: omitted limits stay, ``null`` removes, unknown fields
are a 400, ``{id}/apply/`` writes at the previewed resourceVersion, a stale one is a 409, and a
refused write answers 409 with the patch. Against the loopback Kubernetes API server, asserting
the exact requests it received.

Fixture values (tests/fixtures/kueue/clusterqueues.v1beta2.json, ClusterQueue team-c, flavor
h100, nvidia.com/gpu): nominalQuota 8, borrowingLimit "0", lendingLimit 4; third resource of the
first flavor of the first resource group.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

from quotas.choices import QuotaChangeStatus
from quotas.models import QuotaChange
from tests.api.conftest import client_for

pytestmark = pytest.mark.usefixtures("gpu_east")

URL = "/api/v1/quota-changes/"
GPU = "nvidia.com/gpu"


@pytest.fixture
def quota_admin(db: None) -> User:
    user = User.objects.create_user("quota-admin", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="apply_quota_change"))
    return User.objects.get(pk=user.pk)


def team_c(cell: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return {
        "cluster": "gpu-east",
        "cluster_queue": "team-c",
        "changes": [{"flavor": "h100", "resource": GPU, **cell}],
        "reason": "resize team-c",
        **overrides,
    }


def h100_gpu(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]


def test_an_omitted_limit_stays_as_it_is(kube, quota_admin) -> None:
    answer = client_for(quota_admin).post(
        URL, team_c({"nominal": "6"}, dry_run=False), format="json"
    )

    assert answer.status_code == 201, answer.json()
    assert answer.json()["status"] == QuotaChangeStatus.APPLIED
    sent = kube.writes("clusterqueues")[-1]
    assert "dryRun" not in sent.query
    # borrowingLimit 0 stays 0 (not unlimited) and lendingLimit 4 stays 4.
    assert h100_gpu(sent.json) == {
        "name": GPU,
        "nominalQuota": "6",
        "borrowingLimit": "0",
        "lendingLimit": "4",
    }
    assert h100_gpu(kube.get("ClusterQueue", "team-c"))["borrowingLimit"] == "0"


def test_null_removes_a_limit(kube, quota_admin) -> None:
    answer = client_for(quota_admin).post(
        URL, team_c({"nominal": "8", "borrowing_limit": None}, dry_run=False), format="json"
    )

    assert answer.status_code == 201, answer.json()
    sent = kube.writes("clusterqueues")[-1]
    assert h100_gpu(sent.json) == {"name": GPU, "nominalQuota": "8", "lendingLimit": "4"}
    assert answer.json()["after"] == [
        {
            "flavor": "h100",
            "resource": GPU,
            "nominal": "8",
            "borrowing_limit": None,
            "lending_limit": "4",
        }
    ]


def test_a_kept_lending_limit_above_the_new_nominal_is_a_400(kube, quota_admin) -> None:
    answer = client_for(quota_admin).post(URL, team_c({"nominal": "2"}), format="json")
    assert answer.status_code == 400
    assert f"h100/{GPU}/lending_limit" in answer.json()
    assert kube.writes("clusterqueues") == []


@pytest.mark.parametrize(
    "bad, field",
    [
        (team_c({"nominal": "6"}, dryrun=False), "dryrun"),
        (team_c({"nominal": "6", "borrowingLimit": "4"}), "borrowingLimit"),
    ],
)
def test_unknown_fields_are_a_400_and_nothing_is_sent(kube, quota_admin, bad, field) -> None:
    before = len(kube.recorded)
    answer = client_for(quota_admin).post(URL, bad, format="json")
    assert answer.status_code == 400
    assert field in str(answer.json())
    assert "Unknown field." in str(answer.json())
    assert len(kube.recorded) == before
    assert not QuotaChange.objects.exists()


def test_apply_writes_a_preview_at_its_resource_version(kube, quota_admin) -> None:
    client = client_for(quota_admin)
    previewed_rv = kube.get("ClusterQueue", "team-c")["metadata"]["resourceVersion"]
    preview = client.post(URL, team_c({"nominal": "6"}), format="json").json()
    assert preview["status"] == QuotaChangeStatus.PREVIEWED
    assert preview["resource_version"] == previewed_rv

    answer = client.post(f"{URL}{preview['id']}/apply/", {}, format="json")

    assert answer.status_code == 200, answer.json()
    assert answer.json()["status"] == QuotaChangeStatus.APPLIED
    dry, sent = kube.writes("clusterqueues")
    assert dry.query == {"dryRun": "All", "fieldManager": "gpu-ledger"}
    assert sent.query == {"fieldManager": "gpu-ledger"}
    assert sent.json["metadata"] == {"resourceVersion": previewed_rv}
    assert h100_gpu(sent.json)["nominalQuota"] == "6"
    # Once applied it is no longer open.
    again = client.post(f"{URL}{preview['id']}/apply/", {}, format="json")
    assert again.status_code == 400
    assert len(kube.writes("clusterqueues")) == 2


def test_apply_after_the_queue_changed_is_a_409_and_nothing_is_forced(kube, quota_admin) -> None:
    client = client_for(quota_admin)
    preview = client.post(URL, team_c({"nominal": "6"}), format="json").json()

    def someone_else(obj: dict[str, Any]) -> None:
        h100_gpu(obj)["nominalQuota"] = "10"

    changed = kube.modify("ClusterQueue", "team-c", someone_else)
    answer = client.post(f"{URL}{preview['id']}/apply/", {}, format="json")

    assert answer.status_code == 409
    data = answer.json()
    assert data["status"] == QuotaChangeStatus.CONFLICT
    assert data["api_answer"]["live"]["resource_version"] == changed["metadata"]["resourceVersion"]
    assert "nominalQuota: '6'" in data["patch"]["yaml"]
    sent = kube.writes("clusterqueues")[-1]
    assert sent.json["metadata"] == {"resourceVersion": preview["resource_version"]}
    assert h100_gpu(kube.get("ClusterQueue", "team-c"))["nominalQuota"] == "10"


def test_a_direct_apply_with_a_stale_resource_version_is_a_409(kube, quota_admin) -> None:
    client = client_for(quota_admin)
    read_rv = kube.get("ClusterQueue", "team-c")["metadata"]["resourceVersion"]

    def someone_else(obj: dict[str, Any]) -> None:
        h100_gpu(obj)["nominalQuota"] = "10"

    kube.modify("ClusterQueue", "team-c", someone_else)
    stale = team_c({"nominal": "6"}, dry_run=False, resource_version=read_rv)
    answer = client.post(URL, stale, format="json")

    assert answer.status_code == 409
    assert answer.json()["status"] == QuotaChangeStatus.CONFLICT
    sent = kube.writes("clusterqueues")[-1]
    assert "dryRun" not in sent.query
    assert sent.json["metadata"] == {"resourceVersion": read_rv}
    assert h100_gpu(kube.get("ClusterQueue", "team-c"))["nominalQuota"] == "10"

    # At the current version the same write goes through.
    current_rv = kube.get("ClusterQueue", "team-c")["metadata"]["resourceVersion"]
    fresh = team_c({"nominal": "6"}, dry_run=False, resource_version=current_rv)
    answer = client.post(URL, fresh, format="json")
    assert answer.status_code == 201, answer.json()
    assert kube.writes("clusterqueues")[-1].json["metadata"] == {"resourceVersion": current_rv}
    assert h100_gpu(kube.get("ClusterQueue", "team-c"))["nominalQuota"] == "6"


def test_a_refused_apply_answers_409_with_the_patch(kube, quota_admin, gpu_east) -> None:
    gpu_east.quota_write_enabled = False
    gpu_east.save()

    answer = client_for(quota_admin).post(
        URL, team_c({"nominal": "6"}, dry_run=False), format="json"
    )

    assert answer.status_code == 409
    data = answer.json()
    assert data["status"] == QuotaChangeStatus.REFUSED
    assert "nominalQuota: '6'" in data["patch"]["yaml"]
    assert "borrowingLimit: '0'" in data["patch"]["yaml"]
    assert data["patch"]["kubectl"].startswith(
        "kubectl patch clusterqueues.kueue.x-k8s.io team-c --type=merge"
    )
    assert kube.writes("clusterqueues") == []


def test_a_gitops_managed_queue_refuses_the_apply_endpoint_with_409(kube, quota_admin) -> None:
    def argo(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("annotations", {})["argocd.argoproj.io/tracking-id"] = (
            "quotas:kueue.x-k8s.io/ClusterQueue:/team-c"
        )

    kube.modify("ClusterQueue", "team-c", argo)
    client = client_for(quota_admin)
    preview = client.post(URL, team_c({"nominal": "6"}), format="json").json()
    answer = client.post(f"{URL}{preview['id']}/apply/", {}, format="json")

    assert answer.status_code == 409
    assert answer.json()["status"] == QuotaChangeStatus.REFUSED
    assert "kubectl patch" in answer.json()["patch"]["kubectl"]
    assert [w.query.get("dryRun") for w in kube.writes("clusterqueues")] == ["All"]


def test_a_lead_cannot_use_the_apply_endpoint(kube, quota_admin) -> None:
    from quotas.models import Team

    lead = User.objects.create_user("lead-c")
    Team.objects.get(name="team-c").leads.add(lead)
    request = client_for(lead).post(URL, team_c({"nominal": "6"}), format="json").json()
    assert request["status"] == QuotaChangeStatus.REQUESTED
    answer = client_for(lead).post(f"{URL}{request['id']}/apply/", {}, format="json")
    assert answer.status_code == 403
    assert [w.query.get("dryRun") for w in kube.writes("clusterqueues")] == ["All"]
    # An admin approves and applies it through the same endpoint.
    approved = client_for(quota_admin).post(f"{URL}{request['id']}/apply/", {}, format="json")
    assert approved.status_code == 200, approved.json()
    assert approved.json()["status"] == QuotaChangeStatus.APPLIED


def test_the_schema_documents_apply_and_its_answers(db, quota_admin) -> None:
    schema = client_for(quota_admin).get("/api/schema/", {"format": "json"}).json()
    apply = schema["paths"]["/api/v1/quota-changes/{id}/apply/"]["post"]
    assert {"200", "400", "403", "404", "409", "502"} <= set(apply["responses"])
    create = schema["paths"]["/api/v1/quota-changes/"]["post"]
    assert "409" in create["responses"]
    cell = schema["components"]["schemas"]["QuotaCell"]
    assert "omitted leaves" in cell["properties"]["borrowing_limit"]["description"]
    request = schema["components"]["schemas"]["QuotaChangeRequest"]
    assert "resource_version" in request["properties"]
