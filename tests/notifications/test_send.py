"""The sender against real receivers on loopback: SMTP (aiosmtpd) and HTTP webhooks."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from core.deadlines import Deadline
from notifications.models import AlertContact, Delivery, DeliveryAttempt, Receiver, Route
from notifications.notify import queue_test, run_notifications
from notifications.send import backoff, claim, retry_now, send_due

pytestmark = pytest.mark.django_db

SECRET = "s3cret-webhook-key"


def run(now=None):
    return run_notifications(now or timezone.now(), Deadline(30, "test deadline"))


@pytest.fixture
def signed_hook(webhook_server, monkeypatch) -> Receiver:
    monkeypatch.setenv("GPULEDGER_SECRET_HOOK", SECRET)
    receiver = Receiver.objects.create(
        name="hook", kind="webhook", targets=webhook_server.url, secret_env="GPULEDGER_SECRET_HOOK"
    )
    Route.objects.create(receiver=receiver)
    return receiver


def test_email_reaches_the_team_contacts_leads_and_queue_owners_over_smtp(
    smtp_server, make_episode, world, settings
):
    settings.GPULEDGER_BASE_URL = "https://ledger.example.test"
    AlertContact.objects.create(team=world.team, email="vision-oncall@example.test")
    AlertContact.objects.create(cluster_queue=world.cluster_queue, email="cq-owner@example.test")
    receiver = Receiver.objects.create(name="mail", kind="email", targets="gpu-admins@example.test")
    Route.objects.create(receiver=receiver)
    episode = make_episode()

    run()

    assert len(smtp_server.messages) == 1
    message, envelope_to = smtp_server.messages[0]
    expected = {
        "gpu-admins@example.test",
        "vision-oncall@example.test",
        "lead@example.test",
        "cq-owner@example.test",
    }
    assert set(envelope_to) == expected
    assert {a.strip() for a in message["To"].split(",")} == expected
    assert message["From"] == "GPU Ledger <ledger@example.test>"
    assert message["Subject"] == ("[GPU Ledger] Firing (warning): Idle workload ml/train on east")
    body = message.get_payload(decode=True).decode()
    assert f"https://ledger.example.test/alerts/{episode.pk}/" in body
    assert "Workload ml/train: 4 of 4 GPUs idle for 60 min." in body
    delivery = Delivery.objects.get()
    assert (delivery.outcome, delivery.attempts, delivery.status_code) == ("sent", 1, 250)
    assert delivery.sent_at is not None


def test_email_without_any_recipient_fails_at_once_and_says_why(smtp_server, make_episode, world):
    world.lead.email = ""
    world.lead.save()
    receiver = Receiver.objects.create(name="mail", kind="email", targets="")
    Route.objects.create(receiver=receiver)
    make_episode()

    run()

    delivery = Delivery.objects.get()
    assert delivery.outcome == "failed"
    assert "no recipients" in delivery.error
    assert smtp_server.messages == []


def test_a_refused_smtp_session_is_retried_later(make_episode, world, settings):
    from tests.prometheus_server import free_port

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = free_port()  # nothing listens there
    receiver = Receiver.objects.create(name="mail", kind="email", targets="a@example.test")
    Route.objects.create(receiver=receiver)
    make_episode()

    run()

    delivery = Delivery.objects.get()
    assert delivery.outcome == "retrying"
    assert "ConnectionRefusedError" in delivery.error


def test_the_webhook_body_is_signed_with_hmac_sha256(signed_hook, webhook_server, make_episode):
    episode = make_episode()

    run()

    assert len(webhook_server.received) == 1
    request = webhook_server.received[0]
    expected = "sha256=" + hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-GPULedger-Signature"] == expected
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["X-GPULedger-Event"] == "fired"
    doc = json.loads(request.body)
    assert doc["event"] == "fired"
    assert doc["delivery_id"] == Delivery.objects.get().pk
    assert doc["episode"]["id"] == episode.pk
    assert doc["episode"]["workload"] == "ml/train"
    assert doc["episode"]["team"] == "vision"
    assert doc["episode"]["cluster_queue"] == "vision-cq"
    assert doc["episode"]["state"] == "open"
    assert doc["episode"]["url"].endswith(f"/alerts/{episode.pk}/")


def test_a_503_is_retried_with_backoff_then_sent_and_every_attempt_is_recorded(
    signed_hook, webhook_server, make_episode, time_machine, settings
):
    settings.GPULEDGER_NOTIFY_RETRY_SECONDS = 60
    webhook_server.statuses = [503, 503]
    make_episode()
    start = timezone.now()
    time_machine.move_to(start, tick=False)

    run()
    delivery = Delivery.objects.get()
    assert (delivery.outcome, delivery.attempts, delivery.status_code) == ("retrying", 1, 503)
    assert delivery.next_attempt_at == start + timedelta(seconds=60)

    # Not due yet: nothing is sent.
    time_machine.move_to(start + timedelta(seconds=30), tick=False)
    run()
    assert len(webhook_server.received) == 1

    time_machine.move_to(start + timedelta(seconds=61), tick=False)
    run()
    delivery.refresh_from_db()
    assert (delivery.outcome, delivery.attempts) == ("retrying", 2)
    assert delivery.next_attempt_at == start + timedelta(seconds=61 + 120)

    time_machine.move_to(start + timedelta(seconds=61 + 121), tick=False)
    run()
    delivery.refresh_from_db()
    assert (delivery.outcome, delivery.attempts, delivery.status_code) == ("sent", 3, 200)
    assert delivery.next_attempt_at is None
    attempts = list(DeliveryAttempt.objects.filter(delivery=delivery).order_by("number"))
    assert [(a.number, a.outcome, a.status_code) for a in attempts] == [
        (1, "retrying", 503),
        (2, "retrying", 503),
        (3, "sent", 200),
    ]
    assert "HTTP 503" in attempts[0].error
    # The same delivery, re-sent: one id, three identical bodies.
    bodies = {json.loads(r.body)["delivery_id"] for r in webhook_server.received}
    assert bodies == {delivery.pk}
    assert len(webhook_server.received) == 3


def test_a_4xx_is_permanent_and_fails_at_once(signed_hook, webhook_server, make_episode):
    webhook_server.statuses = [404]
    make_episode()

    run()

    delivery = Delivery.objects.get()
    assert (delivery.outcome, delivery.attempts, delivery.status_code) == ("failed", 1, 404)
    assert delivery.next_attempt_at is None


def test_a_receiver_that_never_answers_is_cut_at_the_timeout_and_retried(
    signed_hook, webhook_server, make_episode, settings
):
    settings.GPULEDGER_NOTIFY_TIMEOUT_SECONDS = 1
    webhook_server.hang = True
    make_episode()

    started = time.monotonic()
    run()
    elapsed = time.monotonic() - started

    assert elapsed < 5
    delivery = Delivery.objects.get()
    assert delivery.outcome == "retrying"
    assert "within" in delivery.error or "timed out" in delivery.error


def test_after_the_last_attempt_the_failure_stays_in_the_log_and_can_be_retried(
    signed_hook, webhook_server, make_episode, settings, time_machine
):
    settings.GPULEDGER_NOTIFY_MAX_ATTEMPTS = 2
    webhook_server.statuses = [500, 500]
    make_episode()
    start = timezone.now()
    time_machine.move_to(start, tick=False)
    run()
    time_machine.move_to(start + timedelta(minutes=5), tick=False)
    run()
    delivery = Delivery.objects.get()
    assert (delivery.outcome, delivery.attempts) == ("failed", 2)

    # Staff press "Retry now": one more try, which the receiver now takes.
    assert retry_now([delivery], timezone.now()) == 1
    run()

    delivery.refresh_from_db()
    assert (delivery.outcome, delivery.attempts) == ("sent", 3)
    assert DeliveryAttempt.objects.filter(delivery=delivery).count() == 3


def test_running_twice_sends_once(signed_hook, webhook_server, make_episode):
    make_episode()

    run()
    run()

    assert len(webhook_server.received) == 1


def test_a_delivery_is_claimed_by_one_run_only(signed_hook, make_episode):
    from notifications.outbox import scan

    now = timezone.now()
    make_episode()
    scan(now)
    delivery = Delivery.objects.get()

    assert claim(delivery.pk, delivery.next_attempt_at, now) is True
    assert claim(delivery.pk, delivery.next_attempt_at, now) is False


def test_an_episode_exempted_after_the_delivery_was_written_is_not_sent(
    signed_hook, webhook_server, make_episode
):
    from notifications.outbox import scan

    now = timezone.now()
    episode = make_episode()
    scan(now)
    episode.exempt = True
    episode.exempt_reason = "namespace ml"
    episode.save()

    send_due(now, Deadline(30, "test"))

    delivery = Delivery.objects.get()
    assert delivery.outcome == "suppressed"
    assert "exempt" in delivery.error
    assert webhook_server.received == []


def test_slack_gets_one_line_of_text_with_the_episode_link(
    webhook_server, make_episode, monkeypatch
):
    monkeypatch.setenv("GPULEDGER_SECRET_SLACK_CHAT", webhook_server.url)
    receiver = Receiver.objects.create(
        name="chat", kind="slack", url_secret_env="GPULEDGER_SECRET_SLACK_CHAT"
    )
    Route.objects.create(receiver=receiver)
    episode = make_episode(severity="critical", escalated_at=timezone.now())

    run()

    doc = json.loads(webhook_server.received[0].body)
    assert set(doc) == {"text"}
    assert doc["text"].startswith("*Firing (critical): Idle workload ml/train on east*")
    assert f"/alerts/{episode.pk}/|Open the episode>" in doc["text"]


def test_send_test_reaches_the_receiver(webhook_server, signed_hook):
    delivery = queue_test(signed_hook, timezone.now())

    run()

    delivery.refresh_from_db()
    assert delivery.outcome == "sent"
    doc = json.loads(webhook_server.received[0].body)
    assert (doc["event"], doc["episode"]) == ("test", None)


def test_backoff_doubles_and_is_capped(settings):
    settings.GPULEDGER_NOTIFY_RETRY_SECONDS = 60
    assert [backoff(n).total_seconds() for n in (1, 2, 3, 4)] == [60, 120, 240, 480]
    assert backoff(30) == timedelta(hours=1)
