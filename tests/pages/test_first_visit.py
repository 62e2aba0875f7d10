"""What a first visit gets right: the user menu names the user's role, a finished workload
says what it held (not "0 GPUs held"), and a pending one where it stands; in Chromium too."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from dashboard.views.workloads import peak_gpus
from quotas.choices import WorkloadState
from quotas.models import Allocation, Team
from tests.pages.quota_pages.world import NOW, build_world


@pytest.fixture
def world(cluster, lead_user, beta_lead, time_machine):
    time_machine.move_to(NOW, tick=False)
    return build_world(cluster, lead_user, beta_lead, NOW)


@pytest.fixture
def beta_lead(django_user_model):
    return django_user_model.objects.create_user(username="beta-lead", password="beta-password")


@pytest.fixture
def finance_user(db, django_user_model):
    user = django_user_model.objects.create_user(username="fin", password="fin-password")
    user.groups.add(Group.objects.create(name=settings.GPULEDGER_FINANCE_GROUP))
    return user


def role_line(client) -> str:
    body = client.get(reverse("dashboard:team-list")).content.decode()
    return body.split('data-testid="user-role">', 1)[1].split("</p>", 1)[0]


# --- The user menu --------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_menu_names_staff(login_client, staff_user):
    assert role_line(login_client(staff_user)) == "Staff: sees every team"


@pytest.mark.django_db
def test_the_menu_names_the_finance_role_not_team_lead(login_client, finance_user):
    assert role_line(login_client(finance_user)) == (
        "Finance: sees every team&#x27;s figures and chargeback"
    )


@pytest.mark.django_db
def test_the_menu_names_the_teams_a_lead_leads(login_client, lead_user):
    for name in ("zeta", "alpha", "mu", "beta"):
        Team.objects.create(name=name).leads.add(lead_user)
    Team.objects.create(name="other")

    assert role_line(login_client(lead_user)) == ("Team lead of alpha, beta, mu and 1 more")


@pytest.mark.django_db
def test_a_finance_member_who_leads_a_team_is_named_both(login_client, finance_user):
    Team.objects.create(name="ledger", display_name="Ledger team").leads.add(finance_user)

    line = role_line(login_client(finance_user))

    assert line.startswith("Finance: ")
    assert line.endswith("; Team lead of Ledger team")


@pytest.mark.django_db
def test_a_member_who_leads_no_team_is_told_what_they_see(login_client, lead_user):
    client = login_client(lead_user)

    assert role_line(client) == "Member: leads no team; sees fleet totals"
    with override_settings(GPULEDGER_TEAM_VISIBILITY="public"):
        assert role_line(client) == "Member: leads no team; sees every team&#x27;s figures"


# --- A finished workload's GPUs -------------------------------------------------------------


def pod(start_hours: float, end_hours: float | None, gpus: float) -> SimpleNamespace:
    return SimpleNamespace(
        started_at=NOW - timedelta(hours=start_hours),
        ended_at=None if end_hours is None else NOW - timedelta(hours=end_hours),
        gpus=gpus,
    )


def test_the_peak_counts_pods_that_overlap():
    assert peak_gpus([pod(10, 5, 4), pod(8, 2, 4), pod(3, 1, 2)]) == 8


def test_a_pod_that_ends_as_another_starts_hands_its_gpus_over():
    # A gang re-admitted on the minute its old pods ended held 8, never 16.
    assert peak_gpus([pod(10, 5, 8), pod(5, 1, 8)]) == 8


def test_pods_still_running_hold_until_now():
    assert peak_gpus([pod(10, None, 4), pod(9, 8, 2), pod(1, None, 4)]) == 8
    assert peak_gpus([]) == 0


def finished_with_pods(world, cluster):
    """a4 finished 30 hours ago; its pods: 2 x 4 GPUs, one re-created when the first ended."""
    a4 = world.wl["a4"]
    a4.admitted_gpus = 0.0  # as the sync stores a finished workload: it holds nothing now
    a4.flavors = {"nvidia.com/gpu": "h100"}
    a4.save(update_fields=["admitted_gpus", "flavors"])
    for name, start, end in (("a", 40, 35), ("b", 39, 30), ("c", 35, 30)):
        Allocation.objects.create(
            cluster=cluster,
            namespace="team-a",
            pod=f"tokenizer-bench-{name}",
            node_name="gpu-node-1",
            gpus=4,
            workload=a4,
            started_at=world.now - timedelta(hours=start),
            ended_at=world.now - timedelta(hours=end),
        )
    return a4


@pytest.mark.django_db
def test_a_finished_workload_shows_the_gpus_it_held_at_its_peak(lead_client, world, cluster):
    a4 = finished_with_pods(world, cluster)

    response = lead_client.get(reverse("dashboard:workload-detail", args=[a4.pk]))

    card = {s["testid"]: s for s in response.context["stats"]}["stat-gpus"]
    assert card["label"] == "GPUs at peak"
    assert card["value"] == "8"
    assert card["note"] == (
        "held at once by its pods while it ran; holds none now; requested 8, h100"
    )


@pytest.mark.django_db
def test_a_finished_workload_no_pod_was_seen_for_says_so(lead_client, world):
    a4 = world.wl["a4"]

    response = lead_client.get(reverse("dashboard:workload-detail", args=[a4.pk]))

    card = {s["testid"]: s for s in response.context["stats"]}["stat-gpus"]
    assert (card["label"], card["value"]) == ("GPUs at peak", "0")
    assert card["note"].startswith("no pod of it was seen holding GPUs; requested 8")


@pytest.mark.django_db
def test_running_and_waiting_workloads_still_show_what_they_hold_now(lead_client, world):
    for key, held in (("a1", world.wl["a1"].admitted_gpus), ("a3", 0.0)):
        response = lead_client.get(reverse("dashboard:workload-detail", args=[world.wl[key].pk]))
        card = {s["testid"]: s for s in response.context["stats"]}["stat-gpus"]
        assert (card["label"], card["value"]) == ("GPUs held", f"{held:g}")
    assert world.wl["a1"].state == WorkloadState.ADMITTED


# --- In Chromium ----------------------------------------------------------------------------


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
