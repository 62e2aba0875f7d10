"""The outbox scanner: which notifications episodes need, written as ``Delivery`` rows.

It reads episodes, never upstreams, and only inserts: each (episode, receiver, event, sequence) is
unique, so a second scan, a doubled beat tick or two workers add nothing. The sender
(``notifications.send``) sends what is written here.

Per episode and receiver:

- **fired** once the episode fired, while it is open, not silenced and not exempt. An episode
  resolved before any receiver heard of it is announced (fired, then resolved) only when it was
  detected live, resolved within ``GPULEDGER_NOTIFY_LOOKBACK_HOURS``, after the receiver was set
  up and not while silenced: backfilled history never notifies
  (docs/architecture.md "Notifications and remediation").
- **escalated** when a receiver told of a warning sees the episode turn critical while open.
- **resolved** to every receiver told it fired, whatever the routes say now: what was opened is
  closed (an Alertmanager alert ends, a chat thread gets its answer).
- **renotify** (n = 1, 2, …) while open, unacknowledged, not silenced, each time the receiver's
  shortest route interval passed since it last heard; never to Alertmanager, which repeats by
  itself and gets the open alerts every minute anyway (``notifications.alertmanager``).

Pending and exempt episodes get nothing. A "fired" that the sender suppressed (the episode was
silenced before it went out) is sent again once the silence is over and the episode still open.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

from alerts.choices import Severity
from alerts.models import Episode, Silence
from notifications.choices import DeliveryEvent, DeliveryOutcome, ReceiverKind
from notifications.models import Delivery, Receiver
from notifications.routing import CompiledRoute, load_routes, targets_for

logger = logging.getLogger(__name__)

# Events that tell a receiver the episode is (still) firing.
FIRING_EVENTS = (DeliveryEvent.FIRED, DeliveryEvent.ESCALATED, DeliveryEvent.RENOTIFY)
# Episodes read per query.
SCAN_BATCH = 2000
# What the scan reads of an episode (routes, silences, the plan); thousands of episodes a minute,
# so not the evidence nor the figures.
SCAN_FIELDS = (
    "id",
    "rule",
    "severity",
    "cluster_id",
    "team_id",
    "cluster_queue_id",
    "namespace",
    "subject_key",
    "fired_at",
    "escalated_at",
    "resolved_at",
    "exempt",
    "acknowledged_at",
    "silenced_until",
    "detected_live",
)


@dataclass
class History:
    """What one receiver already has (or will get) for one episode."""

    told: bool = False  # a firing event not suppressed
    first_severity: str = ""
    events: set[str] = field(default_factory=set)
    suppressed_fired: int | None = None  # id of a "fired" the sender suppressed
    last_firing_at: datetime | None = None
    renotify_sequence: int = 0


@dataclass
class ScanResult:
    episodes: int = 0
    created: int = 0
    revived: int = 0


def silenced(episode: Episode, now: datetime, silences: list[Silence]) -> bool:
    """Silenced now: by the episode's own ``silenced_until`` or a running silence that matches."""
    return episode.is_silenced(now) or any(s.matches(episode) for s in silences)


def _history(episode_ids: list[int]) -> dict[int, dict[int, History]]:
    """Per episode, per receiver: what was written for it so far."""
    found: dict[int, dict[int, History]] = defaultdict(lambda: defaultdict(History))
    rows = (
        Delivery.objects.filter(episode_id__in=episode_ids)
        .exclude(event=DeliveryEvent.TEST)
        .order_by("created_at", "id")
        .values_list(
            "id",
            "episode_id",
            "receiver_id",
            "event",
            "sequence",
            "severity",
            "outcome",
            "created_at",
        )
    )
    for pk, episode_id, receiver_id, event, sequence, severity, outcome, created_at in rows:
        history = found[episode_id][receiver_id]
        history.events.add(event)
        if event in FIRING_EVENTS:
            if outcome == DeliveryOutcome.SUPPRESSED:
                if event == DeliveryEvent.FIRED:
                    history.suppressed_fired = pk
                continue
            if not history.told:
                history.first_severity = severity
            history.told = True
            history.last_firing_at = created_at
        if event == DeliveryEvent.RENOTIFY:
            history.renotify_sequence = max(history.renotify_sequence, sequence)
    return found


def _plan(
    episode: Episode,
    receiver: Receiver,
    renotify: timedelta | None,
    history: History,
    now: datetime,
    is_silenced: bool,
) -> list[tuple[str, int]]:
    """The (event, sequence) pairs this receiver should get for this episode now."""
    lookback = timedelta(hours=settings.GPULEDGER_NOTIFY_LOOKBACK_HOURS)
    is_open = episode.resolved_at is None
    plan: list[tuple[str, int]] = []
    if not history.told:
        if renotify is None:
            return plan  # no route leads here (any more), and nothing was told
        if is_open:
            if not is_silenced:
                plan.append((DeliveryEvent.FIRED, 0))
            return plan
        resolved_at = episode.resolved_at
        assert resolved_at is not None
        announce = (
            episode.detected_live
            and resolved_at >= now - lookback
            and resolved_at >= receiver.created_at
            and not (episode.silenced_until is not None and resolved_at <= episode.silenced_until)
            and not is_silenced
        )
        if announce and DeliveryEvent.FIRED not in history.events:
            plan += [(DeliveryEvent.FIRED, 0), (DeliveryEvent.RESOLVED, 0)]
        return plan
    if not is_open:
        if DeliveryEvent.RESOLVED not in history.events:
            plan.append((DeliveryEvent.RESOLVED, 0))
        return plan
    if is_silenced or renotify is None:
        return plan
    if (
        episode.severity == Severity.CRITICAL
        and history.first_severity == Severity.WARNING
        and DeliveryEvent.ESCALATED not in history.events
    ):
        plan.append((DeliveryEvent.ESCALATED, 0))
        return plan
    if (
        receiver.kind != ReceiverKind.ALERTMANAGER
        and episode.acknowledged_at is None
        and history.last_firing_at is not None
        and now - history.last_firing_at >= renotify
    ):
        plan.append((DeliveryEvent.RENOTIFY, history.renotify_sequence + 1))
    return plan


def candidates(now: datetime) -> Q:
    """Episodes that may need a notification: fired, not exempt, open or lately resolved."""
    lookback = timedelta(hours=settings.GPULEDGER_NOTIFY_LOOKBACK_HOURS)
    recent = Q(resolved_at__isnull=True) | Q(resolved_at__gte=now - lookback)
    return Q(fired_at__isnull=False, exempt=False) & recent


def scan(now: datetime, routes: list[CompiledRoute] | None = None) -> ScanResult:
    """Write the deliveries every candidate episode needs now; returns what it did."""
    routes = load_routes() if routes is None else routes
    receivers = {r.pk: r for r in Receiver.objects.filter(enabled=True)}
    silences = list(Silence.objects.filter(ends_at__gt=now))
    result = ScanResult()
    # Receivers told of an episode hear it resolve even when no route leads there any more.
    told_receivers = Delivery.objects.filter(
        episode_id__isnull=False, receiver__enabled=True
    ).exclude(event=DeliveryEvent.TEST)
    if not routes and not told_receivers.exists():
        return result
    ids = list(Episode.objects.filter(candidates(now)).order_by("id").values_list("id", flat=True))
    for start in range(0, len(ids), SCAN_BATCH):
        chunk = ids[start : start + SCAN_BATCH]
        episodes = list(Episode.objects.filter(pk__in=chunk).only(*SCAN_FIELDS))
        result.episodes += len(episodes)
        histories = _history(chunk)
        new: list[Delivery] = []
        revive: list[tuple[int, str]] = []
        for episode in episodes:
            is_silenced = silenced(episode, now, silences)
            intervals = {t.receiver.pk: t.renotify_interval for t in targets_for(episode, routes)}
            told = histories.get(episode.pk, {})
            for receiver_id in sorted(set(intervals) | set(told)):
                receiver = receivers.get(receiver_id)
                if receiver is None:
                    continue  # disabled since
                history = told.get(receiver_id) or History()
                plan = _plan(
                    episode, receiver, intervals.get(receiver_id), history, now, is_silenced
                )
                for event, sequence in plan:
                    if event == DeliveryEvent.FIRED and history.suppressed_fired is not None:
                        revive.append((history.suppressed_fired, episode.severity))
                        continue
                    new.append(
                        Delivery(
                            episode=episode,
                            receiver=receiver,
                            event=event,
                            sequence=sequence,
                            severity=episode.severity,
                            next_attempt_at=now,
                        )
                    )
        if new:
            Delivery.objects.bulk_create(new, ignore_conflicts=True)
            result.created += len(new)
        for pk, severity in revive:
            result.revived += Delivery.objects.filter(
                pk=pk, outcome=DeliveryOutcome.SUPPRESSED
            ).update(
                outcome=DeliveryOutcome.PENDING, severity=severity, next_attempt_at=now, error=""
            )
    if result.created or result.revived:
        logger.info(
            "notifications: %d deliveries written, %d re-opened, for %d episodes",
            result.created,
            result.revived,
            result.episodes,
        )
    return result
