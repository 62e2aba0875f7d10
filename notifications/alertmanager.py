"""Keeping Alertmanager's view current: the open alerts re-sent every resend interval.

Alertmanager forgets an alert at its ``endsAt``. While an episode is open its alert is posted
again every ``GPULEDGER_ALERTMANAGER_RESEND_SECONDS`` (one minute) with ``endsAt`` a few
intervals ahead (``GPULEDGER_ALERTMANAGER_RESENDS_AHEAD``), so it stays active while GPU Ledger
runs and expires by itself a few minutes after it stops; the "resolved" delivery ends it at the
resolution time. Only episodes a receiver was told of (a sent "fired" or "escalated") are
refreshed, and only while they still match its routes, are not exempt and not silenced. The
outcome of each refresh is kept on the receiver (``last_refresh_*``), not as a delivery: it
repeats every minute.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from alerts.models import Episode, Silence
from core.deadlines import Deadline
from fleet.secrets import SecretError
from notifications import messages, transports
from notifications.choices import DeliveryEvent, DeliveryOutcome, ReceiverKind
from notifications.models import Receiver
from notifications.outbox import silenced
from notifications.routing import CompiledRoute, load_routes, targets_for
from notifications.transports import DeliveryError

logger = logging.getLogger(__name__)

# Alerts per POST: Alertmanager takes a list; 500 keeps a body well under a megabyte.
POST_BATCH = 500
# A refresh runs when the last one is at least this much less than an interval old (beat jitter).
JITTER_SECONDS = 5


@dataclass
class RefreshResult:
    receivers: int = 0
    alerts: int = 0
    errors: int = 0


def refresh(
    now: datetime, deadline: Deadline, routes: list[CompiledRoute] | None = None
) -> RefreshResult:
    """Re-send the open alerts to every enabled Alertmanager receiver whose interval is up."""
    routes = load_routes() if routes is None else routes
    resend = float(settings.GPULEDGER_ALERTMANAGER_RESEND_SECONDS)
    result = RefreshResult()
    silences = list(Silence.objects.filter(ends_at__gt=now))
    for receiver in Receiver.objects.filter(enabled=True, kind=ReceiverKind.ALERTMANAGER):
        last = receiver.last_refresh_at
        if last is not None and now - last < timedelta(seconds=resend - JITTER_SECONDS):
            continue
        if deadline.expired():
            logger.warning("alertmanager refresh: %s passed; the rest waits", deadline)
            break
        episodes = [
            episode
            for episode in Episode.objects.open()
            .filter(
                exempt=False,
                deliveries__receiver=receiver,
                deliveries__event__in=[DeliveryEvent.FIRED, DeliveryEvent.ESCALATED],
                deliveries__outcome=DeliveryOutcome.SENT,
            )
            .distinct()
            .defer("evidence")
            .select_related(
                "cluster", "team", "cluster_queue", "workload", "serving_workload", "node"
            )
            if not silenced(episode, now, silences)
            and any(t.receiver.pk == receiver.pk for t in targets_for(episode, routes))
        ]
        # The current alert of each episode (its last); an escalation's ended warning went out
        # with the escalation.
        alerts = [
            messages.alertmanager_alerts(
                episode, now, resend, settings.GPULEDGER_ALERTMANAGER_RESENDS_AHEAD
            )[-1]
            for episode in episodes
        ]
        errors = _post(receiver, alerts, deadline)
        errors += _close_raced(receiver, [e.pk for e in episodes], now, deadline)
        receiver.last_refresh_at = now
        receiver.last_refresh_alerts = len(alerts)
        receiver.last_refresh_error = "; ".join(errors)
        receiver.save(
            update_fields=[
                "last_refresh_at",
                "last_refresh_alerts",
                "last_refresh_error",
                "updated_at",
            ]
        )
        result.receivers += 1
        result.alerts += len(alerts)
        result.errors += len(errors)
    return result


def _post(receiver: Receiver, alerts: list[dict], deadline: Deadline) -> list[str]:
    errors: list[str] = []
    if not alerts:
        return errors
    try:
        urls = receiver.urls()
    except SecretError as exc:
        logger.warning("alertmanager refresh of %s: %s", receiver.name, exc)
        return [str(exc)]
    for url in urls:
        for start in range(0, len(alerts), POST_BATCH):
            try:
                transports.post_alertmanager(
                    url, alerts[start : start + POST_BATCH], deadline=deadline
                )
            except DeliveryError as exc:
                logger.warning("alertmanager refresh of %s: %s", receiver.name, exc.message)
                errors.append(exc.message)
                break
    return errors


def _close_raced(
    receiver: Receiver, episode_ids: list[int], now: datetime, deadline: Deadline
) -> list[str]:
    """Episodes that resolved while this refresh read and posted them were just posted as open
    again: end them once more at their resolution time."""
    if not episode_ids:
        return []
    raced = list(
        Episode.objects.filter(pk__in=episode_ids, resolved_at__isnull=False).with_subjects()
    )
    resend = float(settings.GPULEDGER_ALERTMANAGER_RESEND_SECONDS)
    alerts = [
        alert
        for episode in raced
        for alert in messages.alertmanager_alerts(
            episode, now, resend, settings.GPULEDGER_ALERTMANAGER_RESENDS_AHEAD
        )
    ]
    return _post(receiver, alerts, deadline)
