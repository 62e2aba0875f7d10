"""Usage figures of every scope from one read of the hour (PostgreSQL), and rollup rows by COPY.

One statement reads the hour's usage once, window by window along the (cluster, window_end)
index. It sums each window's rows per every column a scope groups by (the grain, ~11,000 rows a
window at 50,000 GPUs, kept in memory) and writes three temporary tables from it: the grain
summed over the hour (every figure, ~12,000 rows), and the allocated GPUs per window of each node
and of each allocated grain row (for peaks and window counts). Each scope then reads those
instead of scanning the hour's usage again; the new rows go in with COPY. Figures equal those of
``ledger.rollup.portable`` up to the order of float additions (last bits).

Cost (PostgreSQL 15, 2 shared cores, bench/rollup.py and bench/RESULTS.md): a synthetic hour of
50,000 GPUs × 60 windows (2.9 M usage rows, 21,600 rollup rows) takes 6.4-6.8 s on this path at
load average 2 and 10-11 s at 4 (about 6.8 s of CPU, nearly all the server's); the portable
path's nine scans of the hour took 28-33 s at load 3-4. 5,000 GPUs: about 1 s.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from core.pgsettings import local_settings
from fleet.models import Cluster
from ledger.choices import RollupScope
from ledger.figures import FIGURES, sum_sql
from ledger.models import GpuUsage, HourlyRollup, UsageWindow
from ledger.rollup.groups import NO_COHORT, UNATTRIBUTED, Group, usage_groups
from ledger.rollup.row_figures import USAGE_FIGURES, WINDOW_SUMS, thresholds
from ledger.store import copy_rows
from quotas.models import ClusterQueue, Cohort

# Database vendors that roll up through one read of the hour's usage (``fast_usage_rows``) and
# COPY; the others (SQLite) take the portable ORM path. Tests and bench/rollup.py clear it to
# compare the two.
FAST_PATH_VENDORS: tuple[str, ...] = ("postgresql",)


def fast_path_applies() -> bool:
    """Whether this connection's database takes this path (see ``FAST_PATH_VENDORS``)."""
    return connection.vendor in FAST_PATH_VENDORS


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


def _grain_sums() -> tuple[list[str], list[Any]]:
    """The per-window sums of the portable path as SQL, each named after its ``f_`` column
    (the rules of ``ledger.figures.FIGURES``)."""
    limits = thresholds()
    sums = [(figure.column, *sum_sql(figure, limits)) for figure in FIGURES]
    return (
        [f"{sql} AS {name}" for name, sql, _ in sums],
        [param for _, _, params in sums for param in params],
    )


def _create_grains(cluster_id: int, hour: datetime, end: datetime) -> bool:
    """Read the hour's usage once into the three temporary tables (dropped at commit at the latest).

    Each window is aggregated on its own (a LATERAL subquery per window, the windows listed by
    ``UsageWindow``): 60 hash tables that fit in memory, each fed
    by an index scan, where one GROUP BY over the hour sorted or spilled to disk. The grain is
    never stored: writing its 675,000 wide rows cost more than computing them.

    Returns whether some window end has rows of different window lengths.
    """
    usage = GpuUsage._meta.db_table
    sums, sum_params = _grain_sums()
    columns = ", ".join(_GRAIN_COLUMNS)
    allocated_columns = ", ".join(_ALLOCATED_COLUMNS)
    figures = ", ".join(f"{column} double precision" for _, column in WINDOW_SUMS)
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
    hour_sums = ", ".join(f"SUM({column} * w_hours)" for _, column in WINDOW_SUMS)
    statement = (
        "WITH windows (w_end) AS ("
        f"  SELECT window_end FROM {UsageWindow._meta.db_table} WHERE cluster_id = %s"
        "    AND window_end > %s AND window_end <= %s"
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
    params = [cluster_id, hour, end, *sum_params, cluster_id, UNATTRIBUTED]
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"CREATE TEMPORARY TABLE {table} ON COMMIT DROP")
        cursor.execute(statement, params)
        cursor.execute(
            f"SELECT EXISTS (SELECT FROM {_NODE_WINDOWS} GROUP BY w_end "
            "HAVING MIN(w_hours) < MAX(w_hours))"
        )
        return cursor.fetchone()[0]


def _grain_key(group: Group) -> tuple[str, list[Any], str]:
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
        cohort = (
            "CASE WHEN cq.id IS NULL THEN %s "
            "ELSE COALESCE(co.name, NULLIF(cq.cohort_name, ''), %s) END"
        )
        return cohort, [UNATTRIBUTED, NO_COHORT], joins
    return f"g.{group.named_by}_id", [], ""


def _peaks_sql(group: Group, mixed_lengths: bool) -> tuple[str, list[Any]]:
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


def _grain_rows(group: Group, mixed_lengths: bool) -> list[dict[str, Any]]:
    """``portable.usage_rows`` of one scope: figures from the hour table, peaks from the windows."""
    key, params, joins = _grain_key(group)
    foreign_keys = group.carried_keys()
    sums = "".join(f", SUM(g.{column})" for _, column in WINDOW_SUMS)
    maxima = "".join(f", MAX(g.{name})" for name in foreign_keys)
    totals_sql = (
        f"SELECT {key}, g.flavor, g.gpu_model{sums}{maxima} FROM {_HOUR_TABLE} g {joins} "
        f"{'WHERE g.allocated' if group.allocated_only else ''} GROUP BY 1, 2, 3"
    )
    names = ["key", "flavor", "gpu_model", *USAGE_FIGURES, *foreign_keys]
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


def fast_usage_rows(
    cluster: Cluster, hour: datetime, end: datetime
) -> dict[str, list[dict[str, Any]]]:
    """Every scope's ``portable.usage_rows`` from one read of the usage of ``(hour, end]``.

    On an error the transaction (or savepoint) rolls back, and the temporary tables with it.
    """
    with local_settings(connection.alias, _PLANNER_SETTINGS, restore=True):
        mixed_lengths = _create_grains(cluster.pk, hour, end)
        found = {
            group.scope: _grain_rows(group, mixed_lengths) for group in usage_groups(cluster.name)
        }
    with connection.cursor() as cursor:
        # ON COMMIT DROP is too late when a caller's transaction rolls up a second hour.
        cursor.execute(f"DROP TABLE {_HOUR_TABLE}, {_NODE_WINDOWS}, {_ALLOCATED_WINDOWS}")
    return found


def copy_rollups(rows: list[dict[str, Any]]) -> None:
    """Write new rollup rows (HourlyRollup field values, defaults left out) with binary COPY."""
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
