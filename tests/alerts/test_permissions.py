"""Acknowledge, silence and exempt need their permission (or, to acknowledge and silence, to
lead the episode's team): being staff is not enough, in the pages, the API and the admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from alerts.models import Episode, Exemption, Silence
from tests.notifications import conftest as notification_fixtures

pytestmark = pytest.mark.django_db

# The notification tests' episode of workload ml/train of team "vision", led by "lead".
world = notification_fixtures.world
make_episode = notification_fixtures.make_episode


def grant(user, *codenames: str):
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="alerts", codename__in=codenames)
    )
    return type(user).objects.get(pk=user.pk)  # a fresh user: permissions are cached


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user(username="ops", password="x", is_staff=True)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def act(client: Client, name: str, episode: Episode, **data: str) -> int:
    return client.post(reverse(f"dashboard:{name}", args=[episode.pk]), data).status_code


def test_staff_without_the_permissions_cannot_acknowledge_silence_or_exempt(staff, make_episode):
    episode = make_episode()
    client = client_for(staff)

    assert act(client, "episode-acknowledge", episode, comment="mine now") == 403
    assert act(client, "episode-silence", episode, hours="24") == 403
    assert act(client, "episode-exempt", episode, comment="not hoarding") == 403
    api = APIClient()
    api.force_authenticate(staff)
    response = api.post(f"/api/v1/alerts/{episode.pk}/acknowledge/", {"comment": "x"})
    assert response.status_code == 403

    episode.refresh_from_db()
    assert episode.acknowledged_by is None and episode.silenced_until is None
    assert not episode.exempt
    assert Silence.objects.count() == 0 and Exemption.objects.count() == 0
    page = client.get(reverse("dashboard:episode-detail", args=[episode.pk])).content.decode()
    assert 'data-testid="ack-form"' not in page and 'data-testid="silence-form"' not in page
    assert 'data-testid="exempt-form"' not in page and 'data-testid="no-actions"' in page


def test_each_permission_allows_its_own_action(staff, make_episode):
    episode = make_episode()
    staff = grant(staff, "acknowledge_episode")
    client = client_for(staff)

    assert act(client, "episode-acknowledge", episode, comment="on it") == 302
    assert act(client, "episode-silence", episode, hours="24") == 403
    staff = grant(staff, "silence_episode")
    assert act(client_for(staff), "episode-silence", episode, hours="24") == 302
    assert act(client_for(staff), "episode-exempt", episode, comment="batch") == 403
    staff = grant(staff, "exempt_episode")
    assert act(client_for(staff), "episode-exempt", episode, comment="batch") == 302

    episode.refresh_from_db()
    assert episode.acknowledged_by == staff and episode.silenced_until is not None
    assert episode.exempt


def test_the_team_lead_acknowledges_and_silences_but_does_not_exempt(world, make_episode):
    episode = make_episode()
    client = client_for(world.lead)

    assert act(client, "episode-acknowledge", episode, comment="talking to them") == 302
    assert act(client, "episode-silence", episode, hours="4") == 302
    assert act(client, "episode-exempt", episode, comment="ours") == 403
    api = APIClient()
    api.force_authenticate(world.lead)
    response = api.post(f"/api/v1/alerts/{episode.pk}/acknowledge/", {"comment": "api"})
    assert response.status_code == 200

    episode.refresh_from_db()
    assert episode.acknowledged_by == world.lead and not episode.exempt


def test_the_admin_actions_need_the_permissions(staff, make_episode):
    episode = make_episode()
    staff = grant(staff, "view_episode", "change_episode")
    changelist = reverse("admin:alerts_episode_changelist")
    client = client_for(staff)

    page = client.get(changelist).content.decode()
    assert "acknowledge_selected" not in page and "silence_for_a_day" not in page
    client.post(changelist, {"action": "acknowledge_selected", "_selected_action": [episode.pk]})
    client.post(changelist, {"action": "silence_for_a_day", "_selected_action": [episode.pk]})
    episode.refresh_from_db()
    assert episode.acknowledged_by is None and Silence.objects.count() == 0

    staff = grant(staff, "acknowledge_episode", "silence_episode")
    client = client_for(staff)
    client.post(changelist, {"action": "acknowledge_selected", "_selected_action": [episode.pk]})
    client.post(changelist, {"action": "silence_for_a_day", "_selected_action": [episode.pk]})
    episode.refresh_from_db()
    assert episode.acknowledged_by == staff and Silence.objects.count() == 1
