"""Serving hours written day by day for the ``serving_overprovisioned`` tests: 4 replicas of one
GPU each, in the stored format the collector writes."""

from __future__ import annotations

from datetime import datetime, timedelta

from serving.choices import CollectionStatus, ServerKind
from serving.models import ServingCollection, ServingHour, ServingWorkload

DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
REPLICAS = 4


def write_day(
    workload: ServingWorkload,
    start_of_day: datetime,
    *,
    per_replica: float,
    ttft: float = 0.3,
    hours: int = 24,
) -> None:
    """``hours`` hours of the day at ``per_replica`` output tokens/s per replica, collected."""
    for h in range(hours):
        start = start_of_day + h * HOUR
        ServingHour.objects.create(
            workload=workload,
            cluster=workload.cluster,
            hour=start,
            server_kind=ServerKind.VLLM,
            replicas_seen=REPLICAS,
            replica_hours=float(REPLICAS),
            seconds_with_data=3600,
            gpu_hours=float(REPLICAS),
            requests_per_second=per_replica * REPLICAS / 200,
            output_tokens_per_second=per_replica * REPLICAS,
            mean_running=8.0,
            mean_waiting=0.0,
            ttft_p95_seconds=ttft,
            itl_p95_seconds=0.03,
        )
    collected(workload, start_of_day)


def collected(workload: ServingWorkload, start_of_day: datetime) -> None:
    """The serving collection of the day's last hour succeeded."""
    end = start_of_day + DAY
    ServingCollection.objects.update_or_create(
        cluster=workload.cluster,
        hour=end - HOUR,
        defaults={"status": CollectionStatus.SUCCESS, "started_at": end, "finished_at": end},
    )
