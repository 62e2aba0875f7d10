"""What the rules judged per complete UTC day share (``alerts.slo``, ``alerts.overprovisioned``):
the day, how many days an episode's evidence lists, and how such an episode is written."""

from __future__ import annotations

from datetime import datetime, timedelta

from alerts.exemptions import ExemptionMatcher, Subject
from alerts.models import Episode, Silence
from alerts.summary import describe

DAY = timedelta(days=1)
# Days an episode's evidence lists (the newest ones).
EVIDENCE_DAYS = 14


def save_day_episode(episode: Episode, subject: Subject, now: datetime) -> bool:
    """Write the episode with the exemptions of its subject and the silences in force applied,
    as to every rule, and its summary; True when it was created."""
    reason = ExemptionMatcher(episode.cluster_id, now).reason(subject)
    episode.exempt_reason = reason[:300]
    episode.exempt = bool(reason)
    ends = [s.ends_at for s in Silence.objects.filter(ends_at__gt=now) if s.matches(episode)]
    if episode.silenced_until is not None:
        ends.append(episode.silenced_until)
    episode.silenced_until = max(ends) if ends else None
    episode.summary = describe(episode, None)[:500]
    episode.updated_at = now
    new = episode.pk is None
    episode.save()
    return new
