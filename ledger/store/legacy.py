"""Moving usage rows of the wide table (before migration ``ledger.0006``) into holdings and facts.

Migration 0006 renames the wide table to ``ledger_gpuusage_legacy``. Its rows are moved a batch
of whole windows at a time, each batch in its own transaction that writes the holdings, facts
and windows and deletes the rows it moved: a move that stops (killed, a deploy) resumes where it
was, and never holds a long transaction. Migration 0007 moves installs of up to
``MIGRATION_ROW_LIMIT`` rows (minutes); bigger ones run ``manage.py move_usage``, which shows its
progress. A window the collector already wrote again in the new layout keeps that copy.

Rollups read the new layout only, so while rows remain ``pending_between`` says which hours must
not be rolled up again yet (their figures would miss the unmoved rows).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from core.bulk import sql_moment
from ledger.models.usage import (
    FACT_COUNTS,
    FACT_FIGURES,
    HOLDING_COLUMNS,
    UsageWindow,
    write_wide_rows,
)

logger = logging.getLogger(__name__)

LEGACY_TABLE = "ledger_gpuusage_legacy"
# Rows per batch (one transaction). Measured on PostgreSQL 15 here: 50,000 rows moved in about
# 2 s, short enough for a collector writing the next window to wait behind it.
BATCH_ROWS = 50_000
# Migration 0007 moves everything when the table holds at most this many rows (a day of a
# 1,000-GPU fleet: a few minutes); bigger installs run ``manage.py move_usage``.
MIGRATION_ROW_LIMIT = 1_500_000

# The wide table's columns read: the holding's but its window length, which is worked out.
_HELD = HOLDING_COLUMNS[:-1]
_COLUMNS = ("window_start", "window_end", *_HELD, *FACT_FIGURES, *FACT_COUNTS)
if HOLDING_COLUMNS[-1] != "window_seconds":
    raise ImportError("HOLDING_COLUMNS must end with window_seconds")
_absent = False


@dataclass
class Batch:
    cluster_id: int
    first: datetime
    last: datetime
    windows: int
    rows: int


def exists() -> bool:
    """Whether the wide table is there (from migration 0006 on; left empty once moved, so that
    migrating back can move the rows into it again)."""
    global _absent
    if _absent:
        return False
    # One table looked up, not the whole catalog (which holds a partition per day on PostgreSQL).
    if connection.vendor == "postgresql":
        sql, params = "SELECT to_regclass(%s) IS NOT NULL", [LEGACY_TABLE]
    else:
        sql, params = (
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = %s",
            [LEGACY_TABLE],
        )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        present = bool(cursor.fetchone()[0])
    _absent = not present
    return present


def forget() -> None:
    """Look for the wide table again (a migration may have brought it back)."""
    global _absent
    _absent = False


def remaining() -> int:
    if not exists():
        return 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {LEGACY_TABLE}")  # noqa: S608 - a constant
        return int(cursor.fetchone()[0])


def pending_between(cluster_id: int, start: datetime, end: datetime) -> bool:
    """Whether rows of the cluster's windows ending in ``(start, end]`` are still to move."""
    if not exists():
        return False
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {LEGACY_TABLE} WHERE cluster_id = %s "  # noqa: S608 - a constant
            "AND window_end > %s AND window_end <= %s LIMIT 1",
            [cluster_id, adapt(start), adapt(end)],
        )
        return cursor.fetchone() is not None


def move_batches(batch_rows: int = BATCH_ROWS) -> Iterator[Batch]:
    """Move the rows, oldest window of the lowest cluster id first, a batch per transaction."""
    if batch_rows < 1:
        raise ValueError("batch_rows must be at least 1")
    while exists():
        with transaction.atomic():
            batch = _move_one(batch_rows)
        if batch is None:
            return
        yield batch


def _move_one(batch_rows: int) -> Batch | None:
    table = LEGACY_TABLE
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT cluster_id, window_end FROM {table} "  # noqa: S608 - a constant
            "ORDER BY cluster_id, window_end LIMIT 1"
        )
        head = cursor.fetchone()
        if head is None:
            return None
        cluster_id, first = head[0], head[1]
        wide = ", ".join(_COLUMNS)
        cursor.execute(
            f"SELECT {wide} FROM {table} WHERE cluster_id = %s AND window_end >= %s "  # noqa: S608
            "ORDER BY window_end LIMIT %s",
            [cluster_id, first, batch_rows + 1],
        )
        rows = cursor.fetchall()
    by_end: dict[datetime, list[tuple]] = {}
    for row in rows:
        by_end.setdefault(sql_moment(row[1]), []).append(row)
    ends = sorted(by_end)
    if len(rows) > batch_rows and len(ends) > 1:
        # The limit cut the newest window: it goes whole into the next batch.
        ends.pop()
    elif len(rows) > batch_rows:
        # One window bigger than a batch: read it whole.
        by_end[ends[0]] = _window_rows(cluster_id, first, wide)
    stored = set(
        UsageWindow.objects.filter(
            cluster_id=cluster_id, window_end__gte=ends[0], window_end__lte=ends[-1]
        ).values_list("window_end", flat=True)
    )
    moved = 0
    held = slice(2, 2 + len(_HELD))
    figures = slice(2 + len(_HELD), len(_COLUMNS))
    for end in ends:
        if end in stored:
            continue
        window_rows = by_end[end]
        start = sql_moment(window_rows[0][0])
        identities = [
            (*row[held], (end - sql_moment(row[0])).total_seconds()) for row in window_rows
        ]
        write_wide_rows(cluster_id, start, end, identities, [row[figures] for row in window_rows])
        moved += len(window_rows)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE cluster_id = %s "  # noqa: S608 - a constant
            "AND window_end >= %s AND window_end <= %s",
            [cluster_id, first, connection.ops.adapt_datetimefield_value(ends[-1])],
        )
    return Batch(cluster_id, sql_moment(first), ends[-1], len(ends), moved)


def _window_rows(cluster_id: int, end: Any, wide: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {wide} FROM {LEGACY_TABLE} WHERE cluster_id = %s AND window_end = %s",  # noqa: S608
            [cluster_id, end],
        )
        return cursor.fetchall()


def move_back() -> int:
    """Copy every row of the view back into the wide table and delete the facts (to undo
    migration 0007 on an install small enough to have been moved by it)."""
    columns = (
        "cluster_id, window_start, window_end, gpu_id, gpu_key, namespace, pod, container, "
        "node_name, flavor, gpu_model, workload_id, local_queue_id, cluster_queue_id, team_id, "
        "allocated, gpus, capacity_gpus, shared, sm_active, pipe_tensor_active, dram_active, "
        "gr_engine_active, gpu_util, fb_used_mib, activity, activity_source, samples, "
        "expected_samples, created_at"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {LEGACY_TABLE} ({columns}) SELECT {columns} FROM fleet_gpuusage"  # noqa: S608
        )
        moved = cursor.rowcount
        for table in ("ledger_usagefact", "ledger_usagewindow", "ledger_usageholding"):
            cursor.execute(f"DELETE FROM {table}")  # noqa: S608 - constants
    return moved
