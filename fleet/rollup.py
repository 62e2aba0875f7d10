"""Hourly rollups of per-window usage and ClusterQueue samples, and pruning of raw rows.

``roll_up_hour`` recomputes every ``HourlyRollup`` row of one cluster-hour from the ``GpuUsage``
rows whose ``window_end`` lies in ``(hour, hour + 1h]`` and the ``ClusterQueueSample`` rows whose
``sampled_at`` lies in the same range (DESIGN "Time model": a window ``(start, end]`` belongs to
the hour that contains its start). In one transaction it deletes the cluster-hour's rows and bulk
inserts the new ones, so a late or re-collected window re-rolls its hour and a re-run changes
nothing. Every figure is one aggregated query per scope (GROUP BY), never a query per group.

Figures (DESIGN "Figures"); a row's GPU-hours are ``gpus × window seconds / 3600``:

- ``capacity_gpu_hours``: Σ ``capacity_gpus`` GPU-hours, on fleet, node and flavor rows only
  (MIG instances are already slices/7 on usage rows; the extra rows of a time-sliced GPU carry 0).
- ``allocated_gpu_hours``: allocated rows. ``telemetry_gpu_hours``: allocated rows whose
  ``activity`` is not null; ``active_gpu_hours`` = Σ activity × GPU-hours over those.
- ``idle_gpu_hours``: allocated rows with ``activity < GPULEDGER_IDLE_THRESHOLD``. A row without
  telemetry is "no data" and never idle.
- ``shared_gpu_hours``: allocated time-sliced rows. ``fallback_gpu_hours``: telemetry GPU-hours
  whose activity came from GR_ENGINE_ACTIVE.
- ``tensor_active_gpu_hours`` / ``tensor_covered_gpu_hours``: Σ PIPE_TENSOR_ACTIVE × GPU-hours /
  GPU-hours, over allocated rows that report it; ``gpu_util_gpu_hours`` /
  ``gpu_util_covered_gpu_hours`` likewise with GPU_UTIL / 100.
- ``busy_not_working_gpu_hours``: allocated GPU-hours with ``gpu_util >= GPULEDGER_BUSY_GPU_UTIL``
  (default 50) while ``sm_active < GPULEDGER_BUSY_SM_ACTIVE`` (default 0.2). Only SM_ACTIVE counts:
  a row whose activity came from GR_ENGINE_ACTIVE has no SM_ACTIVE and is never "busy but not
  working" (GR_ENGINE_ACTIVE, like GPU_UTIL, only says a kernel ran).
- ``peak_allocated_gpus``: the largest allocated GPUs of the row's group (and flavor / GPU model)
  in any one window of the hour. ``windows``: distinct windows rolled into the row; on rows that
  also carry queue samples, the larger of the usage and the sample window counts.
- ``nominal_gpu_hours``, ``borrowed_gpu_hours``, ``lent_gpu_hours``, ``pending_gpu_hours`` (from
  ``pending_demand``): Σ value × ``window_seconds`` / 3600 over the ``nvidia.com/gpu`` samples, on
  cluster_queue rows and summed to team (``ClusterQueue.team``), cohort (``ClusterQueue.cohort``),
  flavor and fleet rows. MIG quota resources are in MIG-instance units, not GPUs, and are left out.
  Namespace, local_queue, workload and node rows carry no quota figures: Kueue reports quota per
  ClusterQueue. Workload rows leave ``pending_gpu_hours`` at 0.

Scopes and keys: fleet → cluster name; node → node name; flavor → flavor; team → team name;
cohort → the ClusterQueue's cohort name (the direct cohort; parents are not summed); cluster_queue
→ queue name; local_queue and workload → ``namespace/name``; namespace → namespace. Usage with no
such group (no team, no queue, no workload, empty node or flavor name) goes to the key
``(unattributed)`` (a string no Kubernetes name can take), so every scope's rows sum to the fleet
row; likewise queue samples of a queue without team or cohort. Fleet, node and flavor rows count
every usage row (capacity needs the unallocated GPUs); the other scopes only allocated rows, which
is all the usage figures look at anyway.

Every row is split by (flavor, GPU model) as in ``fleet_rollup_identity``. Quota samples name a
flavor but no GPU model: they take the flavor's GPU model in that hour's usage rows when the
flavor shows exactly one, else ``ResourceFlavor.gpu_model``, else empty, so a queue's allocated and
nominal figures usually land on the same row. ``peak_allocated_gpus`` is per split: the peaks of
two splits do not add up to the group's peak.

Foreign keys: team rows carry the team; cluster_queue rows the queue and its owning team;
local_queue rows the LocalQueue's ClusterQueue and its team; workload rows the workload and the
ClusterQueue and team its usage was attributed to (the largest id should rows disagree).
``(unattributed)`` rows carry none.

Cost (PostgreSQL 15, 2 shared cores under load): a synthetic hour of 5,000 GPUs × 60 windows
(300,000 usage rows) rolls up in 3-8 s, 50,000 GPUs × 60 windows (3 M rows) in 80-95 s: nine
scans of the hour, one GROUP BY per scope.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import (
    CharField,
    Count,
    Expression,
    F,
    FloatField,
    Func,
    Max,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Cast, Coalesce, NullIf

from core.timewindows import ensure_aware, hour_floor
from fleet.choices import ActivitySource, RollupScope
from fleet.models import Cluster, GpuUsage, HourlyRollup
from quotas.models import (
    GPU_RESOURCE,
    ClusterQueue,
    ClusterQueueSample,
    LocalQueue,
    ResourceFlavor,
    Team,
    Workload,
)

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
UNATTRIBUTED = "(unattributed)"
# Rollup rows per INSERT. An hour of a synthetic 50,000-GPU cluster wrote 39,524 rows, 2,000 per
# statement in about 0.2 s each; 2,000 × 28 columns stays under PostgreSQL's 65,535 parameters.
ROLLUP_BATCH_SIZE = 2_000
# Rows per DELETE when pruning. Measured on PostgreSQL 15 here (2 busy cores): 20,000 GpuUsage rows
# took 0.2-0.6 s per statement, short enough not to hold up a collector writing the next window;
# 5,000 took 0.1-0.3 s each but nearly doubled the total time.
PRUNE_BATCH_SIZE = 20_000

_USAGE_FIGURES = (
    "capacity_gpu_hours",
    "allocated_gpu_hours",
    "telemetry_gpu_hours",
    "active_gpu_hours",
    "idle_gpu_hours",
    "shared_gpu_hours",
    "fallback_gpu_hours",
    "tensor_active_gpu_hours",
    "tensor_covered_gpu_hours",
    "gpu_util_gpu_hours",
    "gpu_util_covered_gpu_hours",
    "busy_not_working_gpu_hours",
)
_QUOTA_FIGURES = (
    "nominal_gpu_hours",
    "borrowed_gpu_hours",
    "lent_gpu_hours",
    "pending_gpu_hours",
)
_FOREIGN_KEYS = ("team_id", "cluster_queue_id", "workload_id")


class WindowSeconds(Func):
    """``end - start`` of two datetimes, in seconds, as a float."""

    arity = 2
    arg_joiner = " - "
    template = "CAST(EXTRACT(EPOCH FROM (%(expressions)s)) AS double precision)"
    output_field = FloatField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        # Windows are aligned to whole seconds, so the day fractions are rounded back to them.
        end_sql, end_params = compiler.compile(self.source_expressions[0])
        start_sql, start_params = compiler.compile(self.source_expressions[1])
        sql = f"ROUND((julianday({end_sql}) - julianday({start_sql})) * 86400.0)"
        return sql, (*end_params, *start_params)


@dataclass(frozen=True)
class _Group:
    """How one scope names its groups and which foreign keys its rows carry."""

    scope: str
    key: Expression | F | Value
    allocated_only: bool
    # The key is the id of this kind of object, named after the GROUP BY: grouping 3 M rows by an
    # integer is much cheaper than by a joined and concatenated name.
    named_by: str | None = None
    team: F | None = None
    cluster_queue: F | None = None
    workload: F | None = None

    def foreign_keys(self) -> dict[str, F | None]:
        return {
            "team_id": self.team,
            "cluster_queue_id": self.cluster_queue,
            "workload_id": self.workload,
        }


def _named(field: str) -> Coalesce:
    """A name column, with empty and missing names as the unattributed bucket."""
    return Coalesce(NullIf(F(field), Value("")), Value(UNATTRIBUTED), output_field=CharField())


def _cohort(prefix: str) -> Coalesce:
    """The cohort of a ClusterQueue: the Cohort row, else the name an implicit cohort goes by."""
    return Coalesce(
        F(f"{prefix}cohort__name"),
        NullIf(F(f"{prefix}cohort_name"), Value("")),
        Value(UNATTRIBUTED),
        output_field=CharField(),
    )


def _usage_groups(cluster_name: str) -> list[_Group]:
    return [
        _Group(RollupScope.FLEET, Value(cluster_name, output_field=CharField()), False),
        _Group(RollupScope.NODE, _named("node_name"), False),
        _Group(RollupScope.FLAVOR, _named("flavor"), False),
        _Group(RollupScope.TEAM, F("team"), True, named_by="team"),
        _Group(RollupScope.COHORT, _cohort("cluster_queue__"), True),
        _Group(RollupScope.CLUSTER_QUEUE, F("cluster_queue"), True, named_by="cluster_queue"),
        _Group(RollupScope.LOCAL_QUEUE, F("local_queue"), True, named_by="local_queue"),
        _Group(RollupScope.NAMESPACE, _named("namespace"), True),
        _Group(
            RollupScope.WORKLOAD,
            F("workload"),
            True,
            named_by="workload",
            team=F("team"),
            cluster_queue=F("cluster_queue"),
        ),
    ]


def _quota_groups(cluster_name: str) -> list[_Group]:
    return [
        _Group(RollupScope.FLEET, Value(cluster_name, output_field=CharField()), False),
        _Group(RollupScope.FLAVOR, _named("flavor_name"), False),
        _Group(
            RollupScope.TEAM,
            Coalesce(F("cluster_queue__team__name"), Value(UNATTRIBUTED), output_field=CharField()),
            False,
            team=F("cluster_queue__team"),
        ),
        _Group(RollupScope.COHORT, _cohort("cluster_queue__"), False),
        _Group(
            RollupScope.CLUSTER_QUEUE,
            F("cluster_queue__name"),
            False,
            team=F("cluster_queue__team"),
            cluster_queue=F("cluster_queue"),
        ),
    ]


def _usage_per_window(base: QuerySet[GpuUsage], group: _Group) -> QuerySet[GpuUsage]:
    """One row per (group, flavor, GPU model, window) with the window's GPU sums."""
    threshold = settings.GPULEDGER_IDLE_THRESHOLD
    busy_util = getattr(settings, "GPULEDGER_BUSY_GPU_UTIL", 50)
    busy_sm = getattr(settings, "GPULEDGER_BUSY_SM_ACTIVE", 0.2)
    allocated = Q(allocated=True)
    telemetry = allocated & Q(activity__isnull=False)
    tensor = allocated & Q(pipe_tensor_active__isnull=False)
    util = allocated & Q(gpu_util__isnull=False)
    queryset = base.filter(allocated=True) if group.allocated_only else base
    fk_maxima = {
        f"fk_{name}": Max(expression)
        for name, expression in group.foreign_keys().items()
        if expression is not None
    }
    return (
        queryset.order_by()
        .annotate(
            g_key=group.key,
            g_flavor=F("flavor"),
            g_model=F("gpu_model"),
            w_end=F("window_end"),
            w_hours=WindowSeconds(F("window_end"), F("window_start")) / Value(3600.0),
        )
        .values("g_key", "g_flavor", "g_model", "w_end", "w_hours")
        .annotate(
            f_capacity=Sum("capacity_gpus"),
            f_allocated=Sum("gpus", filter=allocated),
            f_telemetry=Sum("gpus", filter=telemetry),
            f_active=Sum(F("activity") * F("gpus"), filter=telemetry),
            f_idle=Sum("gpus", filter=allocated & Q(activity__lt=threshold)),
            f_shared=Sum("gpus", filter=allocated & Q(shared=True)),
            f_fallback=Sum(
                "gpus",
                filter=telemetry & Q(activity_source=ActivitySource.GR_ENGINE_ACTIVE),
            ),
            f_tensor=Sum(F("pipe_tensor_active") * F("gpus"), filter=tensor),
            f_tensor_covered=Sum("gpus", filter=tensor),
            f_util=Sum(F("gpu_util") * F("gpus") / Value(100.0), filter=util),
            f_util_covered=Sum("gpus", filter=util),
            f_busy=Sum(
                "gpus",
                filter=allocated & Q(gpu_util__gte=busy_util, sm_active__lt=busy_sm),
            ),
            **fk_maxima,
        )
    )


_WINDOW_SUMS = (
    ("capacity_gpu_hours", "f_capacity"),
    ("allocated_gpu_hours", "f_allocated"),
    ("telemetry_gpu_hours", "f_telemetry"),
    ("active_gpu_hours", "f_active"),
    ("idle_gpu_hours", "f_idle"),
    ("shared_gpu_hours", "f_shared"),
    ("fallback_gpu_hours", "f_fallback"),
    ("tensor_active_gpu_hours", "f_tensor"),
    ("tensor_covered_gpu_hours", "f_tensor_covered"),
    ("gpu_util_gpu_hours", "f_util"),
    ("gpu_util_covered_gpu_hours", "f_util_covered"),
    ("busy_not_working_gpu_hours", "f_busy"),
)


def _usage_rows(base: QuerySet[GpuUsage], group: _Group) -> list[dict[str, Any]]:
    """The group's figures for the hour: per-window sums, then summed (and peaked) over windows.

    The ORM builds the per-window GROUP BY; the second level (a GROUP BY over that derived table)
    is plain SQL because the ORM cannot select from a subquery.
    """
    inner_sql, params = _usage_per_window(base, group).query.sql_with_params()
    foreign_keys = [
        name for name, expression in group.foreign_keys().items() if expression is not None
    ]
    columns = [
        *(f"SUM({column} * w_hours)" for _, column in _WINDOW_SUMS),
        "MAX(COALESCE(f_allocated, 0))",
        "COUNT(DISTINCT w_end)",
        *(f"MAX(fk_{name})" for name in foreign_keys),
    ]
    sql = (
        f"SELECT g_key, g_flavor, g_model, {', '.join(columns)} "
        f"FROM ({inner_sql}) per_window GROUP BY g_key, g_flavor, g_model"
    )
    names = [
        "key",
        "flavor",
        "gpu_model",
        *(figure for figure, _ in _WINDOW_SUMS),
        "peak_allocated_gpus",
        "windows",
        *foreign_keys,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]


def _names(kind: str, ids: set[int]) -> dict[int, dict[str, Any]]:
    """Key and foreign keys of the rows grouped by the id of a team, queue or workload."""
    if kind == "team":
        return {
            pk: {"key": team.name, "team_id": pk}
            for pk, team in Team.objects.only("name").in_bulk(ids).items()
        }
    if kind == "cluster_queue":
        return {
            pk: {"key": queue.name, "cluster_queue_id": pk, "team_id": queue.team_id}
            for pk, queue in ClusterQueue.objects.only("name", "team").in_bulk(ids).items()
        }
    if kind == "local_queue":
        local_queues = LocalQueue.objects.select_related("cluster_queue").only(
            "namespace", "name", "cluster_queue", "cluster_queue__team"
        )
        return {
            pk: {
                "key": f"{queue.namespace}/{queue.name}",
                "cluster_queue_id": queue.cluster_queue_id,
                "team_id": queue.cluster_queue.team_id if queue.cluster_queue else None,
            }
            for pk, queue in local_queues.in_bulk(ids).items()
        }
    return {
        pk: {"key": f"{workload.namespace}/{workload.name}", "workload_id": pk}
        for pk, workload in Workload.objects.only("namespace", "name").in_bulk(ids).items()
    }


def _name_rows(group: _Group, rows: list[dict[str, Any]]) -> None:
    """Replace id keys by names; missing ids (none, or deleted meanwhile) are unattributed."""
    if group.named_by is None:
        return
    names = _names(group.named_by, {row["key"] for row in rows if row["key"] is not None})
    unattributed = {"key": UNATTRIBUTED, **dict.fromkeys(_FOREIGN_KEYS)}
    for row in rows:
        row.update(names.get(row["key"], unattributed))


def _quota_rows(samples: QuerySet[ClusterQueueSample], group: _Group) -> list[dict[str, Any]]:
    hours = Cast(F("window_seconds"), FloatField()) / Value(3600.0)

    def gpu_hours(field: str) -> Sum:
        return Sum(Cast(F(field), FloatField()) * hours)

    fk_maxima = {
        f"fk_{name}": Max(expression)
        for name, expression in group.foreign_keys().items()
        if expression is not None
    }
    found = list(
        samples.order_by()
        .annotate(key=group.key, flavor=F("flavor_name"))
        .values("key", "flavor")
        .annotate(
            nominal_gpu_hours=gpu_hours("nominal"),
            borrowed_gpu_hours=gpu_hours("borrowed"),
            lent_gpu_hours=gpu_hours("lent"),
            pending_gpu_hours=gpu_hours("pending_demand"),
            windows=Count("sampled_at", distinct=True),
            **fk_maxima,
        )
    )
    for row in found:
        for name in _FOREIGN_KEYS:
            row[name] = row.pop(f"fk_{name}", None)
    return found


def _flavor_models(cluster_id: int, fleet_rows: list[dict[str, Any]]) -> dict[str, str]:
    """The GPU model quota samples of each flavor are filed under (see the module docstring)."""
    models: dict[str, str] = dict(
        ResourceFlavor.objects.filter(cluster_id=cluster_id)
        .exclude(gpu_model="")
        .values_list("name", "gpu_model")
    )
    seen: dict[str, set[str]] = {}
    for row in fleet_rows:
        seen.setdefault(row["flavor"], set()).add(row["gpu_model"])
    for flavor, found in seen.items():
        if len(found) == 1:
            models[flavor] = found.pop()
    return models


def _merge_usage(target: dict[str, Any], row: dict[str, Any]) -> None:
    """Fold a second usage row of one identity in; only when a group's object vanished meanwhile.

    Its peak is then the larger of the two peaks, a lower bound of the true one.
    """
    for figure in _USAGE_FIGURES:
        target[figure] += row[figure]
    for figure in ("peak_allocated_gpus", "windows"):
        target[figure] = max(target[figure], row[figure])


def _compute_rows(cluster: Cluster, hour: datetime) -> list[HourlyRollup]:
    end = hour + HOUR
    usage = GpuUsage.objects.filter(cluster_id=cluster.pk, window_end__gt=hour, window_end__lte=end)
    samples = ClusterQueueSample.objects.filter(
        cluster_queue__cluster_id=cluster.pk,
        resource=GPU_RESOURCE,
        sampled_at__gt=hour,
        sampled_at__lte=end,
    )
    rows: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    fleet_rows: list[dict[str, Any]] = []
    for group in _usage_groups(cluster.name):
        found = _usage_rows(usage, group)
        _name_rows(group, found)
        if group.scope == RollupScope.FLEET:
            fleet_rows = found
        for row in found:
            identity = (group.scope, row["key"], row["flavor"], row["gpu_model"])
            for figure in (*_USAGE_FIGURES, "peak_allocated_gpus"):
                row[figure] = row[figure] or 0.0
            if group.allocated_only:
                # Capacity belongs to fleet, node and flavor rows (DESIGN "Figures").
                row["capacity_gpu_hours"] = 0.0
            for name in _FOREIGN_KEYS:
                row.setdefault(name, None)
            if identity in rows:
                _merge_usage(rows[identity], row)
            else:
                rows[identity] = row

    models = _flavor_models(cluster.pk, fleet_rows)
    for group in _quota_groups(cluster.name):
        for row in _quota_rows(samples, group):
            model = models.get(row["flavor"], "")
            identity = (group.scope, row["key"], row["flavor"], model)
            target = rows.setdefault(
                identity,
                {"key": row["key"], "flavor": row["flavor"], "gpu_model": model, "windows": 0},
            )
            for figure in _QUOTA_FIGURES:
                target[figure] = row[figure] or 0.0
            target["windows"] = max(target["windows"], row["windows"])
            for name in _FOREIGN_KEYS:
                if target.get(name) is None:
                    target[name] = row.get(name)

    return [
        HourlyRollup(cluster_id=cluster.pk, scope=scope, hour=hour, **values)
        for (scope, _key, _flavor, _model), values in rows.items()
    ]


def roll_up_hour(cluster_id: int, hour: datetime) -> int:
    """(Re)compute every rollup row of one cluster-hour; returns the rows written.

    ``hour`` is floored to the start of its hour. The cluster row is locked (FOR NO KEY UPDATE,
    which does not block usage inserts) so two rollups of one cluster run one after the other and
    the later one sees the later data.
    """
    hour = hour_floor(hour)
    with transaction.atomic():
        cluster = (
            Cluster.objects.select_for_update(no_key=True).only("pk", "name").get(pk=cluster_id)
        )
        new_rows = _compute_rows(cluster, hour)
        deleted, _ = HourlyRollup.objects.filter(cluster_id=cluster_id, hour=hour).delete()
        HourlyRollup.objects.bulk_create(new_rows, batch_size=ROLLUP_BATCH_SIZE)
    logger.info(
        "Rolled up cluster %s hour %s: %d rows written, %d replaced",
        cluster.name,
        hour.isoformat(),
        len(new_rows),
        deleted,
    )
    return len(new_rows)


def roll_up_range(cluster_id: int, start: datetime, end: datetime) -> int:
    """Roll up every hour that touches ``[start, end)``; returns the rows written."""
    start = ensure_aware(start)
    end = ensure_aware(end)
    written = 0
    hour = hour_floor(start)
    while hour < end:
        written += roll_up_hour(cluster_id, hour)
        hour += HOUR
    return written


def hours_touched(window_ends: Iterable[datetime]) -> list[datetime]:
    """The hours that windows ending at these times belong to, oldest first, once each.

    A window ``(start, end]`` belongs to the hour containing its start, so a window ending on the
    hour belongs to the hour before.
    """
    epsilon = timedelta(microseconds=1)
    return sorted({hour_floor(ensure_aware(end) - epsilon) for end in window_ends})


def _delete_in_batches(queryset: QuerySet[Any]) -> int:
    """Delete what ``queryset`` matches, PRUNE_BATCH_SIZE rows per statement."""
    model = queryset.model
    total = 0
    while True:
        batch = queryset.order_by().values("pk")[:PRUNE_BATCH_SIZE]
        deleted, _ = model.objects.filter(pk__in=Subquery(batch)).delete()
        total += deleted
        if deleted < PRUNE_BATCH_SIZE:
            return total


def prune_usage(before: datetime) -> int:
    """Delete per-window usage and ClusterQueue samples older than ``before``; returns rows deleted.

    Usage is deleted cluster by cluster so each batch walks the (cluster, window_end) index.
    Rollups are kept: they are what outlives the usage retention.
    """
    before = ensure_aware(before)
    usage = 0
    for cluster_id in Cluster.objects.order_by("pk").values_list("pk", flat=True):
        usage += _delete_in_batches(
            GpuUsage.objects.filter(cluster_id=cluster_id, window_end__lt=before)
        )
    samples = _delete_in_batches(ClusterQueueSample.objects.filter(sampled_at__lt=before))
    logger.info(
        "Pruned usage before %s: %d usage rows, %d queue samples",
        before.isoformat(),
        usage,
        samples,
    )
    return usage + samples


def prune_rollups(before: datetime) -> int:
    """Delete hourly rollups of hours starting before ``before``; returns rows deleted.

    Scope by scope, so each batch walks the (scope, hour, key) index.
    """
    before = ensure_aware(before)
    deleted = 0
    for scope in RollupScope.values:
        deleted += _delete_in_batches(HourlyRollup.objects.filter(scope=scope, hour__lt=before))
    logger.info("Pruned rollups before %s: %d rows", before.isoformat(), deleted)
    return deleted
