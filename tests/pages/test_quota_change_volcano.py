"""The quota edit pages for a Volcano queue: the form says where its values go and has no stop
policy, the preview names the Volcano Queue, and Apply writes it (Django's test client, then
headless Chromium; screenshots go to ``$GPULEDGER_SCREENSHOTS`` when set)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from fleet.models import Cluster
from quotas.choices import QuotaChangeStatus
from quotas.models import QuotaChange
from quotas.sync import sync_cluster
from tests.scheduler_fixtures import VOLCANO_GROUP, load_scheduler_fixtures

QUEUE = f"Queue.{VOLCANO_GROUP}"
GPU = "nvidia.com/gpu"


@pytest.fixture
def volcano_api(make_kube_api: Any) -> Any:
    api = make_kube_api(load=False, kueue_versions=(), volcano_versions=("v1beta1",))
    return load_scheduler_fixtures(api, "volcano")


def _synced() -> Cluster:
    cluster = Cluster.objects.create(name="gpu-volcano", quota_write_enabled=True)
    assert sync_cluster(cluster.pk).status == "success"
    return cluster


@pytest.fixture
def volcano(volcano_api: Any, db: None) -> Cluster:
    return _synced()


def test_a_volcano_queues_quota_is_edited_previewed_and_applied_from_its_page(
    volcano_api: Any, volcano: Cluster, django_user_model: Any
) -> None:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    url = reverse("dashboard:quota-change-new", args=["gpu-volcano", "team-v1"])

    page = client.get(url)
    html = page.content.decode()
    assert page.status_code == 200
    assert 'data-testid="source-note"' in html
    assert "queues.scheduling.volcano.sh object (scheduling.volcano.sh/v1beta1)" in html
    assert 'name="stop_policy"' not in html
    # team-v1 as synced: deserved 16, capability 32 (borrowing 16), guarantee 8 (lending 8).
    assert 'name="q0_nominal" value="16"' in html
    assert 'name="q0_borrowing_limit" value="16"' in html
    assert 'name="q0_lending_limit" value="8"' in html

    form = {
        "q0_nominal": "24",
        "q0_borrowing_limit": "16",
        "q0_lending_limit": "8",
        "reason": "team-v1's pretraining grows",
    }
    answer = client.post(url, form)
    change = QuotaChange.objects.get()
    assert answer.status_code == 302
    assert answer["Location"] == reverse("dashboard:quota-change-detail", args=[change.pk])

    detail = client.get(answer["Location"]).content.decode()
    assert "queues.scheduling.volcano.sh/team-v1" in detail
    assert "kubectl patch queues.scheduling.volcano.sh team-v1 --type=merge" in detail
    assert "apiVersion: scheduling.volcano.sh/v1beta1" in detail and "kind: Queue" in detail
    assert "The API server accepts this write" in detail

    client.post(reverse("dashboard:quota-change-apply", args=[change.pk]), {"action": "apply"})

    change.refresh_from_db()
    assert change.status == QuotaChangeStatus.APPLIED, change.api_answer
    spec = volcano_api.get(QUEUE, "team-v1")["spec"]
    # deserved 24, capability 24 + 16 = 40; the lending limit was not edited: guarantee 8 stays.
    assert spec["deserved"] == {GPU: "24"}
    assert spec["capability"] == {GPU: "40"}
    assert spec["guarantee"] == {"resource": {GPU: "8"}}


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_volcano_edit_page_in_a_browser(
    page: Any,
    live_server: Any,
    browser_login: Any,
    volcano_api: Any,
    django_user_model: Any,
    console_errors: list[str],
) -> None:
    _synced()
    admin = django_user_model.objects.create_superuser("root", password="pw")
    browser_login(page, live_server.url, admin)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(
        live_server.url + reverse("dashboard:quota-change-new", args=["gpu-volcano", "team-v2"])
    )

    assert "spec.deserved" in page.inner_text("[data-testid=source-note]")
    assert page.locator("select[name=stop_policy]").count() == 0
    page.fill(f"[data-cell='default-flavor/{GPU}/nominal']", "20")
    page.fill("textarea[name=reason]", "protein-fold needs 16 more")
    folder = os.environ.get("GPULEDGER_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / "quota-edit-volcano.png"), full_page=True)
    page.click("[data-testid=preview-button]")

    page.wait_for_selector("[data-testid=dry-run]")
    assert "accepts this write" in page.inner_text("[data-testid=dry-run]")
    assert "queues.scheduling.volcano.sh/team-v2" in page.inner_text("[data-testid=target-object]")
    assert "kubectl patch queues.scheduling.volcano.sh team-v2" in page.inner_text(
        "[data-testid=kubectl]"
    )
    assert console_errors == []
