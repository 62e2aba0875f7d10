"""The notification settings refuse bad values; the beat tasks run the whole chain."""

from __future__ import annotations

import json

import pytest

from notifications.models import Delivery, Receiver, Route
from notifications.tasks import send_notifications
from remediation.tasks import remediate_workloads
from tests.config.test_settings import REAL_KEY, load_settings


def test_a_base_url_that_is_not_http_is_refused():
    result = load_settings(SECRET_KEY=REAL_KEY, GPULEDGER_BASE_URL="gpu-ledger.example.com")

    assert result.returncode != 0
    assert "GPULEDGER_BASE_URL='gpu-ledger.example.com' must be an http(s) URL" in result.stderr


def test_tls_and_ssl_for_email_are_exclusive():
    result = load_settings(SECRET_KEY=REAL_KEY, EMAIL_USE_TLS="true", EMAIL_USE_SSL="true")

    assert result.returncode != 0
    assert "EMAIL_USE_TLS and EMAIL_USE_SSL are exclusive" in result.stderr


@pytest.mark.django_db
def test_the_beat_tasks_send_once_and_report_what_they_did(webhook_server, make_episode):
    receiver = Receiver.objects.create(name="hook", kind="webhook", targets=webhook_server.url)
    Route.objects.create(receiver=receiver)
    episode = make_episode()

    first = send_notifications()
    second = send_notifications()

    assert (first["written"], first["sent"]) == (1, 1)
    assert (second["written"], second["sent"]) == (0, 0)
    assert [json.loads(r.body)["episode"]["id"] for r in webhook_server.received] == [episode.pk]
    assert Delivery.objects.get().outcome == "sent"
    assert remediate_workloads() == {"deactivated": 0, "dry_runs": 0, "notified": 0, "failed": 0}
