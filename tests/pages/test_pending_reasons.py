"""Pending reasons said short: flavor, amount needed, what is available and from where."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from django.urls import reverse

from quotas.pending import short_reason, shortfalls
from tests.pages.built_once import build_once
from tests.pages.quota_pages.world import NOW, new_world

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kueue_pending_messages.json"


def test_it_reads_every_shortfall_of_a_recorded_kueue_message():
    messages = json.loads(FIXTURE.read_text())

    found = shortfalls(messages["two_flavors"])

    assert [(s.resource, s.flavor, s.more) for s in found] == [
        ("nvidia.com/gpu", "a100", 8.0),
        ("nvidia.com/gpu", "h100", 6.0),
    ]
    assert shortfalls(messages["node_affinity_then_quota"])[0].flavor == "h100"
    assert shortfalls("Workload is inadmissible: ClusterQueue is inactive") == []


def test_it_splits_what_is_available_into_free_quota_and_cohort_lending():
    message = "insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"

    reason = short_reason(message, 16, {"h100": 5})

    # 16 needed, 8 short: 8 available, 5 of them the queue's own free quota, 3 from the cohort.
    assert reason == (
        "needs 16 nvidia.com/gpu on h100: 8 available (5 free in quota, the cohort can lend 3), "
        "8 short"
    )
    assert short_reason(message, 16, {}) == "needs 16 nvidia.com/gpu on h100: 8 available, 8 short"
    assert short_reason("", 16, {}) == ""


@pytest.fixture(scope="module")
def module_world(django_db_setup, django_db_blocker):
    yield from build_once(django_db_blocker, lambda: new_world(NOW), NOW)


@pytest.fixture
def pending_world(module_world, db, time_machine):
    time_machine.move_to(NOW, tick=False)
    return copy.deepcopy(module_world)


@pytest.fixture
def lead_user(pending_world):
    return pending_world.lead


A3_REASON = (
    "needs 8 nvidia.com/gpu on h100: 0 available (0 free in quota, the cohort can lend 0), 8 short"
)


@pytest.mark.django_db
def test_the_queue_page_counts_kueue_positions_from_1(staff_client, pending_world):
    # a3 and a5 have Kueue's positionInClusterQueue 1 and 2 (0 would be next in line).
    response = staff_client.get(
        reverse("dashboard:cluster-queue-detail", args=["test", pending_world.cq_a.name])
    )

    body = response.content.decode()
    cells = body.split('data-testid="pending-position">')[1:]
    assert [cell.split("</span>")[0].rsplit(">", 1)[-1] for cell in cells] == ["2", "3"]


@pytest.mark.django_db
def test_the_workload_page_says_where_a_pending_workload_stands_and_why(lead_client, pending_world):
    a3 = pending_world.wl["a3"]

    response = lead_client.get(reverse("dashboard:workload-detail", args=[a3.pk]))

    assert response.context["short_reason"] == A3_REASON
    body = response.content.decode()
    assert "Position <strong>2</strong> in ClusterQueue team-a" in body
    assert "Needs 8 nvidia.com/gpu on h100" in body
    # Kueue's own words stay one click away.
    assert '<summary class="muted">Kueue\'s message</summary>' in body


@pytest.mark.django_db
def test_a_pending_workload_without_a_position_says_kueue_gave_none(lead_client, pending_world):
    a3 = pending_world.wl["a3"]
    a3.pending_position = None
    a3.save(update_fields=["pending_position"])

    body = lead_client.get(reverse("dashboard:workload-detail", args=[a3.pk])).content.decode()

    assert "Kueue gave no queue position" in body
    assert "Position <strong>" not in body


@pytest.mark.django_db
def test_the_team_page_lists_pending_workloads_with_position_and_reason(lead_client, pending_world):
    response = lead_client.get(
        reverse("dashboard:team-detail", args=["alpha"]) + "?state=pending&range=7d"
    )

    rows = {row["workload"].name: row for row in response.context["workload_rows"]}
    assert rows["job-llama-eval"]["short_reason"] == A3_REASON
    assert rows["job-lr-sweep"]["short_reason"] == ""  # its message names no shortfall
    body = response.content.decode()
    assert "position 2 in team-a" in body
    assert "position 3 in team-a" in body


@pytest.mark.django_db
def test_my_teams_lists_pending_workloads_with_position_and_reason(lead_client, pending_world):
    response = lead_client.get(reverse("dashboard:my-teams"))

    (card,) = response.context["cards"]
    reasons = {row["workload"].name: row["short_reason"] for row in card["pending_rows"]}
    assert reasons["job-llama-eval"] == A3_REASON
    body = response.content.decode()
    assert "position 2 in team-a" in body
    assert A3_REASON in body
