"""Complete days of usage facts rewritten in (hour, holding) order, on PostgreSQL.

Facts are written a window at a time, so in a day's partition one holding's rows lie one per
heap block: a GPU's week is 10,080 blocks, a node's or an 8-GPU workload's 80,640, and the GPU,
node, workload and episode pages read every one of them (bench/RESULTS.md "pages that read
per-window rows"). Once a day is complete, ``order_day`` rewrites its partition ordered by hour,
then holding, then window: a holding's hour is then one or two blocks (a week of a GPU ~200),
and an hour's rows stay together, so the BRIN index on ``window_end`` still finds an hour in a
twenty-fourth of the day (rollup repairs, alert backfills).

Without a long lock: the day's rows are copied into a new table (``LOCK ... IN SHARE MODE``:
readers go on, a late writer of that day waits for the copy), given the partition's indexes and
a CHECK constraint on the day's bounds (so attaching it scans nothing), then swapped in with
``DETACH PARTITION`` / ``ATTACH PARTITION`` in the same transaction, which holds the parent's
lock only for the swap (``lock_timeout``: a swap that would queue behind a long reader gives up
and the day is ordered on the next run). The CHECK constraint, named ``<partition>_ordered``,
marks the day as done. Other databases have no partitions: nothing happens there.
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection, transaction
from django.db.utils import OperationalError

from ledger import partitions

logger = logging.getLogger(__name__)

# How long the swap may wait for the parent table's lock before it gives up for this run.
SWAP_LOCK_TIMEOUT = "5s"
# A day is ordered once it ended this long ago: its late windows and rollups are in.
SETTLE = timedelta(hours=3)


def ordered_days() -> set[date]:
    """The days whose partition has been rewritten in order (their ``_ordered`` constraint)."""
    if not partitions.partitioned():
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE contype = 'c' AND conname LIKE %s",
            [f"{partitions.PARENT}_p%_ordered"],
        )
        names = [row[0] for row in cursor.fetchall()]
    days = set()
    for name in names:
        stamp = name.removeprefix(f"{partitions.PARENT}_p").removesuffix("_ordered")
        days.add(datetime.strptime(stamp, "%Y%m%d").replace(tzinfo=UTC).date())
    return days


def order_day(day: date) -> bool:
    """Rewrite ``day``'s partition in (hour, holding, window) order; False when there is
    nothing to do (not PostgreSQL, no such partition, already ordered) or the swap's lock was
    not granted in time (the copy is rolled back; the next run tries again)."""
    if not partitions.partitioned() or day not in partitions.existing_days():
        return False
    if day in ordered_days():
        return False
    quote = connection.ops.quote_name
    name = partitions.partition_name(day)
    old, new, parent = quote(name), quote(f"{name}_new"), quote(partitions.PARENT)
    start = datetime.combine(day, time(), tzinfo=UTC)
    bounds = f"'{start.isoformat()}'::timestamptz"
    end = f"'{(start + timedelta(days=1)).isoformat()}'::timestamptz"
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {old} IN SHARE MODE")
            cursor.execute(
                f"CREATE TABLE {new} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            )
            cursor.execute(
                f"INSERT INTO {new} SELECT * FROM {old} "  # noqa: S608
                "ORDER BY date_trunc('hour', window_end), holding_id, window_end"
            )
            cursor.execute(
                f"ALTER TABLE {new} ADD CONSTRAINT {quote(name + '_ordered')} "
                f"CHECK (window_end >= {bounds} AND window_end < {end})"
            )
            # The parent's indexes (ledger.UsageFact.Meta.indexes, the window one BRIN): built
            # here, so the attach finds them and builds nothing under its lock.
            cursor.execute(f"CREATE INDEX ON {new} (holding_id)")
            cursor.execute(f"CREATE INDEX ON {new} USING brin (window_end)")
            cursor.execute(f"ANALYZE {new}")
            cursor.execute(f"SET LOCAL lock_timeout = '{SWAP_LOCK_TIMEOUT}'")
            cursor.execute(f"ALTER TABLE {parent} DETACH PARTITION {old}")
            cursor.execute(
                f"ALTER TABLE {parent} ATTACH PARTITION {new} FOR VALUES FROM ({bounds}) TO ({end})"
            )
            cursor.execute(f"DROP TABLE {old}")
            cursor.execute(f"ALTER TABLE {new} RENAME TO {old}")
    except OperationalError as exc:
        logger.warning("usage partition %s not reordered this time: %s", name, exc)
        return False
    logger.info("usage partition %s rewritten in (hour, holding) order", name)
    return True


def order_complete_days(now: datetime) -> list[date]:
    """Order every day that ended ``SETTLE`` before ``now`` and is not ordered yet, oldest
    first; returns the days ordered."""
    done = ordered_days()
    due = [
        day
        for day in partitions.existing_days()
        if day not in done
        and datetime.combine(day, time(), tzinfo=UTC) + timedelta(days=1) + SETTLE <= now
    ]
    return [day for day in due if order_day(day)]
