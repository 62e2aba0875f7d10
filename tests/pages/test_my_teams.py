"""A lead's "My teams" landing on the ``build_world`` scenario: quota per flavor now, admitted
(quota) vs held by running pods, real use, idle workloads and pending work."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.db.models import Max
from django.urls import reverse

from dashboard.templatetags.formatting import figure as fmt
from ledger.models import GpuUsage
from quotas.choices import HOLDING_STATES
from quotas.models import Workload
from tests.pages.built_once import build_once
from tests.pages.quota_pages.world import NOW, new_world


@pytest.fixture(scope="module")
def module_world(django_db_setup, django_db_blocker):
    yield from build_once(django_db_blocker, lambda: new_world(NOW), NOW)


@pytest.fixture
def world(module_world, db, time_machine):
    time_machine.move_to(NOW, tick=False)
    return copy.deepcopy(module_world)


@pytest.fixture
def lead_user(world):
    return world.lead


def held_by_pods(team) -> float:
    newest = GpuUsage.objects.aggregate(end=Max("window_end"))["end"]
    rows = GpuUsage.objects.filter(window_end=newest, allocated=True, team=team)
    return sum(row.gpus for row in rows)


@pytest.mark.django_db
def test_a_lead_sees_each_team_with_quota_per_flavor_and_both_allocations(lead_client, world):
    response = lead_client.get(reverse("dashboard:my-teams"))

    assert response.status_code == 200
    (card,) = response.context["cards"]
    assert card["team"] == world.alpha
    flavors = {row["flavor"]: row for row in card["flavors"]}
    # team-a's newest h100 sample: 20 in use of 16 nominal, 4 borrowed.
    assert flavors["h100"]["nominal"] == "16"
    assert flavors["h100"]["admitted"] == "20"
    assert flavors["h100"]["share"] == "125.0"
    assert flavors["h100"]["borrowed"] == "4"
    assert flavors["a100"]["nominal"] == "8"
    assert flavors["a100"]["share"] == "0.0"
    holding = Workload.objects.filter(cluster_queue=world.cq_a, state__in=HOLDING_STATES)
    assert card["admitted"] == fmt(sum(w.admitted_gpus for w in holding))
    assert card["held"] == fmt(held_by_pods(world.alpha))
    pending = [world.wl["a3"], world.wl["a5"]]
    assert card["pending"]["count"] == len(pending)
    assert card["pending"]["gpus"] == sum(w.requested_gpus for w in pending)
    # a2 spent 9 of every 12 GPU-hours idle (75 %); a1 0.5 of 8.
    assert [row["workload"] for row in card["idle"]] == [world.wl["a2"]]
    body = response.content.decode()
    assert reverse("dashboard:overview") in body


@pytest.mark.django_db
def test_someone_who_leads_nothing_is_told_so_and_where_to_go(staff_client, world):
    response = staff_client.get(reverse("dashboard:my-teams"))

    assert response.status_code == 200
    body = response.content.decode()
    assert 'data-testid="no-teams"' in body
    assert reverse("dashboard:overview") in body


def test_signing_in_lands_staff_on_the_overview(client, staff_user, world):
    staff_user.set_password("staff-password")
    staff_user.save()

    response = client.post(
        reverse("login"), {"username": staff_user.username, "password": "staff-password"}
    )

    assert response["Location"] == "/"


@pytest.mark.django_db
def test_signing_in_lands_a_lead_on_my_teams(client, lead_user, world):
    lead_user.set_password("lead-password")
    lead_user.save()

    response = client.post(
        reverse("login"), {"username": lead_user.username, "password": "lead-password"}
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:my-teams")


@pytest.mark.django_db
def test_the_team_page_names_both_allocations_and_shows_quota_per_flavor(lead_client, world):
    response = lead_client.get(reverse("dashboard:team-detail", args=["alpha"]))

    stats = {s.get("testid"): s for s in response.context["stats"]}
    holding = Workload.objects.filter(cluster_queue=world.cq_a, state__in=HOLDING_STATES)
    assert stats["stat-allocated-now"]["label"] == "Admitted now (quota)"
    assert stats["stat-allocated-now"]["value"] == fmt(sum(w.admitted_gpus for w in holding))
    assert stats["stat-held-now"]["label"] == "Held by running pods"
    assert stats["stat-held-now"]["value"] == fmt(held_by_pods(world.alpha))
    flavors = {row["flavor"]: row for row in response.context["flavors"]}
    assert flavors["h100"]["share"] == "125.0" and flavors["h100"]["over"] is True
    assert flavors["a100"]["share"] == "0.0" and flavors["a100"]["over"] is False


@pytest.mark.django_db
def test_the_team_list_shows_both_allocations_and_quota_used_per_flavor(staff_client, world):
    response = staff_client.get(reverse("dashboard:team-list"))

    rows = {row["team"].name: row for row in response.context["rows"]}
    assert rows["alpha"]["held"] == fmt(held_by_pods(world.alpha))
    shares = {f["flavor"]: f["share"] for f in rows["alpha"]["flavors"]}
    assert shares == {"h100": "125.0", "a100": "0.0"}
    # team-b: its holding workloads were admitted 2 + 8 of its 8 nominal h100; its newest sample
    # says 2, but admitted now counts the workloads, as every page does (quotas.now).
    assert {f["flavor"]: f["share"] for f in rows["beta"]["flavors"]}["h100"] == "125.0"


@pytest.mark.django_db
def test_my_teams_lists_the_open_alerts_of_the_lead_s_teams_only(lead_client, world):
    from alerts.models import Episode

    def episode(team, queue, workload, summary):
        started = NOW - timedelta(hours=3)
        return Episode.objects.create(
            rule="idle_workload",
            severity="critical",
            cluster=queue.cluster,
            team=team,
            cluster_queue=queue,
            namespace=workload.namespace,
            workload=workload,
            gpus=2,
            subject_key=f"workload:{workload.pk}",
            started_at=started,
            fired_at=started + timedelta(hours=1),
            evaluated_until=NOW,
            idle_gpu_hours=6.0,
            held_gpu_hours=6.0,
            summary=summary,
        )

    ours = episode(world.alpha, world.cq_a, world.wl["a2"], "alpha notebook idles")
    theirs = episode(world.beta, world.cq_b, world.wl["b1"], "beta job idles")
    resolved = episode(world.alpha, world.cq_a, world.wl["a1"], "alpha job idled once")
    Episode.objects.filter(pk=resolved.pk).update(resolved_at=NOW - timedelta(hours=1))

    body = lead_client.get(reverse("dashboard:my-teams")).content.decode()

    assert ours.summary in body
    assert reverse("dashboard:episode-detail", args=[ours.pk]) in body
    assert theirs.summary not in body
    assert resolved.summary not in body


@pytest.mark.django_db
def test_without_a_fresh_sample_borrowed_is_unknown_per_flavor_as_on_the_card(lead_client, world):
    from quotas.models import ClusterQueueSample

    ClusterQueueSample.objects.filter(cluster_queue__team=world.alpha).delete()
    page = lead_client.get(reverse("dashboard:team-detail", args=[world.alpha.name]))
    flavors = {row["flavor"]: row for row in page.context["flavors"]}
    stats = {card["testid"]: card for card in page.context["stats"]}
    # Admitted still over nominal (from the workloads), but how much is borrowed is unknown:
    # "—" in the flavor table as on the card, not a 0 beside a "borrowing" badge.
    assert flavors["h100"]["admitted"] == "20" and flavors["h100"]["over"]
    assert stats["stat-borrowed"]["value"] == "—"
    assert {row["borrowed"] for row in flavors.values()} == {"—"}
