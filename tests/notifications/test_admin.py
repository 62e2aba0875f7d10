"""The notification admin: receivers and routes, "send test", the read-only delivery log."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from notifications.models import Delivery, DeliveryAttempt, Receiver, Route

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(db, django_user_model) -> Client:
    user = django_user_model.objects.create_superuser("root", "root@example.test", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_a_receiver_and_its_route_are_set_up_in_the_admin(admin_client_, world, monkeypatch):
    monkeypatch.setenv("GPULEDGER_SECRET_SLACK_VISION", "http://127.0.0.1:9/hook")
    answer = admin_client_.post(
        reverse("admin:notifications_receiver_add"),
        {
            "name": "vision-chat",
            "kind": "slack",
            "targets": "",
            "url_secret_env": "GPULEDGER_SECRET_SLACK_VISION",
            "include_owners": "on",
            "enabled": "on",
            "secret_env": "",
            "routes-TOTAL_FORMS": "1",
            "routes-INITIAL_FORMS": "0",
            "routes-MIN_NUM_FORMS": "0",
            "routes-MAX_NUM_FORMS": "1000",
            "routes-0-name": "vision critical",
            "routes-0-rules": ["idle_workload", "ghost_reservation"],
            "routes-0-severities": ["critical"],
            "routes-0-teams": [str(world.team.pk)],
            "routes-0-renotify_interval": "12:00:00",
            "routes-0-enabled": "on",
        },
    )

    assert answer.status_code == 302, answer.content.decode()[:2000]
    route = Route.objects.get()
    assert route.receiver.name == "vision-chat"
    assert route.rules == ["idle_workload", "ghost_reservation"]
    assert route.severities == ["critical"]
    assert list(route.teams.all()) == [world.team]
    assert route.renotify_interval.total_seconds() == 12 * 3600


def test_a_receiver_secret_must_be_a_gpuledger_secret_variable(admin_client_):
    answer = admin_client_.post(
        reverse("admin:notifications_receiver_add"),
        {
            "name": "hook",
            "kind": "webhook",
            "targets": "http://127.0.0.1:9/hook",
            "secret_env": "SECRET_KEY",
            "enabled": "on",
            "routes-TOTAL_FORMS": "0",
            "routes-INITIAL_FORMS": "0",
            "routes-MIN_NUM_FORMS": "0",
            "routes-MAX_NUM_FORMS": "1000",
        },
    )

    assert answer.status_code == 200
    assert "GPULEDGER_SECRET_" in answer.content.decode()
    assert not Receiver.objects.exists()


def test_send_test_posts_to_the_receiver_and_reports_the_outcome(admin_client_, webhook_server):
    receiver = Receiver.objects.create(name="hook", kind="webhook", targets=webhook_server.url)
    changelist = reverse("admin:notifications_receiver_changelist")

    answer = admin_client_.post(
        changelist, {"action": "send_test", "_selected_action": [receiver.pk]}, follow=True
    )

    assert answer.status_code == 200
    assert "Hook: test sent" in answer.content.decode()
    assert len(webhook_server.received) == 1
    assert json.loads(webhook_server.received[0].body)["event"] == "test"
    delivery = Delivery.objects.get()
    assert (delivery.event, delivery.outcome, delivery.requested_by.username) == (
        "test",
        "sent",
        "root",
    )


def test_a_failing_test_says_why(admin_client_, webhook_server):
    webhook_server.statuses = [401]
    receiver = Receiver.objects.create(name="hook", kind="webhook", targets=webhook_server.url)

    answer = admin_client_.post(
        reverse("admin:notifications_receiver_changelist"),
        {"action": "send_test", "_selected_action": [receiver.pk]},
        follow=True,
    )

    assert "HTTP 401" in answer.content.decode()
    assert Delivery.objects.get().outcome == "failed"


def test_the_delivery_log_is_read_only_and_shows_every_attempt(admin_client_, webhook_server):
    receiver = Receiver.objects.create(name="hook", kind="webhook", targets=webhook_server.url)
    webhook_server.statuses = [503]
    admin_client_.post(
        reverse("admin:notifications_receiver_changelist"),
        {"action": "send_test", "_selected_action": [receiver.pk]},
    )
    delivery = Delivery.objects.get()
    assert delivery.outcome == "retrying"

    listing = admin_client_.get(reverse("admin:notifications_delivery_changelist"))
    detail = admin_client_.get(reverse("admin:notifications_delivery_change", args=[delivery.pk]))

    assert listing.status_code == 200 and detail.status_code == 200
    assert "HTTP 503" in detail.content.decode()
    assert 'name="_save"' not in detail.content.decode()
    assert admin_client_.get(reverse("admin:notifications_delivery_add")).status_code == 403
    assert DeliveryAttempt.objects.filter(delivery=delivery).count() == 1


def test_retry_now_puts_a_failed_delivery_back_in_the_outbox(admin_client_, webhook_server):
    receiver = Receiver.objects.create(name="hook", kind="webhook", targets=webhook_server.url)
    delivery = Delivery.objects.create(
        receiver=receiver, event="test", severity="", outcome="failed", attempts=10
    )

    admin_client_.post(
        reverse("admin:notifications_delivery_changelist"),
        {"action": "retry", "_selected_action": [delivery.pk]},
    )

    delivery.refresh_from_db()
    assert delivery.outcome == "retrying"
    assert delivery.next_attempt_at is not None
