"""Quota change pages and the admin without a browser: who may edit, request, apply, decide;
quantities shown as Kubernetes quantities; no Delete for synced objects; a read-only audit."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from quotas.choices import QuotaChangeStatus
from quotas.models import ClusterQueue, Cohort, QuotaChange, Team

# Every test starts from cluster gpu-east synced from the recorded fleet on `kube`.
pytestmark = pytest.mark.usefixtures("gpu_east")

GPU = "nvidia.com/gpu"


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def quota_admin(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_superuser("root", password="pw")
    return user


@pytest.fixture
def plain_staff(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("staff", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_clusterqueue"))
    return user


@pytest.fixture
def lead(django_user_model: Any, gpu_east: Any) -> Any:
    user = django_user_model.objects.create_user("lead-a", email="lead@example.com")
    Team.objects.get(name="team-a").leads.add(user)
    return user


def _form(queue: ClusterQueue, **values: str) -> dict[str, str]:
    """The edit form as the page renders it, with some values changed."""
    from quotas.writeback.state import synced_cells

    data = {"reason": values.pop("reason", "a reason"), "stop_policy": "None"}
    for index, cell in enumerate(synced_cells(queue)):
        for name in ("nominal", "borrowing_limit", "lending_limit"):
            data[f"q{index}_{name}"] = getattr(cell, name) or ""
        key = f"{cell.flavor}_{cell.resource.replace('/', '_').replace('.', '_')}"
        if key in values:
            data[f"q{index}_nominal"] = values[key]
    return data


def test_the_admin_shows_quantities_and_no_delete_even_to_superusers(kube, quota_admin) -> None:
    queue = ClusterQueue.objects.get(name="team-a")
    page = _client(quota_admin).get(reverse("admin:quotas_clusterqueue_change", args=[queue.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert "16.000000" not in html and "4Ti" in html and "512Gi" in html
    assert "deletelink" not in html
    assert 'data-testid="edit-quotas"' in html
    cohort = Cohort.objects.get(name="research")
    page = _client(quota_admin).get(reverse("admin:quotas_cohort_change", args=[cohort.pk]))
    assert 'data-testid="edit-quotas"' in page.content.decode()
    assert "deletelink" not in page.content.decode()


def test_a_cohorts_own_quota_is_edited_in_the_admin_like_a_queues(kube, quota_admin) -> None:
    from quotas.writeback.forms import cohort_cells

    # Given the explicit cohort "research" with its own quota
    cohort = Cohort.objects.get(name="research")
    edit_url = reverse("admin:quotas_cohort_edit_quotas", args=[cohort.pk])
    client = _client(quota_admin)
    page = client.get(edit_url)
    html = page.content.decode()
    assert page.status_code == 200
    assert "Edit the own quota of cohort research" in html
    assert 'name="stop_policy"' not in html  # a Cohort has no stopPolicy

    # When its first quota is doubled and saved
    cells = cohort_cells(cohort)
    data = {"reason": "more for the pool"}
    for index, cell in enumerate(cells):
        for name in ("nominal", "borrowing_limit", "lending_limit"):
            data[f"q{index}_{name}"] = getattr(cell, name) or ""
    data["q0_nominal"] = str(int(cells[0].nominal) * 2)
    answer = client.post(edit_url, data)

    # Then the change is previewed for the Cohort, and the admin goes to its page
    change = QuotaChange.objects.get()
    assert (change.target_kind, change.target_name) == ("Cohort", "research")
    assert change.status == QuotaChangeStatus.PREVIEWED
    assert answer.status_code == 302
    assert answer["Location"] == reverse("dashboard:quota-change-detail", args=[change.pk])


def test_staff_without_the_permission_neither_edits_nor_applies(
    kube, plain_staff, quota_admin
) -> None:
    queue = ClusterQueue.objects.get(name="team-a")
    client = _client(plain_staff)
    page = client.get(reverse("admin:quotas_clusterqueue_change", args=[queue.pk]))
    assert page.status_code == 200 and 'data-testid="edit-quotas"' not in page.content.decode()
    edit_url = reverse("admin:quotas_clusterqueue_edit_quotas", args=[queue.pk])
    assert client.get(edit_url).status_code == 403
    new_url = reverse("dashboard:quota-change-new", args=["gpu-east", "team-a"])
    assert client.post(new_url, _form(queue, h100_nvidia_com_gpu="12")).status_code == 403
    # A previewed change stays unapplied when they press Apply.
    answer = _client(quota_admin).post(
        reverse("admin:quotas_clusterqueue_edit_quotas", args=[queue.pk]),
        _form(queue, h100_nvidia_com_gpu="12"),
    )
    change = QuotaChange.objects.get()
    assert answer.status_code == 302
    assert answer["Location"] == reverse("dashboard:quota-change-detail", args=[change.pk])
    apply_url = reverse("dashboard:quota-change-apply", args=[change.pk])
    assert client.post(apply_url, {"action": "apply"}).status_code == 403
    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.PREVIEWED


def test_the_edit_form_shows_errors_on_the_fields_they_concern(kube, quota_admin) -> None:
    queue = ClusterQueue.objects.get(name="team-a")
    page = _client(quota_admin).post(
        reverse("admin:quotas_clusterqueue_edit_quotas", args=[queue.pk]),
        _form(queue, h100_nvidia_com_gpu="12 GPUs", reason=""),
    )
    html = page.content.decode()
    assert page.status_code == 200
    assert "This field is required" in html
    assert not QuotaChange.objects.exists()
    page = _client(quota_admin).post(
        reverse("admin:quotas_clusterqueue_edit_quotas", args=[queue.pk]),
        _form(queue, h100_nvidia_com_gpu="12 GPUs"),
    )
    assert "is not a Kubernetes quantity" in page.content.decode()


def test_a_lead_requests_for_their_queue_only_and_cannot_apply(kube, lead) -> None:
    client = _client(lead)
    team_page = client.get(reverse("dashboard:team-detail", args=["team-a"]))
    assert 'data-testid="request-quota-team-a"' in team_page.content.decode()
    queue = ClusterQueue.objects.get(name="team-a")
    answer = client.post(
        reverse("dashboard:quota-change-new", args=["gpu-east", "team-a"]),
        _form(queue, a100_nvidia_com_gpu="12"),
    )
    change = QuotaChange.objects.get()
    assert answer.status_code == 302
    assert change.status == QuotaChangeStatus.REQUESTED
    detail = client.get(reverse("dashboard:quota-change-detail", args=[change.pk])).content.decode()
    assert "Waiting for a quota admin" in detail and "approve-button" not in detail
    apply_url = reverse("dashboard:quota-change-apply", args=[change.pk])
    assert client.post(apply_url, {"action": "approve"}).status_code == 403
    other = ClusterQueue.objects.get(name="team-b")
    # Another team's queue is refused as a missing one (dashboard.access).
    assert (
        client.get(reverse("dashboard:quota-change-new", args=["gpu-east", other.name])).status_code
        == 404
    )


def test_the_patch_downloads_as_yaml_and_the_audit_is_read_only(kube, quota_admin) -> None:
    queue = ClusterQueue.objects.get(name="team-a")
    client = _client(quota_admin)
    client.post(
        reverse("admin:quotas_clusterqueue_edit_quotas", args=[queue.pk]),
        _form(queue, h100_nvidia_com_gpu="12"),
    )
    change = QuotaChange.objects.get()
    download = client.get(reverse("dashboard:quota-change-patch", args=[change.pk]))
    assert download["Content-Type"].startswith("application/yaml")
    assert "attachment" in download["Content-Disposition"]
    assert b"nominalQuota: '12'" in download.content
    admin_page = client.get(reverse("admin:quotas_quotachange_change", args=[change.pk]))
    assert admin_page.status_code == 200
    html = admin_page.content.decode()
    assert 'name="_save"' not in html and "deletelink" not in html
    listing = client.get(
        reverse("admin:quotas_quotachange_changelist") + "?status__exact=requested"
    )
    assert listing.status_code == 200
    history = client.get(reverse("dashboard:quota-change-list") + f"?queue={queue.pk}")
    assert f"#{change.pk}" in history.content.decode()


def test_rows_left_as_shown_do_not_revert_changes_made_since_the_sync(kube, quota_admin) -> None:
    # Given a CPU quota changed upstream after the last sync,
    def more_cpu(obj: dict) -> None:
        obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "400"

    kube.modify("ClusterQueue", "team-a", more_cpu)
    queue = ClusterQueue.objects.get(name="team-a")
    # when the admin edits only the H100 GPUs on the form built from the synced values,
    _client(quota_admin).post(
        reverse("admin:quotas_clusterqueue_edit_quotas", args=[queue.pk]),
        _form(queue, h100_nvidia_com_gpu="12"),
    )
    # then the change and the dry-run write carry the GPU edit and the live CPU quota.
    change = QuotaChange.objects.get()
    assert [(c["flavor"], c["resource"]) for c in change.after] == [("h100", GPU)]
    sent = kube.writes("clusterqueues")[-1]
    h100 = sent.json["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert h100[0]["nominalQuota"] == "400"
    assert h100[2]["nominalQuota"] == "12"
