"""Quota write-back against the loopback Kubernetes API server, through the real client.

Expected values come from the fixture README (quotas, workloads, "GPUs still admissible now"),
worked out by hand in the comments, never from the code under test.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core import mail
from django.core.exceptions import PermissionDenied

from quotas.choices import QuotaChangeSource, QuotaChangeStatus
from quotas.models import ClusterQueue, QuotaChange, Team
from quotas.sync import sync_cluster
from quotas.writeback import service
from quotas.writeback.edits import EditError

GPU = "nvidia.com/gpu"


@pytest.fixture
def admin_user(db: None, django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user(
        username="quota-admin", is_staff=True, email="admin@example.com"
    )
    user.user_permissions.add(Permission.objects.get(codename="apply_quota_change"))
    return django_user_model.objects.get(pk=user.pk)


@pytest.fixture
def synced(kube_api: Any, kube_cluster: Any) -> Any:
    kube_cluster.quota_write_enabled = True
    kube_cluster.save()
    sync_cluster(kube_cluster.pk)
    return kube_cluster


def _queue(name: str = "team-a") -> ClusterQueue:
    return ClusterQueue.objects.get(name=name)


def _cell(flavor: str, nominal: str, borrowing: str | None, lending: str | None) -> dict:
    return {
        "flavor": flavor,
        "resource": GPU,
        "nominal": nominal,
        "borrowing_limit": borrowing,
        "lending_limit": lending,
    }


def test_preview_dry_runs_and_apply_sends_the_complete_resource_groups(
    kube_api: Any, synced: Any, admin_user: Any
) -> None:
    live_before = kube_api.get("ClusterQueue", "team-a")
    # 12000m is 12 in canonical form.
    change = service.preview(
        cluster_queue=_queue(),
        changes=[_cell("h100", "12000m", "8", "8")],
        stop_policy=None,
        reason="team-a moves work to a100",
        user=admin_user,
    )
    assert change.status == QuotaChangeStatus.PREVIEWED
    assert change.dry_run == {"ok": True}
    assert change.before == [_cell("h100", "16", "8", "8") | {"resource": GPU}]
    assert change.after == [_cell("h100", "12", "8", "8")]
    assert change.resource_version == live_before["metadata"]["resourceVersion"]
    dry = kube_api.writes("clusterqueues")
    assert len(dry) == 1 and dry[0].query.get("dryRun") == "All"
    # Nothing was stored by the dry run.
    assert kube_api.get("ClusterQueue", "team-a") == live_before

    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED, change.api_answer
    writes = kube_api.writes("clusterqueues")
    assert len(writes) == 2
    sent = writes[1]
    assert "dryRun" not in sent.query
    assert sent.query["fieldManager"] == "gpu-ledger"
    assert sent.headers["Content-Type"].startswith("application/merge-patch+json")
    assert sent.json["metadata"] == {"resourceVersion": live_before["metadata"]["resourceVersion"]}
    expected_groups = live_before["spec"]["resourceGroups"]
    expected_groups[0]["flavors"][0]["resources"][2]["nominalQuota"] = "12"
    # The complete list, every other flavor, resource and spelling untouched.
    assert sent.json["spec"] == {"resourceGroups": expected_groups}
    live = kube_api.get("ClusterQueue", "team-a")
    assert live["spec"]["resourceGroups"] == expected_groups
    assert any(e["manager"] == "gpu-ledger" for e in live["metadata"]["managedFields"])


def test_a_change_between_preview_and_apply_is_a_conflict_and_nothing_is_forced(
    kube_api: Any, synced: Any, admin_user: Any
) -> None:
    change = service.preview(
        cluster_queue=_queue(),
        changes=[_cell("h100", "20", "8", "8")],
        stop_policy=None,
        reason="more for the pretraining run",
        user=admin_user,
    )

    def someone_else(obj: dict) -> None:
        obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = "18"

    kube_api.modify("ClusterQueue", "team-a", someone_else)
    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.CONFLICT
    assert change.api_status == 409
    h100 = [c for c in change.api_answer["live"]["cells"] if c["flavor"] == "h100"]
    assert {c["resource"]: c["nominal"] for c in h100}[GPU] == "18"
    live = kube_api.get("ClusterQueue", "team-a")
    assert live["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] == "18"


def test_invalid_values_come_back_with_their_causes_per_field(
    kube_api: Any, synced: Any, admin_user: Any
) -> None:
    kube_api.validators.append(
        lambda resource, obj: (
            [
                {
                    "reason": "FieldValueInvalid",
                    "message": "must be at most 64",
                    "field": "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota",
                }
            ]
            if obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"]
            == "100"
            else []
        )
    )
    change = service.preview(
        cluster_queue=_queue(),
        changes=[_cell("h100", "100", "8", "8")],
        stop_policy=None,
        reason="too much",
        user=admin_user,
    )
    assert change.dry_run["ok"] is False
    assert change.dry_run["status"] == 422
    assert change.dry_run["causes"] == [
        {
            "field": "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota",
            "reason": "FieldValueInvalid",
            "message": "must be at most 64",
        }
    ]


def test_bad_quantities_and_missing_reasons_are_refused_before_any_call(
    kube_api: Any, synced: Any, admin_user: Any
) -> None:
    calls = len(kube_api.recorded)
    with pytest.raises(EditError) as bad:
        service.preview(
            cluster_queue=_queue(),
            changes=[_cell("h100", "12 GPUs", "8", "9")],
            stop_policy="Pause",
            reason="x",
            user=admin_user,
        )
    assert set(bad.value.errors) == {f"h100/{GPU}/nominal", "stop_policy"}
    with pytest.raises(EditError) as no_reason:
        service.preview(
            cluster_queue=_queue(),
            changes=[_cell("h100", "12", "8", "8")],
            stop_policy=None,
            reason="  ",
            user=admin_user,
        )
    assert "reason" in no_reason.value.errors
    assert len(kube_api.recorded) == calls


def test_a_gitops_managed_queue_is_refused_with_the_patch_offered(
    kube_api: Any, synced: Any, admin_user: Any
) -> None:
    def argo(obj: dict) -> None:
        obj["metadata"].setdefault("annotations", {})["argocd.argoproj.io/tracking-id"] = (
            "quotas:kueue.x-k8s.io/ClusterQueue:/team-a"
        )

    kube_api.modify("ClusterQueue", "team-a", argo)
    change = service.preview(
        cluster_queue=_queue(),
        changes=[_cell("h100", "12", "8", "8")],
        stop_policy="Hold",
        reason="hold team-a while we resize",
        user=admin_user,
    )
    assert change.preview["gitops"]["tool"] == "argocd"
    assert "stopPolicy: Hold" in change.preview["yaml"]
    assert "nominalQuota: '12'" in change.preview["yaml"]
    assert change.preview["kubectl"].startswith(
        "kubectl patch clusterqueues.kueue.x-k8s.io team-a --type=merge --field-manager=gpu-ledger"
    )
    writes = len(kube_api.writes("clusterqueues"))

    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.REFUSED
    assert "Argo CD application quotas" in change.api_answer["message"]
    # Only the preview's dry run ever reached the server.
    assert len(kube_api.writes("clusterqueues")) == writes


def test_another_field_manager_owning_resource_groups_counts_as_gitops(
    kube_api: Any, synced: Any
) -> None:
    from quotas.writeback.gitops import gitops_owner

    live = kube_api.get("ClusterQueue", "team-a")
    live["metadata"]["managedFields"] = [
        {
            "manager": "helm",
            "operation": "Update",
            "time": "2026-08-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:resourceGroups": {}}},
        }
    ]
    owner = gitops_owner(live)
    assert owner is not None and owner.name == "helm"
    live["metadata"]["managedFields"][0]["manager"] = "kubectl-edit"
    assert gitops_owner(live) is None


def test_a_read_only_cluster_refuses_and_skips_the_dry_run(
    kube_api: Any, synced: Any, admin_user: Any
) -> None:
    synced.quota_write_enabled = False
    synced.save()
    change = service.preview(
        cluster_queue=_queue(),
        changes=[_cell("h100", "12", "8", "8")],
        stop_policy=None,
        reason="shrink",
        user=admin_user,
    )
    assert "skipped" in change.dry_run
    service.apply(change, admin_user)
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.REFUSED
    assert kube_api.writes("clusterqueues") == []


def test_transient_errors_are_retried(
    kube_api: Any, synced: Any, admin_user: Any, settings
) -> None:
    change = service.preview(
        cluster_queue=_queue(),
        changes=[_cell("h100", "12", "8", "8")],
        stop_policy=None,
        reason="shrink",
        user=admin_user,
    )
    kube_api.fail("/clusterqueues/team-a", 503, method="PATCH", times=1)
    service.apply(change, admin_user)
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED
    assert change.api_answer["attempts"] == 2


def test_without_the_permission_nobody_applies(
    kube_api: Any, synced: Any, admin_user: Any, django_user_model: Any
) -> None:
    staff = django_user_model.objects.create_user(username="staff-only", is_staff=True)
    change = service.preview(
        cluster_queue=_queue(),
        changes=[_cell("h100", "12", "8", "8")],
        stop_policy=None,
        reason="shrink",
        user=admin_user,
    )
    with pytest.raises(PermissionDenied):
        service.apply(change, staff)
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.PREVIEWED
    assert len(kube_api.writes("clusterqueues")) == 1  # the dry run only


def test_a_lead_request_is_approved_and_the_lead_told(
    kube_api: Any, synced: Any, admin_user: Any, django_user_model: Any
) -> None:
    lead = django_user_model.objects.create_user(username="lead-a", email="lead@example.com")
    Team.objects.get(name="team-a").leads.add(lead)
    change = service.preview(
        cluster_queue=_queue(),
        changes=[_cell("a100", "12", "8", "4")],
        stop_policy=None,
        reason="eval jobs need a100",
        user=lead,
        request_only=True,
    )
    assert change.status == QuotaChangeStatus.REQUESTED
    with pytest.raises(PermissionDenied):
        service.decide(change, lead, approve=True)

    service.decide(change, admin_user, approve=True, comment="ok for a month")

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED
    assert change.decided_by == admin_user
    assert [m.to for m in mail.outbox] == [["lead@example.com"]]
    assert "Applied" in mail.outbox[0].subject
    live = kube_api.get("ClusterQueue", "team-a")
    assert live["spec"]["resourceGroups"][0]["flavors"][1]["resources"][2]["nominalQuota"] == "12"


def test_a_declined_request_needs_a_comment_and_writes_nothing(
    kube_api: Any, synced: Any, admin_user: Any, django_user_model: Any
) -> None:
    lead = django_user_model.objects.create_user(username="lead-b", email="b@example.com")
    change = service.preview(
        cluster_queue=_queue("team-b"),
        changes=[_cell("h100", "16", "8", "4")],
        stop_policy=None,
        reason="please",
        user=lead,
        request_only=True,
    )
    with pytest.raises(EditError):
        service.decide(change, admin_user, approve=False)
    service.decide(change, admin_user, approve=False, comment="no room this quarter")
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.DECLINED
    assert mail.outbox[0].to == ["b@example.com"]
    assert len(kube_api.writes("clusterqueues")) == 1  # its dry run


def test_the_sync_marks_applied_changes_observed_and_records_changes_made_elsewhere(
    kube_api: Any, synced: Any, admin_user: Any
) -> None:
    change = service.preview(
        cluster_queue=_queue(),
        changes=[_cell("h100", "12", "8", "8")],
        stop_policy=None,
        reason="shrink",
        user=admin_user,
    )
    service.apply(change, admin_user)

    def by_hand(obj: dict) -> None:
        obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = "10"
        obj["metadata"]["managedFields"] = [
            {
                "manager": "kubectl-edit",
                "operation": "Update",
                "time": "2026-08-22T12:30:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:resourceGroups": {}}},
            }
        ]

    sync_cluster(synced.pk)
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED_OBSERVED
    assert change.observed_at is not None
    assert not QuotaChange.objects.filter(source=QuotaChangeSource.OBSERVED).exists()

    kube_api.modify("ClusterQueue", "team-b", by_hand)
    sync_cluster(synced.pk)
    observed = QuotaChange.objects.get(source=QuotaChangeSource.OBSERVED)
    assert observed.target_name == "team-b"
    assert observed.field_manager == "kubectl-edit"
    assert observed.before == [_cell("h100", "8", "8", "4")]
    assert observed.after == [_cell("h100", "10", "8", "4")]
    # A second sync of the same state records nothing more.
    sync_cluster(synced.pk)
    assert QuotaChange.objects.filter(source=QuotaChangeSource.OBSERVED).count() == 1


def test_a_cohorts_own_quota_is_written_the_same_way(
    kube_api: Any, synced: Any, admin_user: Any
) -> None:
    from quotas.models import Cohort

    live_before = kube_api.get("Cohort", "research")
    change = service.preview(
        cohort=Cohort.objects.get(name="research"),
        changes=[_cell("a100", "12", None, None)],
        stop_policy=None,
        reason="grow the shared a100 pool",
        user=admin_user,
    )
    assert change.dry_run == {"ok": True}
    assert change.before == [_cell("a100", "8", None, None)]
    service.apply(change, admin_user)

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED
    sent = kube_api.writes("cohorts")[-1]
    expected = live_before["spec"]["resourceGroups"]
    expected[0]["flavors"][0]["resources"][2]["nominalQuota"] = "12"
    assert sent.json == {
        "spec": {"resourceGroups": expected},
        "metadata": {"resourceVersion": live_before["metadata"]["resourceVersion"]},
    }
    assert sent.query == {"fieldManager": "gpu-ledger"}

    # The sync sees it: applied and observed. Then someone edits the pool with kubectl.
    sync_cluster(synced.pk)
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED_OBSERVED

    def by_hand(obj: dict) -> None:
        obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = "4"
        obj["metadata"]["managedFields"] = [
            {
                "manager": "kubectl-patch",
                "operation": "Update",
                "time": "2026-08-22T13:00:00Z",
                "fieldsV1": {"f:spec": {"f:resourceGroups": {}}},
            }
        ]

    kube_api.modify("Cohort", "research", by_hand)
    sync_cluster(synced.pk)
    observed = QuotaChange.objects.get(source=QuotaChangeSource.OBSERVED)
    assert (observed.target_kind, observed.target_name) == ("Cohort", "research")
    assert observed.field_manager == "kubectl-patch"
    assert observed.before == [_cell("a100", "12", None, None)]
    assert observed.after == [_cell("a100", "4", None, None)]
