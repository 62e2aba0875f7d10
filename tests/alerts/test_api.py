"""GET /api/v1/alerts/ and POST /api/v1/alerts/{id}/acknowledge/: filters, visibility, tokens,
schema."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from rest_framework.test import APIClient

from alerts.choices import Rule
from alerts.models import Episode
from quotas.choices import ApiTokenScope
from quotas.models import ApiToken, ClusterQueue
from tests.alerts.conftest import World, at, build_world
from tests.databases import kept_for_the_module

pytestmark = pytest.mark.django_db

URL = "/api/v1/alerts/"
IDLE, BUSY = 0.002, 0.5


@pytest.fixture(autouse=True)
def _no_throttle_state():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(scope="module")
def shared_alerts(django_db_setup: None, django_db_blocker: Any) -> Iterator[World]:
    """The episodes below, written and evaluated once for the module's tests."""
    with kept_for_the_module(django_db_blocker):
        yield evaluated(build_world())


@pytest.fixture
def alerts(shared_alerts: World, db: None) -> World:
    """The evaluated world; each test's own changes are rolled back after it."""
    return copy.deepcopy(shared_alerts)


def evaluated(world: World) -> World:
    """red: an idle workload (open, critical after 130 min) and a ghost that resolved at minute 30;
    blue: an idle workload resolved at minute 90; and a pending one (9 idle minutes)."""
    red = world.gang(world.workload("red-idle", 2, pods=2))
    world.run(red, range(150), IDLE)
    ghost = world.gang(world.workload("red-ghost", 4, pods=4, reserved_at=at(0)))
    world.run(ghost, range(30, 150), BUSY)
    blue_queue = ClusterQueue.objects.create(
        cluster=world.cluster, name="cq-blue-own", team=world.other_team
    )
    blue = world.workload("blue-idle", 1, namespace="ns-b")
    blue.cluster_queue = blue_queue
    blue.save()
    blue_gang = world.gang(blue, node="node-2")
    world.run(blue_gang, range(150), lambda m, g: IDLE if m < 90 else BUSY)
    for row in world.rows:
        if row.workload_id == blue.pk:
            row.team = world.other_team
            row.cluster_queue = blue_queue
    pending = world.gang(world.workload("red-pending", 1), node="node-3")
    world.run(pending, range(141, 150), IDLE)
    world.run(pending, range(0, 141), BUSY)
    world.evaluate(0, 150)
    return world


def client(user: User) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return sorted(f"{item['rule']}:{item['workload']}" for item in response.json()["results"])


def test_staff_see_every_fired_episode_with_the_listed_fields(
    alerts: World, django_assert_max_num_queries
):
    staff = User.objects.create_user("boss", is_staff=True)
    api = client(staff)
    with django_assert_max_num_queries(8):
        response = api.get(URL)
    assert names(response) == [
        "ghost_reservation:ns-a/red-ghost",
        "idle_workload:ns-a/red-idle",
        "idle_workload:ns-b/blue-idle",
    ]
    item = next(i for i in response.json()["results"] if i["workload"] == "ns-a/red-idle")
    assert item["state"] == "open" and item["severity"] == "critical"
    assert item["team"] == "red" and item["cluster_queue"] == "cq-red" and item["cluster"] == "c1"
    assert item["started_at"] == "2026-04-06T08:00:00Z"
    assert item["fired_at"] == "2026-04-06T09:00:00Z"
    assert item["escalated_at"] == "2026-04-06T10:00:00Z"
    assert item["resolved_at"] is None
    assert item["gpus"] == 2 and len(item["gpu_uuids"]) == 2
    assert item["idle_gpu_hours"] == pytest.approx(2 * 150 / 60)
    assert item["url"].endswith(f"/alerts/{item['id']}/")
    assert {"node", "acknowledged_by", "silenced_until", "exempt", "cost"} <= set(item)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("rule=ghost_reservation", ["ghost_reservation:ns-a/red-ghost"]),
        ("state=open", ["idle_workload:ns-a/red-idle"]),
        (
            "state=resolved",
            ["ghost_reservation:ns-a/red-ghost", "idle_workload:ns-b/blue-idle"],
        ),
        ("severity=critical", ["idle_workload:ns-a/red-idle"]),
        ("team=blue", ["idle_workload:ns-b/blue-idle"]),
        (
            "cluster_queue=cq-red",
            ["ghost_reservation:ns-a/red-ghost", "idle_workload:ns-a/red-idle"],
        ),
        ("cluster=nope", []),
        # Overlap: the ghost resolved at 08:30, so a range from 08:40 leaves it out.
        (
            "start=2026-04-06T08:40:00Z",
            ["idle_workload:ns-a/red-idle", "idle_workload:ns-b/blue-idle"],
        ),
        ("end=2026-04-06T08:00:00Z", []),
    ],
)
def test_filters(alerts: World, query: str, expected: list[str]):
    staff = User.objects.create_user("boss", is_staff=True)
    assert names(client(staff).get(f"{URL}?{query}")) == expected


@pytest.mark.parametrize("query", ["rule=bogus", "state=maybe", "start=yesterday", "team=%00"])
def test_bad_parameters_are_a_400_naming_them(alerts: World, query: str):
    staff = User.objects.create_user("boss", is_staff=True)
    response = client(staff).get(f"{URL}?{query}")
    assert response.status_code == 400
    assert query.split("=")[0] in response.json()


def test_a_team_lead_sees_only_their_teams_episodes(alerts: World):
    lead = User.objects.create_user("blue-lead")
    alerts.other_team.leads.add(lead)
    api = client(lead)
    assert names(api.get(URL)) == ["idle_workload:ns-b/blue-idle"]
    red_episode = Episode.objects.get(workload__name="red-idle")
    assert api.get(f"{URL}{red_episode.pk}/").status_code == 404
    assert api.post(f"{URL}{red_episode.pk}/acknowledge/", {"comment": "x"}).status_code == 404


def test_acknowledging_records_who_when_and_the_comment(alerts: World):
    lead = User.objects.create_user("red-lead")
    alerts.team.leads.add(lead)
    episode = Episode.objects.get(workload__name="red-idle")
    response = client(lead).post(
        f"{URL}{episode.pk}/acknowledge/", {"comment": "owner is on it"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["acknowledged_by"] == "red-lead"
    episode.refresh_from_db()
    assert episode.acknowledged_by == lead and episode.ack_comment == "owner is on it"
    assert episode.acknowledged_at is not None


def test_a_chargeback_token_is_refused_and_a_full_token_reads(alerts: World):
    staff = User.objects.create_user("boss", is_staff=True)
    _token, chargeback = ApiToken.issue(staff, "finance", ApiTokenScope.CHARGEBACK)
    _token, full = ApiToken.issue(staff, "script", ApiTokenScope.FULL)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {chargeback}")
    assert api.get(URL).status_code == 403
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {full}")
    assert len(names(api.get(URL))) == 3
    assert APIClient().get(URL).status_code in (401, 403)


def test_pending_episodes_are_never_listed(alerts: World):
    assert Episode.objects.filter(workload__name="red-pending", fired_at__isnull=True).exists()
    staff = User.objects.create_user("boss", is_staff=True)
    assert "idle_workload:ns-a/red-pending" not in names(client(staff).get(URL))


def test_the_schema_documents_the_alerts_endpoints(db):
    staff = User.objects.create_user("boss", is_staff=True)
    response = client(staff).get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert "/api/v1/alerts/" in paths and "/api/v1/alerts/{id}/acknowledge/" in paths
    parameters = {p["name"] for p in paths["/api/v1/alerts/"]["get"]["parameters"]}
    assert {
        "rule",
        "state",
        "severity",
        "team",
        "cluster_queue",
        "cluster",
        "start",
        "end",
    } <= parameters
    assert Rule.GHOST_RESERVATION in str(response.json()["components"])
