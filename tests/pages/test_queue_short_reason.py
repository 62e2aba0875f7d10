"""The queue page's short pending reason, on a ``build_world`` scenario this test builds itself
(``test_pending_reasons.py`` shares one world, which this test's own build would collide with)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.pages.quota_pages.world import NOW, build_world


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
        reverse("dashboard:cluster-queue-detail", args=[cluster.name, world.cq_a.name])
    )

    rows = {row["workload"].name: row for row in response.context["pending_rows"]}
    a3 = world.wl["a3"]  # needs 8 h100, Kueue says 8 more needed; team-a uses 20 of 16 nominal
    assert rows[a3.name]["short_reason"] == (
        "needs 8 nvidia.com/gpu on h100: 0 available (0 free in quota, the cohort can lend 0), "
        "8 short"
    )
    assert 'data-testid="short-reason"' in response.content.decode()
