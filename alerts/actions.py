"""What people do to episodes: acknowledge, silence, exempt (from the pages, API and admin)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from alerts.choices import ExemptionKind
from alerts.models import Episode, Exemption, Silence


def acknowledge(episode: Episode, user: Any, comment: str) -> Episode:
    episode.acknowledged_by = user
    episode.acknowledged_at = timezone.now()
    episode.ack_comment = comment
    episode.save(update_fields=["acknowledged_by", "acknowledged_at", "ack_comment", "updated_at"])
    return episode


@transaction.atomic
def silence(episode: Episode, user: Any, until: datetime, comment: str) -> Silence:
    """Silence this episode's subject (this rule) until ``until``; later episodes of the same
    subject are silenced too while it lasts."""
    created = Silence.objects.create(
        rule=episode.rule,
        subject_key=episode.subject_key,
        cluster=episode.cluster,
        ends_at=until,
        comment=comment,
        created_by=user,
    )
    Episode.objects.filter(pk=episode.pk).update(silenced_until=until, updated_at=timezone.now())
    episode.silenced_until = until
    return created


@transaction.atomic
def exempt_workload(episode: Episode, user: Any, reason: str) -> Exemption | None:
    """Exempt the episode's workload (its serving deployment, or its ClusterQueue for a queue
    episode) from now on; the open episodes of that subject are marked at once, the next
    evaluation keeps them."""
    subject: dict[str, int]
    if episode.workload_id is not None:
        kind, subject = ExemptionKind.WORKLOAD, {"workload_id": episode.workload_id}
    elif episode.serving_workload_id is not None:
        kind = ExemptionKind.SERVING_WORKLOAD
        subject = {"serving_workload_id": episode.serving_workload_id}
    elif episode.cluster_queue_id is not None:
        kind, subject = ExemptionKind.CLUSTER_QUEUE, {"cluster_queue_id": episode.cluster_queue_id}
    else:
        return None
    exemption = Exemption.objects.create(
        kind=kind, cluster=episode.cluster, reason=reason, created_by=user, **subject
    )
    why = f"{exemption.get_kind_display()} exemption: {exemption.describe()}"
    if reason:
        why = f"{why} ({reason})"
    Episode.objects.filter(resolved_at__isnull=True, **subject).update(
        exempt=True, exempt_reason=why[:300], updated_at=timezone.now()
    )
    episode.refresh_from_db()
    return exemption
