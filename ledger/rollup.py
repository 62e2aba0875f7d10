"""Hourly rollups of per-window usage and ClusterQueue samples, and pruning of raw rows.

``roll_up_hour`` recomputes every ``HourlyRollup`` row of one cluster-hour from the ``GpuUsage``
rows whose ``window_end`` lies in ``(hour, hour + 1h]`` and the ``ClusterQueueSample`` rows whose
``sampled_at`` lies in the same range (DESIGN "Time model": a window ``(start, end]`` belongs to
the hour that contains its start). In one transaction it deletes the cluster-hour's rows and bulk
inserts the new ones, so a late or re-collected window re-rolls its hour and a re-run changes
nothing. Figures come from aggregated queries (GROUP BY), never a query per group, on one of two
paths that compute the same figures (a test compares them on random hours):

- portable (SQLite, and the reference): per scope, one ORM GROUP BY per (group, window) over the
  hour's usage, summed over the windows;
- PostgreSQL: one statement reads the hour's usage once, window by window along the (cluster,
  window_end) index, into small temporary tables (figures per grain row over the hour; allocated
  GPUs per window for peaks), which each scope then reads; the new rows go in with COPY.
  Figures equal the portable path's up to the order of float additions (last bits).

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

Cost (PostgreSQL 15, 2 shared cores, bench/rollup.py and bench/RESULTS.md): a synthetic hour of
50,000 GPUs × 60 windows (2.9 M usage rows, 21,600 rollup rows) takes 6.4-6.8 s on the
PostgreSQL path at load average 2 and 10-11 s at 4 (about 6.8 s of CPU, nearly all the
server's); the portable path's nine scans of the hour took 28-33 s at load 3-4. 5,000 GPUs:
about 1 s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
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
from django.utils import timezone

from core.mig import GPU_RESOURCE
from core.timewindows import ensure_aware, hour_floor
from fleet.choices import ActivitySource
from fleet.models import Cluster
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup
from ledger.store import copy_rows
from quotas.models import (
    ClusterQueue,
    ClusterQueueSample,
    Cohort,
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
# Database vendors that roll up through one read of the hour's usage (``_fast_usage_rows``) and
# COPY; the others (SQLite) take the portable ORM path. Tests and bench/rollup.py clear it to
# compare the two.
FAST_PATH_VENDORS: tuple[str, ...] = ("postgresql",)

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


def _usage_per_window(base: QuerySet[GpuUsage], group: _Group) -> QuerySet[GpuUsage, Any]:
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


# --- PostgreSQL: one pass over the hour ------------------------------------------------------
# One statement reads the hour's usage once. It sums each window's rows per every column a
# scope groups by (the grain, ~11,000 rows a window at 50,000 GPUs, kept in memory) and writes
# three temporary tables from it: the grain summed over the hour (every figure, ~12,000 rows),
# and the allocated GPUs per window of each node and of each allocated grain row (for peaks and
# window counts). Each scope then reads those instead of scanning the hour's usage again.
_HOUR_TABLE = "fleet_rollup_hour_grain"
_NODE_WINDOWS = "fleet_rollup_node_windows"
_ALLOCATED_WINDOWS = "fleet_rollup_allocated_windows"
_GRAIN_COLUMNS = (
    "flavor",
    "gpu_model",
    "node_name",
    "namespace",
    "allocated",
    "workload_id",
    "local_queue_id",
    "cluster_queue_id",
    "team_id",
)
# What the scopes of allocated rows only group by.
_ALLOCATED_COLUMNS = tuple(c for c in _GRAIN_COLUMNS if c not in ("node_name", "allocated"))
# Planner settings for the fast path, restored after it. work_mem: each window's grain and each
# scope's groups x windows hash in memory. enable_sort: the planner cannot estimate the grain (it
# guessed 4.8 M rows for 675,000) and sorted it with spills to disk where hashing fits in memory.
# jit: compiling took 1-2 s per statement and sped nothing up. Parallel workers: the temporary
# tables are this backend's own, and on the hour's usage they lost on 2 busy cores.
_PLANNER_SETTINGS = {
    "work_mem": "64MB",
    "enable_sort": "off",
    "jit": "off",
    "max_parallel_workers_per_gather": "0",
}


@contextmanager
def _planner_settings() -> Iterator[None]:
    """Apply ``_PLANNER_SETTINGS`` to this transaction; put the previous values back after."""
    names = list(_PLANNER_SETTINGS)
    apply = "SELECT " + ", ".join(["set_config(%s, %s, true)"] * len(names))
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(["current_setting(%s)"] * len(names)), names)
        previous = cursor.fetchone()
        cursor.execute(apply, [v for name in names for v in (name, _PLANNER_SETTINGS[name])])
    yield
    with connection.cursor() as cursor:
        cursor.execute(apply, [v for pair in zip(names, previous, strict=True) for v in pair])


def _grain_sums() -> tuple[list[str], list[Any]]:
    """The per-row sums of ``_usage_per_window`` as SQL, each named after its ``f_`` column."""
    busy_util = getattr(settings, "GPULEDGER_BUSY_GPU_UTIL", 50)
    busy_sm = getattr(settings, "GPULEDGER_BUSY_SM_ACTIVE", 0.2)
    telemetry = "allocated AND activity IS NOT NULL"
    tensor = "allocated AND pipe_tensor_active IS NOT NULL"
    util = "allocated AND gpu_util IS NOT NULL"
    sums: list[tuple[str, str, list[Any]]] = [
        ("f_capacity", "SUM(capacity_gpus)", []),
        ("f_allocated", "SUM(gpus) FILTER (WHERE allocated)", []),
        ("f_telemetry", f"SUM(gpus) FILTER (WHERE {telemetry})", []),
        ("f_active", f"SUM(activity * gpus) FILTER (WHERE {telemetry})", []),
        (
            "f_idle",
            "SUM(gpus) FILTER (WHERE allocated AND activity < %s)",
            [settings.GPULEDGER_IDLE_THRESHOLD],
        ),
        ("f_shared", "SUM(gpus) FILTER (WHERE allocated AND shared)", []),
        (
            "f_fallback",
            f"SUM(gpus) FILTER (WHERE {telemetry} AND activity_source = %s)",
            [ActivitySource.GR_ENGINE_ACTIVE.value],
        ),
        ("f_tensor", f"SUM(pipe_tensor_active * gpus) FILTER (WHERE {tensor})", []),
        ("f_tensor_covered", f"SUM(gpus) FILTER (WHERE {tensor})", []),
        ("f_util", f"SUM(gpu_util * gpus / 100.0) FILTER (WHERE {util})", []),
        ("f_util_covered", f"SUM(gpus) FILTER (WHERE {util})", []),
        (
            "f_busy",
            "SUM(gpus) FILTER (WHERE allocated AND gpu_util >= %s AND sm_active < %s)",
            [busy_util, busy_sm],
        ),
    ]
    return (
        [f"{sql} AS {name}" for name, sql, _ in sums],
        [param for _, _, params in sums for param in params],
    )


def _create_grains(cluster_id: int, hour: datetime) -> bool:
    """Read the hour's usage once into the three temporary tables (dropped at commit at the latest).

    Each window is aggregated on its own (a LATERAL subquery per window, the windows found by
    skipping along the (cluster, window_end) index): 60 hash tables that fit in memory, each fed
    by an index scan, where one GROUP BY over the hour sorted or spilled to disk. The grain is
    never stored: writing its 675,000 wide rows cost more than computing them.

    Returns whether some window end has rows of different window lengths.
    """
    usage = GpuUsage._meta.db_table
    sums, sum_params = _grain_sums()
    columns = ", ".join(_GRAIN_COLUMNS)
    allocated_columns = ", ".join(_ALLOCATED_COLUMNS)
    figures = ", ".join(f"{column} double precision" for _, column in _WINDOW_SUMS)
    end = hour + HOUR
    tables = (
        f"{_HOUR_TABLE} (flavor text, gpu_model text, node_name text, namespace text, "
        "allocated boolean, workload_id bigint, local_queue_id bigint, cluster_queue_id bigint, "
        f"team_id bigint, {figures})",
        f"{_NODE_WINDOWS} (w_end timestamptz, w_hours double precision, flavor text, "
        "gpu_model text, g_key text, f_allocated double precision)",
        f"{_ALLOCATED_WINDOWS} (w_end timestamptz, w_hours double precision, flavor text, "
        "gpu_model text, namespace text, workload_id bigint, local_queue_id bigint, "
        "cluster_queue_id bigint, team_id bigint, f_allocated double precision)",
    )
    hour_sums = ", ".join(f"SUM({column} * w_hours)" for _, column in _WINDOW_SUMS)
    statement = (
        "WITH RECURSIVE windows (w_end) AS ("
        f"  (SELECT window_end FROM {usage} WHERE cluster_id = %s"
        "    AND window_end > %s AND window_end <= %s ORDER BY window_end LIMIT 1)"
        "  UNION ALL"
        f"  SELECT (SELECT u.window_end FROM {usage} u WHERE u.cluster_id = %s"
        "    AND u.window_end > windows.w_end AND u.window_end <= %s"
        "    ORDER BY u.window_end LIMIT 1)"
        "  FROM windows WHERE windows.w_end IS NOT NULL"
        "), grain AS ("
        "  SELECT per_window.* FROM windows CROSS JOIN LATERAL ("
        "    SELECT windows.w_end, CAST(EXTRACT(EPOCH FROM (windows.w_end - window_start))"
        f"      AS double precision) / 3600.0 AS w_hours, {columns}, {', '.join(sums)}"
        f"    FROM {usage} WHERE cluster_id = %s AND window_end = windows.w_end"
        f"    GROUP BY window_start, {columns}"
        "  ) per_window WHERE windows.w_end IS NOT NULL"
        "), hour_rows AS ("
        f"  INSERT INTO {_HOUR_TABLE} SELECT {columns}, {hour_sums} FROM grain GROUP BY {columns}"
        "), node_rows AS ("
        f"  INSERT INTO {_NODE_WINDOWS} SELECT w_end, w_hours, flavor, gpu_model,"
        "    COALESCE(NULLIF(node_name, ''), %s), SUM(f_allocated) FROM grain"
        "    GROUP BY 1, 2, 3, 4, 5"
        ") "
        f"INSERT INTO {_ALLOCATED_WINDOWS} SELECT w_end, w_hours, {allocated_columns}, f_allocated "
        "FROM grain WHERE allocated"
    )
    params = [cluster_id, hour, end, cluster_id, end, *sum_params, cluster_id, UNATTRIBUTED]
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"CREATE TEMPORARY TABLE {table} ON COMMIT DROP")
        cursor.execute(statement, params)
        cursor.execute(
            f"SELECT EXISTS (SELECT FROM {_NODE_WINDOWS} GROUP BY w_end "
            "HAVING MIN(w_hours) < MAX(w_hours))"
        )
        return cursor.fetchone()[0]


def _grain_key(group: _Group) -> tuple[str, list[Any], str]:
    """The scope's key over a table ``g`` of grain columns as SQL, its parameters and joins."""
    if group.scope == RollupScope.FLEET:
        return "%s", [group.key.value], ""  # type: ignore[union-attr]
    if group.scope in (RollupScope.NODE, RollupScope.FLAVOR, RollupScope.NAMESPACE):
        column = {"node": "node_name", "flavor": "flavor", "namespace": "namespace"}[group.scope]
        return f"COALESCE(NULLIF(g.{column}, ''), %s)", [UNATTRIBUTED], ""
    if group.scope == RollupScope.COHORT:
        joins = (
            f"LEFT JOIN {ClusterQueue._meta.db_table} cq ON cq.id = g.cluster_queue_id "
            f"LEFT JOIN {Cohort._meta.db_table} co ON co.id = cq.cohort_id"
        )
        return "COALESCE(co.name, NULLIF(cq.cohort_name, ''), %s)", [UNATTRIBUTED], joins
    return f"g.{group.named_by}_id", [], ""


def _peaks_sql(group: _Group, mixed_lengths: bool) -> tuple[str, list[Any]]:
    """``key, flavor, gpu_model, peak_allocated_gpus, windows`` of one scope, as SQL."""
    # Per-window rows are (group, window end, window length); with one length per window end,
    # as every collection run writes, they are one per window end and can simply be counted
    # (COUNT(DISTINCT) would sort them all).
    windows = "COUNT(DISTINCT w_end)" if mixed_lengths else "COUNT(*)"
    outer = f"SELECT g_key, g_flavor, g_model, MAX(COALESCE(f_allocated, 0)), {windows} FROM "
    outer_group = " per_window GROUP BY g_key, g_flavor, g_model"
    if group.scope == RollupScope.NODE:
        # The node table already holds one row per node and window.
        inner = (
            "(SELECT g_key, flavor AS g_flavor, gpu_model AS g_model, w_end, f_allocated "
            f"FROM {_NODE_WINDOWS})"
        )
        return outer + inner + outer_group, []
    key, params, joins = _grain_key(group)
    table = _ALLOCATED_WINDOWS if group.allocated_only else _NODE_WINDOWS
    inner = (
        f"(SELECT {key} AS g_key, g.flavor AS g_flavor, g.gpu_model AS g_model, g.w_end, "
        f"SUM(g.f_allocated) AS f_allocated FROM {table} g {joins} "
        f"GROUP BY 1, 2, 3, 4{', g.w_hours' if mixed_lengths else ''})"
    )
    return outer + inner + outer_group, params


def _grain_rows(group: _Group, mixed_lengths: bool) -> list[dict[str, Any]]:
    """``_usage_rows`` of one scope: figures from the hour table, peaks from the window tables."""
    key, params, joins = _grain_key(group)
    foreign_keys = [
        name for name, expression in group.foreign_keys().items() if expression is not None
    ]
    sums = "".join(f", SUM(g.{column})" for _, column in _WINDOW_SUMS)
    maxima = "".join(f", MAX(g.{name})" for name in foreign_keys)
    totals_sql = (
        f"SELECT {key}, g.flavor, g.gpu_model{sums}{maxima} FROM {_HOUR_TABLE} g {joins} "
        f"{'WHERE g.allocated' if group.allocated_only else ''} GROUP BY 1, 2, 3"
    )
    names = ["key", "flavor", "gpu_model", *(figure for figure, _ in _WINDOW_SUMS), *foreign_keys]
    peaks_sql, peaks_params = _peaks_sql(group, mixed_lengths)
    with connection.cursor() as cursor:
        cursor.execute(totals_sql, params)
        rows = {
            tuple(values[:3]): dict(zip(names, values, strict=True)) for values in cursor.fetchall()
        }
        cursor.execute(peaks_sql, peaks_params)
        for identity_key, flavor, model, peak, windows in cursor.fetchall():
            rows[(identity_key, flavor, model)].update(peak_allocated_gpus=peak, windows=windows)
    return list(rows.values())


def _fast_usage_rows(cluster: Cluster, hour: datetime) -> dict[str, list[dict[str, Any]]]:
    """Every scope's ``_usage_rows`` from one read of the hour's usage (PostgreSQL).

    On an error the transaction (or savepoint) rolls back, and the temporary tables with it.
    """
    with _planner_settings():
        mixed_lengths = _create_grains(cluster.pk, hour)
        found = {
            group.scope: _grain_rows(group, mixed_lengths) for group in _usage_groups(cluster.name)
        }
    with connection.cursor() as cursor:
        # ON COMMIT DROP is too late when a caller's transaction rolls up a second hour.
        cursor.execute(f"DROP TABLE {_HOUR_TABLE}, {_NODE_WINDOWS}, {_ALLOCATED_WINDOWS}")
    return found


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
    found: list[dict[str, Any]] = [
        dict(row)
        for row in samples.order_by()
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
    ]
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


def _compute_rows(cluster: Cluster, hour: datetime) -> list[dict[str, Any]]:
    """The cluster-hour's rollup rows as HourlyRollup field values (defaults left out)."""
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
    fast = _fast_usage_rows(cluster, hour) if connection.vendor in FAST_PATH_VENDORS else None
    for group in _usage_groups(cluster.name):
        found = fast[group.scope] if fast is not None else _usage_rows(usage, group)
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
        {"cluster_id": cluster.pk, "scope": scope, "hour": hour, **values}
        for (scope, _key, _flavor, _model), values in rows.items()
    ]


def _insert_rows(rows: list[dict[str, Any]]) -> None:
    """Insert new rollup rows: binary COPY with the fast path, batched INSERTs otherwise.

    The 21,602 rows of a 50,000-GPU hour: COPY 0.7-1.2 s, bulk_create 1.6-2.7 s, of which 1.0 s
    of this process's CPU building one placeholder per value (0.05 s for COPY, which also skips
    building model instances); the server's share, mostly index upkeep, was 0.5 s either way.
    """
    if connection.vendor not in FAST_PATH_VENDORS:
        HourlyRollup.objects.bulk_create(
            [HourlyRollup(**row) for row in rows], batch_size=ROLLUP_BATCH_SIZE
        )
        return
    fields = [field for field in HourlyRollup._meta.concrete_fields if not field.primary_key]
    # auto_now, which only save() and bulk_create() fill in
    defaults = {field.attname: field.get_default() for field in fields} | {
        "updated_at": timezone.now()
    }
    copy_rows(
        HourlyRollup._meta.db_table,
        [str(field.column) for field in fields],
        (tuple(row.get(name, default) for name, default in defaults.items()) for row in rows),
    )


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
        _insert_rows(new_rows)
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
