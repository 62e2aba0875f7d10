"""Refusals and filters that name nobody, under ``GPULEDGER_TEAM_VISIBILITY=private``.

aspen's lead may not see birch (tests/access/conftest.py: both queues are members of cohort
grove). What was shown before, each reproduced against these pages:

- ``/quota-changes/?queue=<birch's queue id>`` titled the page "ClusterQueue cq-birch", and
  ``?team=`` was a 400 for a team that does not exist but a 200 for one that does.
- A quota change's preview listed birch's queue in ``reclaimable_by``, with its policy and
  whether it had pending work.
- An episode's history listed birch's episodes of the same rule and subject (a node).
- ``POST /api/v1/quota-changes/`` for birch's queue was a 403, for a missing one a 404.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from tests.access.conftest import World

pytestmark = pytest.mark.django_db

NO_SUCH_ID = 987654321


@pytest.fixture(autouse=True)
def private():
    with override_settings(GPULEDGER_TEAM_VISIBILITY="private"):
        yield


def page(client, path: str) -> tuple[int, str]:
    response = client.get(path)
    return response.status_code, response.content.decode()


def same(text: str, asked: str) -> str:
    """``text`` with what the user typed (echoed in the page links) and CSRF tokens out."""
    text = re.sub(r'(csrfmiddlewaretoken" value=|csrf-token" content=)"[^"]*"', r"\1", text)
    return text.replace(asked, "{asked}")


# --- F3: the quota change filters ---------------------------------------------------------------
def test_a_queue_filter_does_not_name_a_queue_the_lead_may_not_see(world: World, client_of):
    lead = client_of("lead_a")
    base = reverse("dashboard:quota-change-list")

    hidden = page(lead, f"{base}?queue={world.queues['birch'].pk}")
    absent = page(lead, f"{base}?queue={NO_SUCH_ID}")
    own = page(lead, f"{base}?queue={world.queues['aspen'].pk}")

    assert hidden[0] == absent[0] == 200
    assert "cq-birch" not in hidden[1]
    assert same(hidden[1], f"queue={world.queues['birch'].pk}") == same(
        absent[1], f"queue={NO_SUCH_ID}"
    )
    assert "Quota changes of ClusterQueue cq-aspen" in own[1]


def test_a_team_filter_answers_the_same_for_a_hidden_and_a_missing_team(world: World, client_of):
    lead = client_of("lead_a")
    base = reverse("dashboard:quota-change-list")

    hidden = page(lead, f"{base}?team=birch")
    absent = page(lead, f"{base}?team=zzzzz")

    assert hidden[0] == absent[0] == 200
    assert same(hidden[1], "team=birch") == same(absent[1], "team=zzzzz")
    assert "birch" not in same(hidden[1], "team=birch")
    assert "Quota changes of the team asked for" in hidden[1]
    assert "Quota changes of team aspen" in page(lead, f"{base}?team=aspen")[1]


# --- F4: reclaimable_by in a preview ------------------------------------------------------------
@pytest.fixture
def previewed_request(world: World):
    """aspen's lead's request whose what-if names both grove members as reclaimers."""
    from quotas.models import QuotaChange

    reclaimers = [
        {"queue": "cq-aspen", "policy": "LowerPriority", "pending_now": False},
        {"queue": "cq-birch", "policy": "Any", "pending_now": True},
    ]
    return QuotaChange.objects.create(
        cluster=world.cluster,
        target_name="cq-aspen",
        cluster_queue=world.queues["aspen"],
        status="requested",
        reason="lend more",
        requested_by=world.users["lead_a"],
        preview={
            "note": "Lowering nominalQuota evicts nothing.",
            "borrowers_after": [
                {
                    "name": "ns-aspen/aspen-main",
                    "flavor": "h100",
                    "gpus": 4,
                    "above_nominal": 2,
                    "priority": 10,
                    "new": True,
                    "reclaimable_by": reclaimers,
                }
            ],
        },
    )


def test_a_leads_preview_sums_the_members_it_may_not_see(world, client_of, previewed_request):
    detail = reverse("dashboard:quota-change-detail", args=[previewed_request.pk])
    status, html = page(client_of("lead_a"), detail)
    api = APIClient()
    api.force_authenticate(world.users["lead_a"])
    answer = api.get(f"/api/v1/quota-changes/{previewed_request.pk}/")

    assert status == 200
    assert "cq-birch" not in html and "has pending work now" not in html
    assert "cq-aspen (LowerPriority)" in html and "Other members (1)" in html
    assert answer.status_code == 200
    assert answer.json()["preview"]["borrowers_after"][0]["reclaimable_by"] == [
        {"queue": "cq-aspen", "policy": "LowerPriority", "pending_now": False},
        {"queue": "Other members (1)", "policy": "", "pending_now": None},
    ]
    assert "cq-birch" not in answer.content.decode()


def test_staff_still_see_every_reclaimer(world, client_of, previewed_request):
    detail = reverse("dashboard:quota-change-detail", args=[previewed_request.pk])
    html = page(client_of("staff"), detail)[1]
    assert "cq-birch (Any, has pending work now)" in html


# --- F8: an episode's history -------------------------------------------------------------------
def test_an_episodes_history_lists_only_the_leads_teams_episodes(world: World, client_of):
    from alerts.models import Episode

    def episode(team: str, hours_ago: int, resolved: bool = True) -> Episode:
        started = world.end - timedelta(hours=hours_ago)
        return Episode.objects.create(
            rule="telemetry_missing",
            severity="warning",
            cluster=world.cluster,
            team=world.teams[team],
            node=world.node,
            gpus=1,
            subject_key=f"node:{world.node.pk}",
            started_at=started,
            fired_at=started,
            resolved_at=started + timedelta(hours=1) if resolved else None,
            evaluated_until=world.end,
            idle_gpu_hours=1.0,
            held_gpu_hours=1.0,
            summary=f"node idles for {team}",
        )

    shown = episode("aspen", 2, resolved=False)
    earlier_own = episode("aspen", 30)
    earlier_other = episode("birch", 20)

    html = page(client_of("lead_a"), reverse("dashboard:episode-detail", args=[shown.pk]))[1]
    staff = page(client_of("staff"), reverse("dashboard:episode-detail", args=[shown.pk]))[1]

    own_link = reverse("dashboard:episode-detail", args=[earlier_own.pk])
    other_link = reverse("dashboard:episode-detail", args=[earlier_other.pk])
    assert f'href="{own_link}"' in html
    assert f'href="{other_link}"' not in html
    assert f'href="{other_link}"' in staff


# --- F2 in the API: a quota change for another team's queue -------------------------------------
def test_a_quota_change_for_a_hidden_queue_is_refused_as_for_a_missing_one(world: World):
    api = APIClient()
    api.force_authenticate(world.users["lead_a"])

    def post(queue: str):
        return api.post(
            "/api/v1/quota-changes/",
            {
                "cluster": world.cluster.name,
                "cluster_queue": queue,
                "changes": [{"flavor": "h100", "resource": "nvidia.com/gpu", "nominal": "1"}],
                "reason": "more",
            },
            format="json",
        )

    hidden, absent = post("cq-birch"), post("cq-nosuch")

    assert hidden.status_code == absent.status_code == 404
    assert hidden.json() == absent.json()
