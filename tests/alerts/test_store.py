"""``alerts.store.update_episodes`` writes every named field of every episode, and only those,
on either database (PostgreSQL: a staging table and one UPDATE; SQLite: a prepared UPDATE per
episode)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from alerts.choices import Rule, Severity
from alerts.episodes import EPISODE_UPDATE_FIELDS
from alerts.models import Episode
from alerts.store import update_episodes
from fleet.models import Cluster

pytestmark = pytest.mark.django_db


def _episodes(count: int) -> list[Episode]:
    cluster = Cluster.objects.create(name="test")
    now = timezone.now().replace(microsecond=0)
    return [
        Episode.objects.create(
            cluster=cluster,
            rule=Rule.IDLE_WORKLOAD,
            severity=Severity.WARNING,
            subject_key=f"ns/w{number}",
            started_at=now - timedelta(hours=3),
            evaluated_until=now - timedelta(hours=1),
        )
        for number in range(count)
    ]


def test_every_named_field_is_written_and_the_others_are_kept():
    episodes = _episodes(3)
    later = timezone.now().replace(microsecond=0)
    for number, episode in enumerate(episodes):
        episode.severity = Severity.CRITICAL
        episode.namespace = f"team-{number}"
        episode.gpu_uuids = [f"GPU-{number}", 'GPU-"quoted"']
        episode.gpus = number + 1.5
        episode.fired_at = later - timedelta(minutes=number)
        episode.evaluated_until = later
        episode.idle_gpu_hours = 2.25 * (number + 1)
        episode.cost = Decimal("12.34") * (number + 1)
        episode.evidence = {"hours": [number, None], "note": "idle \\ since 09:00"}
        episode.summary = f"idle for {number} h"
        episode.subject_key = "not written"  # not a named field
    names = ["severity", "namespace", "gpu_uuids", "gpus", "fired_at", "evaluated_until"]
    names += ["idle_gpu_hours", "cost", "evidence", "summary"]
    assert set(names) <= set(EPISODE_UPDATE_FIELDS)

    update_episodes(episodes, names)

    for number, stored in enumerate(Episode.objects.order_by("pk")):
        assert stored.severity == Severity.CRITICAL
        assert stored.namespace == f"team-{number}"
        assert stored.gpu_uuids == [f"GPU-{number}", 'GPU-"quoted"']
        assert stored.gpus == pytest.approx(number + 1.5)
        assert stored.fired_at == later - timedelta(minutes=number)
        assert stored.evaluated_until == later
        assert stored.idle_gpu_hours == pytest.approx(2.25 * (number + 1))
        assert stored.cost == Decimal("12.34") * (number + 1)
        assert stored.evidence == {"hours": [number, None], "note": "idle \\ since 09:00"}
        assert stored.summary == f"idle for {number} h"
        assert stored.subject_key == f"ns/w{number}"


def test_no_episodes_write_nothing():
    update_episodes([], ["severity"])

    assert not Episode.objects.exists()
