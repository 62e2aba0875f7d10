"""Pending reasons said short: flavor, amount needed, what is available and from where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse

from dashboard.pending import short_reason, shortfalls
from tests.pages.test_quota_pages import NOW, build_world

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


@pytest.fixture
def beta_lead(django_user_model):
    return django_user_model.objects.create_user(username="beta-lead", password="beta-password")


@pytest.mark.django_db
def test_the_queue_page_shows_the_short_reason(
    staff_client, cluster, lead_user, beta_lead, time_machine
):
    time_machine.move_to(NOW, tick=False)
    world = build_world(cluster, lead_user, beta_lead, NOW)

    response = staff_client.get(
        reverse("quotas:cluster-queue-detail", args=[cluster.name, world.cq_a.name])
    )

    rows = {row["workload"].name: row for row in response.context["pending_rows"]}
    a3 = world.wl["a3"]  # needs 8 h100, Kueue says 8 more needed; team-a uses 20 of 16 nominal
    assert rows[a3.name]["short_reason"] == (
        "needs 8 nvidia.com/gpu on h100: 0 available (0 free in quota, the cohort can lend 0), "
        "8 short"
    )
    assert 'data-testid="short-reason"' in response.content.decode()
