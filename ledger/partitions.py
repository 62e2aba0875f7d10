"""Daily partitions of the usage facts on PostgreSQL (``ledger.models.usage.UsageFact``).

``ledger_usagefact`` is range-partitioned on ``window_end``, one partition per UTC day named
``ledger_usagefact_pYYYYMMDD`` and holding the windows ending in ``[day, day + 1)``. Plain
declarative partitioning: the table and its indexes come from the models (the migration only adds
``PARTITION BY`` and makes the window index BRIN), partitions are created here. The beat task
``create_usage_partitions`` keeps ``USAGE_PARTITIONS_AHEAD`` days ready and the writer creates
a window's day itself when it is missing, so a window never fails for want of one. Retention
drops whole days (``drop_partitions_before``): no DELETE, nothing left for VACUUM.

Why plain declarative partitioning: it needs no new dependency and no server extension, the
table and its indexes still come from the models and generated migrations, and the whole of it
is one range key and a partition a day. django-postgres-extra would bring its own database
backend and its own makemigrations command, pg_partman a PostgreSQL extension to install on
every server (and its background worker or a cron for maintenance), both for this one table.

Other databases keep one plain table; every function here does nothing there.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection, transaction
from django.db.utils import DatabaseError

logger = logging.getLogger(__name__)

PARENT = "ledger_usagefact"
_NAME = re.compile(rf"^{PARENT}_p(\d{{8}})$")
# Days of partitions the beat task creates ahead of today (a window never waits for DDL).
USAGE_PARTITIONS_AHEAD = 3


def partitioned() -> bool:
    return connection.vendor == "postgresql"


def partition_name(day: date) -> str:
    return f"{PARENT}_p{day:%Y%m%d}"


def day_of(moment: datetime) -> date:
    """The partition a window ending at ``moment`` goes to (a window ends in its day)."""
    return moment.astimezone(UTC).date()


def existing_days() -> list[date]:
    """The days that have a partition, oldest first."""
    if not partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s",
            [PARENT],
        )
        names = [row[0] for row in cursor.fetchall()]
    days = []
    for name in names:
        match = _NAME.match(name)
        if match is None:
            logger.warning("partition %s of %s is not a day: left alone", name, PARENT)
            continue
        days.append(datetime.strptime(match.group(1), "%Y%m%d").replace(tzinfo=UTC).date())
    return sorted(days)


def ensure_days(days: list[date]) -> list[date]:
    """Create the partitions of ``days`` that are missing; returns the days created.

    The catalog is asked every time (one small query per window): a process-wide memory of
    days seen would outlive a partition another worker's retention dropped, or a creation its
    own transaction rolled back, and the window's COPY would then find no partition."""
    if not partitioned():
        return []
    present = set(existing_days())
    return [day for day in sorted(set(days)) if day not in present and _create(day)]


def ensure_for(moments: list[datetime]) -> list[date]:
    """Make sure the partitions of windows ending at ``moments`` exist (the writer's check)."""
    return ensure_days([day_of(moment) for moment in moments])


def ensure_ahead(today: date, ahead: int = USAGE_PARTITIONS_AHEAD) -> list[date]:
    """Partitions from ``today`` to ``ahead`` days later (the beat task)."""
    return ensure_days([today + timedelta(days=offset) for offset in range(ahead + 1)])


def _create(day: date) -> bool:
    start = datetime.combine(day, time(), tzinfo=UTC)
    end = start + timedelta(days=1)
    name = connection.ops.quote_name(partition_name(day))
    try:
        # A savepoint: another writer creating the same day at the same moment makes this fail,
        # which must not abort the caller's transaction.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {PARENT} "
                "FOR VALUES FROM (%s) TO (%s)",
                [start, end],
            )
    except DatabaseError as exc:
        if day in existing_days():
            return False
        raise DatabaseError(f"cannot create usage partition for {day}: {exc}") from exc
    logger.info("created usage partition %s", partition_name(day))
    return True


def drop_days_before(before: datetime) -> list[date]:
    """Drop the partitions whose every window ends before ``before``; returns their days."""
    if not partitioned():
        return []
    dropped = []
    for day in existing_days():
        if datetime.combine(day + timedelta(days=1), time(), tzinfo=UTC) > before:
            continue
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {connection.ops.quote_name(partition_name(day))}")
        dropped.append(day)
        logger.info("dropped usage partition %s", partition_name(day))
    return dropped
