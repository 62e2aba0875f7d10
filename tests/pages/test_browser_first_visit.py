"""A first visit in headless Chromium: the finance user's menu, a finished workload's peak and a
pending workload's place, on a ``build_world`` scenario of its own (a live-server test needs
committed rows; ``test_first_visit.py`` shares one world)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.utils import timezone

from tests.pages.quota_pages.world import build_world, finished_with_pods


@pytest.fixture
def beta_lead(django_user_model):
    return django_user_model.objects.create_user(username="beta-lead", password="beta-password")


@pytest.fixture
def finance_user(db, django_user_model):
    user = django_user_model.objects.create_user(username="fin", password="fin-password")
    user.groups.add(Group.objects.create(name=settings.GPULEDGER_FINANCE_GROUP))
    return user


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_first_visit_pages_in_chromium(
    page, live_server, browser_login, cluster, lead_user, beta_lead, finance_user,
    console_errors, outside_requests, tmp_path,
):  # fmt: skip
    world = build_world(cluster, lead_user, beta_lead, timezone.now())
    a4 = finished_with_pods(world, cluster)
    page.set_viewport_size({"width": 1280, "height": 900})

    # The finance user's menu: finance, not "Team lead".
    browser_login(page, live_server.url, finance_user)
    page.goto(f"{live_server.url}/teams/")
    page.locator("details.usermenu summary").click()
    role = page.get_by_test_id("user-role")
    assert role.inner_text() == "Finance: sees every team's figures and chargeback"
    page.screenshot(path=str(tmp_path / "menu.png"))

    # A finished workload: what it held at its peak.
    page.goto(f"{live_server.url}/workloads/{a4.pk}/")
    card = page.get_by_test_id("stat-gpus")
    assert " ".join(card.text_content().split()).startswith("GPUs at peak 8 GPUs held at once")
    page.screenshot(path=str(tmp_path / "finished.png"))

    # A pending workload: its place from Kueue's visibility API and why it waits.
    page.goto(f"{live_server.url}/workloads/{world.wl['a3'].pk}/")
    notice = page.get_by_test_id("pending-notice")
    assert (
        notice.get_by_test_id("short-reason")
        .inner_text()
        .startswith("Needs 8 nvidia.com/gpu on h100")
    )
    assert (
        "Position 2 in ClusterQueue team-a" in notice.get_by_test_id("queue-position").inner_text()
    )
    page.screenshot(path=str(tmp_path / "pending.png"))

    # The team page's pending list says the same.
    page.goto(f"{live_server.url}/teams/alpha/?state=pending")
    line = page.locator('tr[data-workload="team-a/job-llama-eval"]').get_by_test_id("pending-line")
    assert line.inner_text().startswith("position 2 in team-a · needs 8 nvidia.com/gpu on h100")
    page.screenshot(path=str(tmp_path / "team.png"), full_page=True)

    assert outside_requests == []
    assert console_errors == []
