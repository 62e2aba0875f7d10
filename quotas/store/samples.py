"""Kueue's per-ClusterQueue usage samples (one row per queue, flavor, resource and window)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection

from core.bulk import filter_in, unchanged
from core.mig import GPU_RESOURCE
from core.quantity import parse_quantity
from core.timewindows import ensure_aware
from fleet.models import Cluster
from quotas import constants as c
from quotas.choices import SampleSource
from quotas.ingest import QueueSampleRow
from quotas.models import ClusterQueue, ClusterQueueQuota, ClusterQueueSample, Cohort

logger = logging.getLogger(__name__)


def write_queue_samples(
    cluster: Cluster,
    rows: list[QueueSampleRow],
    sampled_at: datetime,
    window_seconds: int,
) -> int:
    """Upsert one ClusterQueueSample per row for the window ending at ``sampled_at``.

    Rows whose ClusterQueue is not in the database are skipped (logged). Returns rows written.
    """
    sampled_at = ensure_aware(sampled_at)
    queues = dict(ClusterQueue.objects.filter(cluster=cluster).values_list("name", "id"))
    objs = []
    for row in rows:
        queue_id = queues.get(row.cluster_queue_name)
        if queue_id is None:
            logger.warning(
                "Queue sample for unknown ClusterQueue %s on %s skipped",
                row.cluster_queue_name,
                cluster.name,
            )
            continue
        objs.append(
            ClusterQueueSample(
                cluster_queue_id=queue_id,
                flavor_name=row.flavor_name,
                resource=row.resource,
                sampled_at=sampled_at,
                window_seconds=window_seconds,
                total=row.total,
                reserved=row.reserved,
                borrowed=row.borrowed,
                lent=row.lent,
                nominal=row.nominal,
                borrowing_limit=row.borrowing_limit,
                lending_limit=row.lending_limit,
                pending_demand=row.pending_demand,
                pending_workloads=row.pending_workloads,
                admitted_workloads=row.admitted_workloads,
                source=SampleSource.API,
            )
        )
    if objs:
        ClusterQueueSample.objects.bulk_create(
            objs,
            batch_size=c.WRITE_BATCH_SIZE,
            update_conflicts=True,
            unique_fields=["cluster_queue", "flavor_name", "resource", "sampled_at"],
            update_fields=[*METRIC_SAMPLE_FIELDS, "source"],
        )
    return len(objs)


# The figures of a sample, compared to decide whether a stored metrics sample changed.
METRIC_SAMPLE_FIELDS = (
    "window_seconds",
    "total",
    "reserved",
    "borrowed",
    "lent",
    "nominal",
    "borrowing_limit",
    "lending_limit",
    "pending_demand",
    "pending_workloads",
    "admitted_workloads",
)
_SAMPLE_KEY = ("cluster_queue_id", "flavor_name", "resource")


@dataclass
class MetricSamplesWritten:
    """What ``write_metric_samples`` changed in one window."""

    written: int = 0  # samples inserted or updated
    deleted: int = 0  # earlier metrics samples no longer in the answers
    unknown_queues: list[str] = field(default_factory=list)


def write_metric_samples(
    cluster: Cluster,
    rows: list[QueueSampleRow],
    sampled_at: datetime,
    window_seconds: int,
) -> int:
    """Store samples made from Kueue's metrics where the API server has none for the window.

    Afterwards the window holds exactly ``rows`` as metrics samples, except where the sync wrote
    a sample for the same queue, flavor and resource: the API server's status wins, and the
    sync's later upsert replaces a metrics sample. Only differences are written: a re-run with
    the same answers writes nothing, one with other figures updates those samples in place, and
    a metrics sample of a queue or flavor no longer answered is deleted. Queues the database does
    not know (never listed by a sync) are skipped and logged. Returns samples written (inserted
    or updated).

    On PostgreSQL this is one statement (the rows as arrays; queue names resolved, stale samples
    deleted and new or changed ones upserted in it): the ORM's ``bulk_create`` of the 2,000
    samples of 1,000 queues cost 0.2 s of CPU a window, most of it compiling 30,000 values
    (bench/collect.py, bench/RESULTS.md).
    """
    sampled_at = ensure_aware(sampled_at)
    # One sample per key; the first wins, as it did when duplicates were ignored on insert.
    unique: dict[tuple[str, str, str], QueueSampleRow] = {}
    for row in rows:
        unique.setdefault((row.cluster_queue_name, row.flavor_name, row.resource), row)
    rows = list(unique.values())
    if connection.vendor == "postgresql":
        result = _write_metric_samples_sql(cluster, rows, sampled_at, window_seconds)
    else:
        result = _write_metric_samples_orm(cluster, rows, sampled_at, window_seconds)
    if result.unknown_queues:
        logger.info(
            "cluster %s window %s: Kueue metrics of %d ClusterQueue(s) the API server has not "
            "listed skipped (e.g. %s)",
            cluster.name,
            sampled_at.isoformat(),
            len(result.unknown_queues),
            result.unknown_queues[0],
        )
    return result.written


def _write_metric_samples_sql(
    cluster: Cluster, rows: list[QueueSampleRow], sampled_at: datetime, window_seconds: int
) -> MetricSamplesWritten:
    quote = connection.ops.quote_name
    samples = quote(ClusterQueueSample._meta.db_table)
    queues = quote(ClusterQueue._meta.db_table)
    figures = [name for name in METRIC_SAMPLE_FIELDS if name != "window_seconds"]
    # Cast to the columns' own types (numeric(p, s) rounds), so stored and new compare exactly.
    types = {
        name: ClusterQueueSample._meta.get_field(name).db_type(connection)
        for name in METRIC_SAMPLE_FIELDS
    }
    columns = ", ".join(quote(name) for name in METRIC_SAMPLE_FIELDS)
    updates = ", ".join(f"{quote(name)} = excluded.{quote(name)}" for name in METRIC_SAMPLE_FIELDS)
    stored = ", ".join(f"s.{quote(name)}" for name in METRIC_SAMPLE_FIELDS)
    new_values = ", ".join([f"%s::{types['window_seconds']}", *(f"k.{name}" for name in figures)])
    conflicting = ", ".join(f"{samples}.{quote(name)}" for name in METRIC_SAMPLE_FIELDS)
    excluded = ", ".join(f"excluded.{quote(name)}" for name in METRIC_SAMPLE_FIELDS)
    arrays = ", ".join(f"%s::{types[name]}[]" for name in figures)
    key = "cluster_queue_id, flavor_name, resource"
    # NOT IN and NOT EXISTS on the unique index rather than joins: the planner cannot estimate
    # the rows of an unnest, and a nested loop over 2,000 x 2,000 samples took a second.
    statement = f"""
        WITH incoming AS (
            SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], {arrays})
                AS t(queue, flavor_name, resource, {", ".join(figures)})
        ), known AS (
            SELECT q.id AS cluster_queue_id, i.* FROM incoming i
            JOIN {queues} q ON q.cluster_id = %s AND q.name = i.queue
        ), stale AS (
            DELETE FROM {samples} s
            WHERE s.sampled_at = %s AND s.source = %s
                AND s.cluster_queue_id IN (SELECT id FROM {queues} WHERE cluster_id = %s)
                AND ({key}) NOT IN (SELECT {key} FROM known)
            RETURNING 1
        ), written AS (
            INSERT INTO {samples} ({key}, sampled_at, source, {columns})
            SELECT {key}, %s, %s, %s, {", ".join(figures)} FROM known k
            WHERE NOT EXISTS (
                SELECT 1 FROM {samples} s
                WHERE s.cluster_queue_id = k.cluster_queue_id AND s.flavor_name = k.flavor_name
                    AND s.resource = k.resource AND s.sampled_at = %s
                    AND (s.source <> %s OR ({stored}) IS NOT DISTINCT FROM ({new_values}))
            )
            ON CONFLICT ({key}, sampled_at) DO UPDATE SET {updates}
                WHERE {samples}.source = %s AND ({conflicting}) IS DISTINCT FROM ({excluded})
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM written), (SELECT count(*) FROM stale),
            ARRAY(
                SELECT DISTINCT queue FROM incoming
                WHERE queue NOT IN (SELECT queue FROM known) ORDER BY 1
            )
    """
    metrics = SampleSource.METRICS.value
    params: list[Any] = [
        array_literal(row.cluster_queue_name for row in rows),
        array_literal(row.flavor_name for row in rows),
        array_literal(row.resource for row in rows),
        *(array_literal(getattr(row, name) for row in rows) for name in figures),
        cluster.pk,
        sampled_at,
        metrics,
        cluster.pk,
        sampled_at,
        metrics,
        window_seconds,
        sampled_at,
        metrics,
        window_seconds,
        metrics,
    ]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        written, deleted, unknown = cursor.fetchone()
    return MetricSamplesWritten(written=written, deleted=deleted, unknown_queues=list(unknown))


def array_literal(values: Iterable[object]) -> str:
    """A PostgreSQL array literal of ``values``, every element double-quoted (``NULL`` for
    None), for a ``%s::type[]`` parameter. psycopg's own dumping of Python lists walks every
    element in Python: for the 2,000 samples of 1,000 ClusterQueues (14 arrays a window) it was
    most of this statement's client CPU (bench/RESULTS.md)."""
    return (
        "{"
        + ",".join(
            "NULL" if value is None else '"' + _escaped(str(value)) + '"' for value in values
        )
        + "}"
    )


def _escaped(text: str) -> str:
    """``text`` as the inside of a double-quoted array element: backslashes and quotes escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _write_metric_samples_orm(
    cluster: Cluster, rows: list[QueueSampleRow], sampled_at: datetime, window_seconds: int
) -> MetricSamplesWritten:
    """The same as the statement above, for the other databases: read the window's samples,
    compare, delete the stale metrics samples, update the changed ones, insert the new ones."""
    queues = dict(ClusterQueue.objects.filter(cluster=cluster).values_list("name", "id"))
    window = ClusterQueueSample.objects.filter(
        cluster_queue__cluster=cluster, sampled_at=sampled_at
    )
    stored = {
        tuple(row[name] for name in _SAMPLE_KEY): row
        for row in window.values("id", "source", *_SAMPLE_KEY, *METRIC_SAMPLE_FIELDS)
    }
    result = MetricSamplesWritten(
        unknown_queues=sorted({row.cluster_queue_name for row in rows} - set(queues))
    )
    to_insert: list[ClusterQueueSample] = []
    to_update: list[ClusterQueueSample] = []
    keys: set[tuple] = set()
    for row in rows:
        queue_id = queues.get(row.cluster_queue_name)
        if queue_id is None:
            continue
        key = (queue_id, row.flavor_name, row.resource)
        keys.add(key)
        values: dict[str, Any] = {"window_seconds": window_seconds}
        values.update((name, getattr(row, name)) for name in METRIC_SAMPLE_FIELDS[1:])
        sample = ClusterQueueSample(
            cluster_queue_id=queue_id,
            flavor_name=row.flavor_name,
            resource=row.resource,
            sampled_at=sampled_at,
            source=SampleSource.METRICS,
            **values,
        )
        current = stored.get(key)
        if current is None:
            to_insert.append(sample)
        elif current["source"] == SampleSource.METRICS and not unchanged(
            ClusterQueueSample, current, values
        ):
            sample.pk = current["id"]
            to_update.append(sample)
    stale = [
        row["id"]
        for key, row in stored.items()
        if key not in keys and row["source"] == SampleSource.METRICS
    ]
    # Only metrics samples: one the sync wrote meanwhile is kept (the insert is then ignored).
    metrics_rows = ClusterQueueSample.objects.filter(source=SampleSource.METRICS)
    for query in filter_in(metrics_rows, "pk", stale, c.WRITE_BATCH_SIZE):
        result.deleted += query.delete()[0]
    if to_update:
        result.written += metrics_rows.bulk_update(
            to_update, list(METRIC_SAMPLE_FIELDS), batch_size=c.WRITE_BATCH_SIZE
        )
    ClusterQueueSample.objects.bulk_create(
        to_insert, batch_size=c.WRITE_BATCH_SIZE, ignore_conflicts=True
    )
    result.written += len(to_insert)
    return result


def metric_sample_context(
    cluster: Cluster,
) -> tuple[dict[str, list[str]], dict[tuple[str, str], Decimal]]:
    """What Kueue's metrics do not carry, from the stored objects: each ClusterQueue's GPU
    flavors in ``resourceGroups`` order, and each cohort's own GPU quota per flavor."""
    order: dict[str, list[str]] = {}
    quotas = ClusterQueueQuota.objects.filter(
        cluster_queue__cluster=cluster, resource=GPU_RESOURCE
    ).order_by("cluster_queue__name", "position", "flavor_name")
    for queue, flavor in quotas.values_list("cluster_queue__name", "flavor_name"):
        order.setdefault(queue, []).append(flavor)
    pools: dict[tuple[str, str], Decimal] = {}
    for name, groups in Cohort.objects.filter(cluster=cluster).values_list(
        "name", "resource_groups"
    ):
        for flavor, amount in cohort_gpu_pool(groups).items():
            pools[(name, flavor)] = pools.get((name, flavor), Decimal(0)) + amount
    return order, pools


def cohort_gpu_pool(groups: object) -> dict[str, Decimal]:
    """A cohort's own ``nvidia.com/gpu`` nominal quota per flavor from its stored
    ``spec.resourceGroups``; malformed entries are skipped."""
    pool: dict[str, Decimal] = {}
    for group in groups if isinstance(groups, list) else []:
        flavors = group.get("flavors") if isinstance(group, dict) else None
        for flavor in flavors if isinstance(flavors, list) else []:
            if not isinstance(flavor, dict) or not flavor.get("name"):
                continue
            for resource in flavor.get("resources") or []:
                if not isinstance(resource, dict) or resource.get("name") != GPU_RESOURCE:
                    continue
                try:
                    amount = parse_quantity(str(resource.get("nominalQuota", "0")))
                except (ValueError, ArithmeticError):
                    continue
                name = str(flavor["name"])
                pool[name] = pool.get(name, Decimal(0)) + Decimal(amount)
    return pool


def quota_metrics_source(cluster: Cluster) -> str:
    """Whose quota metrics tell the cluster's history (``quotas.constants.QUOTA_METRIC_QUERIES``):
    ``Cluster.quota_source``, else (detected) the scheduler the synced ClusterQueues were read
    from, else Kueue."""
    if cluster.quota_source:
        return str(cluster.quota_source)
    schedulers = set(
        ClusterQueue.objects.filter(cluster=cluster)
        .order_by()
        .values_list("scheduler", flat=True)
        .distinct()
    )
    others = sorted(schedulers - {c.DEFAULT_SCHEDULER, ""})
    return others[0] if len(others) == 1 and len(schedulers) == 1 else c.DEFAULT_SCHEDULER


def synced_cohorts(cluster: Cluster, source: str) -> dict[str, str] | None:
    """For a scheduler whose metrics name no cohort (every one but Kueue): its synced
    ClusterQueues and their cohorts ("" for none), which ``quotas.ingest.metrics.samples_of``
    samples; None for Kueue, whose metrics name their cohorts."""
    if source == c.DEFAULT_SCHEDULER:
        return None
    return dict(ClusterQueue.objects.filter(cluster=cluster).values_list("name", "cohort_name"))
