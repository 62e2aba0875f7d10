"""Collect one cluster's serving hours from Prometheus (docs/architecture.md "Serving metrics").

An hour is collected once it is over (``COLLECT_DELAY_SECONDS`` after its end) with a dozen
instant queries at its end over the whole hour (``serving.queries``), four in flight at once as
the window collector does; ``serving.ingest.build_hour`` turns the answers into figures per
workload, and the hour's rows are replaced in one transaction with its ``ServingCollection``
row, so re-collecting an hour rewrites it and never duplicates it. A failed query leaves a
failed ``ServingCollection`` and no rows; the next run tries the hour again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.timewindows import ensure_aware, hour_floor
from fleet import constants as fleet_constants
from fleet.models import Cluster
from fleet.prometheus import PrometheusClient, PrometheusError
from serving import constants as c
from serving.choices import CollectionStatus
from serving.dcgm import attach_activity
from serving.ingest import ServingFigures, WorkloadKey, build_hour
from serving.models import ServingCollection, ServingHour, ServingWorkload
from serving.queries import hour_queries

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)


@dataclass
class HourResult:
    """What collecting one hour did."""

    hour: datetime
    rows: int = 0
    records_read: int = 0
    skipped: int = 0
    seconds: float = 0.0


@dataclass
class ServingRunResult:
    cluster: str
    hours: list[HourResult] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "hours": [
                {"hour": result.hour.isoformat(), "rows": result.rows} for result in self.hours
            ],
        }


class InstantQueries(Protocol):
    """What collecting an hour asks of Prometheus: ``PrometheusClient``, or a stand-in that
    answers the same PromQL in the same format (the demo's simulated fleet)."""

    def query(self, promql: str, at: datetime) -> list[dict[str, Any]]: ...


def fetch_hour(client: InstantQueries, end: datetime) -> dict[str, list[dict]]:
    """Every answer of the hour ending at ``end``, by name."""
    queries = hour_queries()
    with ThreadPoolExecutor(max_workers=fleet_constants.QUERY_CONCURRENCY) as pool:
        futures = {name: pool.submit(client.query, promql, end) for name, promql in queries.items()}
        return {name: future.result() for name, future in futures.items()}


def collect_hour(
    cluster: Cluster, hour: datetime, *, client: InstantQueries | None = None
) -> HourResult:
    """Collect (or re-collect) the hour starting at ``hour`` through ``client`` (the cluster's
    Prometheus when None); raises PrometheusError after recording a failed
    ``ServingCollection``."""
    hour = hour_floor(ensure_aware(hour))
    started_at = timezone.now()
    started = time.monotonic()
    own: PrometheusClient | None = None
    if client is None:
        client = own = PrometheusClient.for_cluster(cluster)
    try:
        answers = fetch_hour(client, hour + HOUR)
    except PrometheusError as exc:
        logger.warning("cluster %s: serving hour %s failed: %s", cluster, hour.isoformat(), exc)
        _record(cluster, hour, started_at, status=CollectionStatus.FAILED, error=str(exc))
        raise
    finally:
        if own is not None:
            own.close()
    figures, stats = build_hour(answers)
    attach_activity(cluster, hour, figures)
    if stats.skipped:
        logger.warning(
            "cluster %s: serving hour %s skipped %s",
            cluster,
            hour.isoformat(),
            dict(stats.skip_reasons),
        )
    with transaction.atomic():
        rows = write_hour(cluster, hour, figures)
        _record(
            cluster,
            hour,
            started_at,
            status=CollectionStatus.SUCCESS,
            records_read=stats.records_read,
            rows_written=rows,
            skipped=stats.skipped,
            skip_reasons=dict(stats.skip_reasons),
        )
    return HourResult(
        hour=hour,
        rows=rows,
        records_read=stats.records_read,
        skipped=stats.skipped,
        seconds=time.monotonic() - started,
    )


def write_hour(
    cluster: Cluster, hour: datetime, figures: Mapping[WorkloadKey, ServingFigures]
) -> int:
    """Replace the cluster's rows of ``hour`` with ``figures`` (a constant number of
    statements); the workloads are created on first sight."""
    ServingWorkload.objects.bulk_create(
        [
            ServingWorkload(cluster=cluster, namespace=namespace, kind=kind, name=name)
            for namespace, kind, name in figures
        ],
        ignore_conflicts=True,
        batch_size=1000,
    )
    ids: dict[WorkloadKey, int] = {}
    namespaces = sorted({namespace for namespace, _, _ in figures})
    for row in ServingWorkload.objects.filter(cluster=cluster, namespace__in=namespaces).values(
        "id", "namespace", "kind", "name"
    ):
        ids[(row["namespace"], row["kind"], row["name"])] = row["id"]
    ServingHour.objects.filter(cluster=cluster, hour=hour).delete()
    ServingHour.objects.bulk_create(
        [
            ServingHour(cluster=cluster, hour=hour, workload_id=ids[key], **values.row_values())
            for key, values in figures.items()
        ],
        batch_size=1000,
    )
    return len(figures)


def _record(cluster: Cluster, hour: datetime, started_at: datetime, **values: object) -> None:
    defaults = {
        "records_read": 0,
        "rows_written": 0,
        "skipped": 0,
        "skip_reasons": {},
        "error": "",
        **values,
    }
    defaults["finished_at"] = timezone.now()
    defaults["started_at"] = started_at
    ServingCollection.objects.update_or_create(cluster=cluster, hour=hour, defaults=defaults)


def due_hours(cluster: Cluster, now: datetime) -> list[datetime]:
    """Complete hours within the catch-up bound that have no successful collection, oldest
    first, at most ``HOURS_PER_RUN``."""
    newest = hour_floor(ensure_aware(now) - timedelta(seconds=c.COLLECT_DELAY_SECONDS)) - HOUR
    oldest = newest - timedelta(hours=max(0, settings.GPULEDGER_CATCHUP_HOURS - 1))
    done = set(
        ServingCollection.objects.filter(
            cluster=cluster,
            status=CollectionStatus.SUCCESS,
            hour__gte=oldest,
            hour__lte=newest,
        ).values_list("hour", flat=True)
    )
    hours = [hour for hour in hours_between(oldest, newest + HOUR) if hour not in done]
    return hours[: c.HOURS_PER_RUN]


def hours_between(start: datetime, end: datetime) -> Iterator[datetime]:
    """Starts of the UTC hours that begin in ``[floor(start), end)``."""
    hour = hour_floor(ensure_aware(start))
    end = ensure_aware(end)
    while hour < end:
        yield hour
        hour += HOUR


# Rows per DELETE when pruning: ledger.rollup.prune's batch, measured there on usage rows.
PRUNE_BATCH_SIZE = 20_000


def prune(cluster: Cluster, now: datetime) -> int:
    """Delete the cluster's serving hours and collections older than the rollups' retention
    (``GPULEDGER_ROLLUP_RETENTION_DAYS``: serving hours sit beside the hourly rollups), in
    batches along the (cluster, hour) indexes; returns the rows deleted."""
    cutoff = hour_floor(ensure_aware(now)) - timedelta(
        days=settings.GPULEDGER_ROLLUP_RETENTION_DAYS
    )
    deleted = 0
    for model in (ServingHour, ServingCollection):
        old = model.objects.filter(cluster=cluster, hour__lt=cutoff)
        while True:
            batch = list(old.order_by().values_list("pk", flat=True)[:PRUNE_BATCH_SIZE])
            if not batch:
                break
            deleted += model.objects.filter(pk__in=batch).delete()[0]
    return deleted


def collect_due(cluster: Cluster, now: datetime | None = None) -> ServingRunResult:
    """Collect the cluster's due hours, oldest first (a failure stops the run there), after
    pruning what is past retention."""
    result = ServingRunResult(cluster=cluster.name)
    now = now or timezone.now()
    prune(cluster, now)
    hours = due_hours(cluster, now)
    if not hours:
        return result
    with PrometheusClient.for_cluster(cluster) as client:
        for hour in hours:
            result.hours.append(collect_hour(cluster, hour, client=client))
    return result
