"""Rows the service-level tests share: a team's ClusterQueue and admission records."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from servicelevels.models import AdmissionRecord


def queue(cluster: Any, name: str = "batch", team: str = "vision") -> Any:
    from quotas.models import ClusterQueue, Team

    owner, _ = Team.objects.get_or_create(name=team, defaults={"display_name": team.title()})
    return ClusterQueue.objects.create(cluster=cluster, name=name, team=owner)


def admitted(
    cluster_queue: Any, uid: str, admitted_at: datetime, wait: timedelta, **fields: Any
) -> AdmissionRecord:
    """An admission of ``cluster_queue`` that waited ``wait`` until ``admitted_at``."""
    return AdmissionRecord.objects.create(
        cluster=cluster_queue.cluster,
        workload_uid=uid,
        namespace=fields.pop("namespace", "ml"),
        workload_name=fields.pop("workload_name", uid),
        cluster_queue=cluster_queue,
        cluster_queue_name=cluster_queue.name,
        team_id=cluster_queue.team_id,
        queued_at=admitted_at - wait,
        quota_reserved_at=admitted_at,
        admitted_at=admitted_at,
        gpus=fields.pop("gpus", 8.0),
        **fields,
    )
