"""Quota changes GPU Ledger does not write (a read-only cluster, a GitOps-owned queue): the
change page offers the YAML patch and the ``kubectl patch`` command and no Apply; the patch is
never empty; "Refused" is a warning; an admin approves a lead's request without applying it
("approved, apply via GitOps") and the sync closes it once the cluster carries it; a failed email
to the lead is shown to the admin. Against the loopback Kubernetes API server (fixture fleet:
tests/fixtures/kueue, ClusterQueue team-a, h100 nvidia.com/gpu nominal 16, limits 8 and 8)."""

from __future__ import annotations

import re
import socket
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core import mail
from django.test import Client
from django.urls import reverse

from quotas.choices import QuotaChangeStatus
from quotas.models import ClusterQueue, QuotaChange, Team
from quotas.sync import sync_cluster
from quotas.writeback import service

pytestmark = pytest.mark.usefixtures("gpu_east")

GPU = "nvidia.com/gpu"
ARGO = "argocd.argoproj.io/tracking-id"


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def quota_admin(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("quota-admin", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="apply_quota_change"))
    return django_user_model.objects.get(pk=user.pk)


@pytest.fixture
def lead(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("lead-a", email="lead@example.com")
    Team.objects.get(name="team-a").leads.add(user)
    return user


def _preview(user: Any, nominal: str = "12", **kwargs: Any) -> QuotaChange:
    return service.preview(
        cluster_queue=ClusterQueue.objects.get(name="team-a"),
        changes=[
            {
                "flavor": "h100",
                "resource": GPU,
                "nominal": nominal,
                "borrowing_limit": "8",
                "lending_limit": "8",
            }
        ],
        stop_policy=None,
        reason="resize team-a",
        user=user,
        **kwargs,
    )


def _detail(client: Client, change: QuotaChange) -> str:
    answer = client.get(reverse("dashboard:quota-change-detail", args=[change.pk]))
    assert answer.status_code == 200
    return answer.content.decode()


def _argo(kube: Any) -> None:
    def annotate(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("annotations", {})[ARGO] = "quotas:kueue.x-k8s.io/x:/team-a"

    kube.modify("ClusterQueue", "team-a", annotate)


@pytest.mark.parametrize("owner", ["read-only", "argocd"])
def test_a_queue_not_written_here_offers_the_patch_and_no_apply(
    kube, gpu_east, quota_admin, owner
) -> None:
    if owner == "read-only":
        gpu_east.quota_write_enabled = False
        gpu_east.save()
    else:
        _argo(kube)
    change = _preview(quota_admin)

    html = _detail(_client(quota_admin), change)

    assert 'data-testid="apply-button"' not in html
    assert 'data-testid="no-apply"' in html
    assert "nominalQuota: &#x27;12&#x27;" in html
    assert "kubectl patch clusterqueues.kueue.x-k8s.io team-a --type=merge" in html
    # A forged POST does not write either.
    _client(quota_admin).post(reverse("dashboard:quota-change-apply", args=[change.pk]))
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.PREVIEWED
    assert [w.query.get("dryRun") for w in kube.writes("clusterqueues")] == (
        [] if owner == "read-only" else ["All"]
    )


def test_the_patch_is_built_from_the_sync_when_the_live_object_cannot_be_read(
    kube, quota_admin
) -> None:
    kube.fail("/clusterqueues/team-a", 403, method="GET", times=1, message="forbidden")
    change = _preview(quota_admin, nominal="10")

    assert change.preview["live_read"] is False
    download = _client(quota_admin).get(reverse("dashboard:quota-change-patch", args=[change.pk]))
    assert download.status_code == 200
    text = download.content.decode()
    # Built from the synced quotas: the complete resourceGroups with the edited value.
    assert "nominalQuota: '10'" in text
    assert "coveredResources:" in text
    assert text.count("- name: h100") == 1 and text.count("- name: a100") == 1
    html = _detail(_client(quota_admin), change)
    assert 'data-testid="patch-from-synced"' in html


def test_a_change_without_a_patch_has_no_empty_download(kube, quota_admin) -> None:
    def someone_else(obj: dict[str, Any]) -> None:
        obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = "14"

    kube.modify("ClusterQueue", "team-a", someone_else)
    sync_cluster(ClusterQueue.objects.get(name="team-a").cluster_id)
    observed = QuotaChange.objects.get(status=QuotaChangeStatus.OBSERVED)

    download = _client(quota_admin).get(reverse("dashboard:quota-change-patch", args=[observed.pk]))
    assert download.status_code == 404
    assert 'data-testid="yaml-download"' not in _detail(_client(quota_admin), observed)


def test_refused_is_shown_as_a_warning(kube, gpu_east, quota_admin) -> None:
    change = _preview(quota_admin)
    gpu_east.quota_write_enabled = False
    gpu_east.save()
    service.apply(change, quota_admin)
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.REFUSED

    html = _detail(_client(quota_admin), change)

    status_badge = re.search(r'<span class="badge ([\w-]+)" data-testid="change-status">', html)
    assert status_badge is not None and status_badge.group(1) == "badge-warn"
    answer = re.search(r'<div class="notice ([\w-]+)" data-testid="api-answer">', html)
    assert answer is not None and answer.group(1) == "notice-warn"


def test_an_admin_approves_a_request_for_gitops_and_the_sync_closes_it(
    kube, gpu_east, quota_admin, lead
) -> None:
    _argo(kube)
    request = _preview(lead, request_only=True)
    client = _client(quota_admin)
    html = _detail(client, request)
    assert 'data-testid="approve-button"' not in html
    assert 'data-testid="approve-gitops-button"' in html

    answer = client.post(
        reverse("dashboard:quota-change-apply", args=[request.pk]),
        {"action": "approve_gitops", "comment": "commit it in the quotas repo"},
        follow=True,
    )

    request.refresh_from_db()
    assert request.status == QuotaChangeStatus.APPROVED_GITOPS
    assert request.decided_by == quota_admin and request.decided_at is not None
    assert "Approved, apply via GitOps" in answer.content.decode()
    assert [m.to for m in mail.outbox] == [["lead@example.com"]]
    assert "Approved, apply via GitOps" in mail.outbox[0].subject
    assert [w.query.get("dryRun") for w in kube.writes("clusterqueues")] == ["All"]
    # In the audit trail like any other decision.
    trail = client.get(reverse("dashboard:quota-change-list")).content.decode()
    assert "Approved, apply via GitOps" in trail

    # Argo CD syncs the committed patch; the next sync sees it and closes the change.
    def argo_sync(obj: dict[str, Any]) -> None:
        obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = "12"

    kube.modify("ClusterQueue", "team-a", argo_sync)
    sync_cluster(gpu_east.pk)
    request.refresh_from_db()
    assert request.status == QuotaChangeStatus.APPLIED_OBSERVED
    assert not QuotaChange.objects.filter(status=QuotaChangeStatus.OBSERVED).exists()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_failed_email_to_the_lead_is_shown_to_the_admin(
    kube, quota_admin, lead, settings
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", _closed_port()
    settings.EMAIL_TIMEOUT = 2
    request = _preview(lead, request_only=True)
    client = _client(quota_admin)

    answer = client.post(
        reverse("dashboard:quota-change-apply", args=[request.pk]),
        {"action": "decline", "comment": "no room this quarter"},
        follow=True,
    )

    html = answer.content.decode()
    assert "The requester was not told" in html
    assert "lead@example.com could not be sent" in html
    request.refresh_from_db()
    assert request.status == QuotaChangeStatus.DECLINED
    assert "could not be sent" in request.notify_error
    # Still shown on the change page afterwards.
    assert 'data-testid="notify-error"' in _detail(client, request)
