"""Quota administration in headless Chromium, against the loopback Kubernetes API server:
an admin edits a ClusterQueue in the admin, previews and applies; a team lead requests a change
from the team page and an admin approves it from the worklist. Screenshots go to
``$GPULEDGER_SCREENSHOTS`` when set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core import mail
from django.urls import reverse

from quotas.choices import QuotaChangeStatus
from quotas.models import ClusterQueue, QuotaChange, Team
from quotas.sync import sync_cluster
from tests.kube_api_server import FakeKubeAPI

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _shot(page: Any, name: str) -> None:
    folder = os.environ.get("GPULEDGER_SCREENSHOTS")
    if folder:
        page.set_viewport_size({"width": 1440, "height": 900})
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


@pytest.fixture
def fleet(kube: FakeKubeAPI) -> Any:
    from fleet.models import Cluster

    cluster = Cluster.objects.create(name="gpu-east", quota_write_enabled=True)
    sync_cluster(cluster.pk)
    return cluster


@pytest.fixture
def quota_admin(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user(
        username="quota-admin", password="pw", is_staff=True, email="admin@example.com"
    )
    user.user_permissions.add(
        Permission.objects.get(codename="apply_quota_change"),
        Permission.objects.get(codename="view_clusterqueue"),
    )
    return user


def test_admin_edits_previews_and_applies_and_the_audit_trail_shows_it(
    page: Any,
    live_server: Any,
    browser_login: Any,
    fleet: Any,
    kube: FakeKubeAPI,
    quota_admin: Any,
    console_errors: list[str],
) -> None:
    queue = ClusterQueue.objects.get(name="team-a")
    browser_login(page, live_server.url, quota_admin)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server.url + reverse("admin:quotas_clusterqueue_change", args=[queue.pk]))
    # Quantities, not stored decimals; no Delete on a synced object.
    assert "16.000000" not in page.content()
    assert page.locator("a.deletelink").count() == 0
    page.click("[data-testid=edit-quotas]")
    _shot(page, "quota-admin-edit")
    page.fill("[data-cell='h100/nvidia.com/gpu/nominal']", "8000m")
    page.fill("textarea[name=reason]", "team-a moves eval work to a100")
    page.click("[data-testid=preview-button]")

    page.wait_for_selector("[data-testid=dry-run]")
    assert "accepts this write" in page.inner_text("[data-testid=dry-run]")
    # 16 -> 8: A2 stays admitted, 12 GPUs above nominal (README: A1 8 then A2 12 admitted).
    borrowers = page.inner_text("[data-testid=borrowers-after]")
    assert "team-a/jobset-mixtral-ft-7f630" in borrowers
    assert "does not evict" in page.inner_text("[data-testid=no-eviction]")
    assert "kubectl patch" in page.inner_text("[data-testid=kubectl]")
    _shot(page, "quota-preview")
    page.click("[data-testid=apply-button]")

    page.wait_for_selector("[data-testid=api-answer]")
    assert page.inner_text("[data-testid=change-status]") == "Applied, not yet observed"
    sent = kube.writes("clusterqueues")[-1]
    assert "dryRun" not in sent.query
    assert sent.json["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2] == {
        "borrowingLimit": "8",
        "lendingLimit": "8",
        "name": "nvidia.com/gpu",
        "nominalQuota": "8",
    }
    _shot(page, "quota-applied")

    page.goto(live_server.url + reverse("dashboard:quota-change-list") + f"?queue={queue.pk}")
    trail = page.inner_text("[data-testid=audit-trail]")
    assert "Applied, not yet observed" in trail
    assert "nominal 16→8" in trail
    _shot(page, "quota-history")
    assert console_errors == []


def test_a_lead_requests_and_an_admin_approves(
    page: Any,
    live_server: Any,
    browser_login: Any,
    fleet: Any,
    kube: FakeKubeAPI,
    quota_admin: Any,
    django_user_model: Any,
    console_errors: list[str],
) -> None:
    lead = django_user_model.objects.create_user(username="lead-a", email="lead@example.com")
    Team.objects.get(name="team-a").leads.add(lead)
    browser_login(page, live_server.url, lead)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server.url + reverse("dashboard:team-detail", args=["team-a"]))
    page.click("[data-testid=request-quota-team-a]")
    page.fill("[data-cell='a100/nvidia.com/gpu/nominal']", "12")
    page.fill("textarea[name=reason]", "eval jobs need a100 this month")
    _shot(page, "quota-request-form")
    page.click("[data-testid=preview-button]")
    page.wait_for_selector("[data-testid=change-status]")
    assert page.inner_text("[data-testid=change-status]") == "Requested by a team lead"
    assert page.locator("[data-testid=apply-button]").count() == 0
    assert page.locator("[data-testid=approve-button]").count() == 0
    # Only the dry run reached the API server.
    assert [w.query.get("dryRun") for w in kube.writes("clusterqueues")] == ["All"]

    page.context.clear_cookies()
    browser_login(page, live_server.url, quota_admin)
    page.goto(live_server.url + reverse("dashboard:quota-change-list"))
    page.click("[data-testid=worklist] a")
    _shot(page, "quota-request-decide")
    page.fill("#decision-comment", "ok for a month")
    page.click("[data-testid=approve-button]")
    page.wait_for_selector("[data-testid=api-answer]")
    assert page.inner_text("[data-testid=change-status]") == "Applied, not yet observed"
    change = QuotaChange.objects.get()
    assert change.status == QuotaChangeStatus.APPLIED
    assert change.requested_by == lead and change.decided_by == quota_admin
    assert mail.outbox[-1].to == ["lead@example.com"]
    live = kube.get("ClusterQueue", "team-a")
    assert live["spec"]["resourceGroups"][0]["flavors"][1]["resources"][2]["nominalQuota"] == "12"
    assert console_errors == []


def test_conflicts_refusals_and_invalid_values_are_shown(
    page: Any,
    live_server: Any,
    browser_login: Any,
    fleet: Any,
    kube: FakeKubeAPI,
    quota_admin: Any,
    console_errors: list[str],
) -> None:
    browser_login(page, live_server.url, quota_admin)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(
        live_server.url + reverse("dashboard:cluster-queue-detail", args=["gpu-east", "team-b"])
    )
    _shot(page, "queue-page")
    new_url = live_server.url + reverse("dashboard:quota-change-new", args=["gpu-east", "team-b"])

    # 1. The API server refuses a value: its causes are listed per field.
    kube.validators.append(
        lambda resource, obj: (
            [
                {
                    "reason": "FieldValueInvalid",
                    "message": "team-b may not hold more than 32 H100",
                    "field": "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota",
                }
            ]
            if obj["metadata"]["name"] == "team-b"
            and obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"]
            == "40"
            else []
        )
    )
    page.goto(new_url)
    page.fill("[data-cell='h100/nvidia.com/gpu/nominal']", "40")
    page.fill("textarea[name=reason]", "big run")
    page.click("[data-testid=preview-button]")
    causes = page.inner_text("[data-testid=dry-run-causes]")
    assert "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota" in causes
    assert "may not hold more than 32 H100" in causes
    _shot(page, "quota-dry-run-422")

    # 2. Someone changes the queue between preview and apply: a conflict, nothing forced.
    page.goto(new_url)
    page.fill("[data-cell='h100/nvidia.com/gpu/nominal']", "10")
    page.fill("textarea[name=reason]", "a little more")
    page.click("[data-testid=preview-button]")
    page.wait_for_selector("[data-testid=apply-button]")

    def someone_else(obj: dict) -> None:
        obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = "9"

    kube.modify("ClusterQueue", "team-b", someone_else)
    page.click("[data-testid=apply-button]")
    page.wait_for_selector("[data-testid=live-values]")
    assert page.inner_text("[data-testid=change-status]") == "Conflict: changed meanwhile"
    assert (
        kube.get("ClusterQueue", "team-b")["spec"]["resourceGroups"][0]["flavors"][0]["resources"][
            2
        ]["nominalQuota"]
        == "9"
    )
    _shot(page, "quota-conflict")

    # 3. Flux manages the queue: no Apply, the YAML and the kubectl command offered.
    def flux(obj: dict) -> None:
        obj["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] = "kueue-queues"
        obj["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/namespace"] = "flux-system"

    kube.modify("ClusterQueue", "team-b", flux)
    page.goto(new_url)
    page.fill("[data-cell='h100/nvidia.com/gpu/nominal']", "12")
    page.fill("textarea[name=reason]", "more")
    page.click("[data-testid=preview-button]")
    assert "Flux Kustomization flux-system/kueue-queues" in page.inner_text("[data-testid=gitops]")
    assert page.locator("[data-testid=yaml-download]").count() == 1
    _shot(page, "quota-gitops")
    assert page.locator("[data-testid=apply-button]").count() == 0
    assert "kubectl patch" in page.inner_text("[data-testid=kubectl]")
    assert page.inner_text("[data-testid=change-status]").startswith("Previewed")
    assert console_errors == []
