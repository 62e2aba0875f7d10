"""The sender: takes due deliveries from the outbox, sends each once, records every attempt.

A delivery is claimed with a conditional UPDATE of its ``next_attempt_at``
(docs/conventions.md "Background work"): two workers, or a doubled beat tick, never send it twice,
and a worker killed mid-send leaves it due again once the claim lapses, so nothing is lost. Before
sending, what changed since the outbox wrote it is checked: an exempt episode, a silenced one (for
firing events) and a disabled receiver get nothing (``suppressed``). A transient failure
(connection, timeout, 408, 429, 5xx) is tried again after an exponential backoff
(``GPULEDGER_NOTIFY_RETRY_SECONDS`` doubled per attempt, capped at an hour) up to
``GPULEDGER_NOTIFY_MAX_ATTEMPTS``; a permanent one fails at once. Failed deliveries stay in the log,
and the admin's "Retry now" puts them back.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts.models import Silence
from core.deadlines import Deadline
from fleet.secrets import SecretError, read_secret
from notifications import messages, transports
from notifications.choices import (
    OPEN_OUTCOMES,
    DeliveryEvent,
    DeliveryOutcome,
    ReceiverKind,
)
from notifications.details import details_for
from notifications.models import Delivery, DeliveryAttempt
from notifications.outbox import FIRING_EVENTS, silenced
from notifications.recipients import email_recipients
from notifications.transports import DeliveryError, Sent

logger = logging.getLogger(__name__)

# Deliveries taken per run; the run's deadline usually ends it first when receivers are slow.
SEND_BATCH = 500
# The longest wait between two attempts.
MAX_BACKOFF = timedelta(hours=1)
# A claimed delivery is due again this long after its claim if its worker died mid-send.
CLAIM_MARGIN_SECONDS = 30


@dataclass
class SendResult:
    sent: int = 0
    retrying: int = 0
    failed: int = 0
    suppressed: int = 0


def backoff(attempts: int) -> timedelta:
    """Wait before attempt ``attempts + 1``: the base doubled per failed attempt, capped."""
    base = settings.GPULEDGER_NOTIFY_RETRY_SECONDS
    return min(timedelta(seconds=base * 2 ** max(0, attempts - 1)), MAX_BACKOFF)


def suppression(delivery: Delivery, now: datetime, silences: list[Silence]) -> str:
    """Why this delivery must not go out now, or "" to send it."""
    if not delivery.receiver.enabled:
        return "the receiver was disabled"
    episode = delivery.episode
    if episode is None:
        return ""
    if episode.exempt:
        return f"the episode is exempt ({episode.exempt_reason or 'exemption'})"
    if delivery.event in FIRING_EVENTS and silenced(episode, now, silences):
        return "the episode is silenced"
    if delivery.event == DeliveryEvent.RENOTIFY and episode.resolved_at is not None:
        return "the episode resolved before the re-notification went out"
    return ""


def transmit(delivery: Delivery, now: datetime, deadline: Deadline | None) -> Sent:
    """Send one delivery the receiver's way; raises ``DeliveryError``."""
    receiver = delivery.receiver
    episode = delivery.episode
    event = delivery.event
    details = details_for(delivery)
    if receiver.kind == ReceiverKind.EMAIL:
        subject, text = messages.email_message(event, episode, details)
        recipients = email_recipients(receiver, episode)
        return transports.send_email(subject, text, recipients, deadline=deadline)
    try:
        targets = receiver.urls()
    except SecretError as exc:
        raise DeliveryError(str(exc), permanent=True) from exc
    if not targets:
        raise DeliveryError("the receiver has no URL", permanent=True)
    if receiver.kind == ReceiverKind.WEBHOOK:
        body = messages.webhook_body(event, delivery.pk, episode, now, details)
        headers = {
            messages.EVENT_HEADER: event,
            messages.DELIVERY_HEADER: str(delivery.pk),
        }
        if receiver.secret_env:
            try:
                secret = read_secret(receiver.secret_env)
            except SecretError as exc:
                raise DeliveryError(str(exc), permanent=True) from exc
            headers[messages.SIGNATURE_HEADER] = messages.signature(secret, body)
        return transports.post_json(targets[0], body, headers=headers, deadline=deadline)
    if receiver.kind == ReceiverKind.SLACK:
        payload = json.dumps(messages.slack_payload(event, episode, details)).encode()
        return transports.post_json(targets[0], payload, deadline=deadline)
    if receiver.kind == ReceiverKind.ALERTMANAGER:
        resend = float(settings.GPULEDGER_ALERTMANAGER_RESEND_SECONDS)
        if episode is None:
            alerts = messages.alertmanager_test_alert(now, resend)
        else:
            alerts = messages.alertmanager_alerts(
                episode, now, resend, settings.GPULEDGER_ALERTMANAGER_RESENDS_AHEAD
            )
        return post_to_all(targets, alerts, deadline)
    raise DeliveryError(f"unknown receiver kind {receiver.kind!r}", permanent=True)


def post_to_all(urls: list[str], alerts: list[dict], deadline: Deadline | None) -> Sent:
    """Post to every Alertmanager; a failure at any of them fails the whole (a retry re-posts to
    all, which Alertmanager takes as the same alerts again)."""
    errors: list[DeliveryError] = []
    status = 0
    for url in urls:
        try:
            status = transports.post_alertmanager(url, alerts, deadline=deadline).status
        except DeliveryError as exc:
            errors.append(exc)
    if errors:
        raise DeliveryError(
            "; ".join(e.message for e in errors),
            status=errors[-1].status,
            permanent=all(e.permanent for e in errors),
        )
    return Sent(status, f"{len(urls)} Alertmanagers")


def deliver(
    delivery: Delivery, now: datetime, deadline: Deadline | None, silences: list[Silence]
) -> str:
    """Send (or suppress) one claimed delivery and record the attempt; returns the outcome."""
    reason = suppression(delivery, now, silences)
    if reason:
        Delivery.objects.filter(pk=delivery.pk).update(
            outcome=DeliveryOutcome.SUPPRESSED, error=reason, next_attempt_at=None, updated_at=now
        )
        return DeliveryOutcome.SUPPRESSED
    started = timezone.now()
    clock = time.monotonic()
    status: int | None = None
    error = ""
    try:
        sent = transmit(delivery, now, deadline)
        status = sent.status
        outcome = DeliveryOutcome.SENT
    except DeliveryError as exc:
        status, error = exc.status, exc.message
        gave_up = exc.permanent or delivery.attempts + 1 >= settings.GPULEDGER_NOTIFY_MAX_ATTEMPTS
        outcome = DeliveryOutcome.FAILED if gave_up else DeliveryOutcome.RETRYING
        log = logger.error if gave_up else logger.warning
        log(
            "delivery %s (%s to %s) attempt %d: %s",
            delivery.pk,
            delivery.event,
            delivery.receiver.name,
            delivery.attempts + 1,
            exc.message,
        )
    attempts = delivery.attempts + 1
    finished = timezone.now()
    with transaction.atomic():
        DeliveryAttempt.objects.create(
            delivery=delivery,
            number=attempts,
            started_at=started,
            duration_ms=int((time.monotonic() - clock) * 1000),
            outcome=outcome,
            status_code=status,
            error=error,
        )
        Delivery.objects.filter(pk=delivery.pk).update(
            attempts=attempts,
            outcome=outcome,
            status_code=status,
            error=error,
            sent_at=finished if outcome == DeliveryOutcome.SENT else None,
            next_attempt_at=finished + backoff(attempts)
            if outcome == DeliveryOutcome.RETRYING
            else None,
            updated_at=finished,
        )
    return outcome


def fail_broken(delivery: Delivery, exc: Exception) -> str:
    """Record a delivery that raised something other than ``DeliveryError`` as failed, with the
    reason, so it is neither retried for ever nor left claimed."""
    error = f"not sent: {exc.__class__.__name__}: {exc}"[:500]
    finished = timezone.now()
    attempts = delivery.attempts + 1
    with transaction.atomic():
        DeliveryAttempt.objects.update_or_create(
            delivery=delivery,
            number=attempts,
            defaults={
                "started_at": finished,
                "outcome": DeliveryOutcome.FAILED,
                "error": error,
            },
        )
        Delivery.objects.filter(pk=delivery.pk).update(
            attempts=attempts,
            outcome=DeliveryOutcome.FAILED,
            error=error,
            next_attempt_at=None,
            updated_at=finished,
        )
    return DeliveryOutcome.FAILED


def claim(pk: int, due: datetime | None, now: datetime) -> bool:
    """Take a due delivery for this run; False when another worker took it first."""
    hold = timedelta(seconds=settings.GPULEDGER_NOTIFY_TIMEOUT_SECONDS + CLAIM_MARGIN_SECONDS)
    return (
        Delivery.objects.filter(pk=pk, outcome__in=OPEN_OUTCOMES, next_attempt_at=due).update(
            next_attempt_at=now + hold
        )
        == 1
    )


def send_due(now: datetime, deadline: Deadline, limit: int = SEND_BATCH) -> SendResult:
    """Send the deliveries due by ``now``, oldest first, until done or the deadline."""
    result = SendResult()
    due = list(
        Delivery.objects.filter(outcome__in=OPEN_OUTCOMES, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "id")
        .values_list("id", "next_attempt_at")[:limit]
    )
    if not due:
        return result
    silences = list(Silence.objects.filter(ends_at__gt=now))
    for pk, next_attempt_at in due:
        if deadline.expired():
            logger.warning(
                "notifications: %s passed; the rest of the outbox waits for the next run",
                deadline,
            )
            break
        if not claim(pk, next_attempt_at, now):
            continue
        delivery = Delivery.objects.select_related(
            "receiver",
            "episode__cluster",
            "episode__team",
            "episode__cluster_queue__team",
            "episode__workload",
            "episode__serving_workload",
            "episode__node",
            "episode__acknowledged_by",
        ).get(pk=pk)
        try:
            outcome = deliver(delivery, now, deadline, silences)
        except Exception as exc:
            # One delivery that breaks in an unforeseen way fails alone; the batch goes on.
            logger.exception("delivery %s: %s", pk, exc.__class__.__name__)
            outcome = fail_broken(delivery, exc)
        setattr(result, str(outcome), getattr(result, str(outcome)) + 1)
    return result


def retry_now(deliveries: list[Delivery], now: datetime) -> int:
    """Put failed or waiting deliveries back in the outbox, due now (the admin's "Retry now")."""
    return Delivery.objects.filter(
        pk__in=[d.pk for d in deliveries],
        outcome__in=[*OPEN_OUTCOMES, DeliveryOutcome.FAILED],
    ).update(outcome=DeliveryOutcome.RETRYING, next_attempt_at=now, updated_at=now)
