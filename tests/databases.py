"""The test database as a URL, for the child processes some tests start (a Celery worker, a
lease holder to kill) to connect to the data the test committed, and data built once for all
the tests of a module."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import TransactionTestCase

DJANGO_FIXTURE_TEARDOWN = TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]


def child_database_url() -> str:
    """``DATABASE_URL`` of the database this test runs on: the SQLite file, or PostgreSQL."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    user = settings["USER"] or "postgres"
    host = settings["HOST"] or "127.0.0.1"
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{host}:{settings['PORT'] or 5432}/{settings['NAME']}"


@contextmanager
def kept_for_the_module(django_db_blocker: Any) -> Iterator[None]:
    """Rows written inside stay for a test module and are rolled back after its last test.

    pytest-django runs each test of the module in a savepoint inside this transaction, so every
    test sees the rows as they were built and its own writes are undone at its end. Tests that
    commit (``transactional_db``, a live server) cannot share such rows: they build their own."""
    with django_db_blocker.unblock(), transaction.atomic():
        yield
        transaction.set_rollback(True)


# Tables that ``post_migrate`` fills again after Django's flush: left as they are while they
# still hold exactly what it wrote.
REFILLED_AFTER_FLUSH = ("django_content_type", "auth_permission")
# SQLite refuses a compound SELECT of more than 500 parts.
_CHECKED_AT_ONCE = 400
_refilled_as_flushed: dict[str, tuple[tuple[Any, ...], ...]] = {}


def _refilled_fingerprint(connection: Any) -> tuple[tuple[Any, ...], ...]:
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        rows = []
        for table in REFILLED_AFTER_FLUSH:
            cursor.execute(f"SELECT COUNT(*), MIN(id), MAX(id), SUM(id) FROM {quote(table)}")
            rows.append(tuple(cursor.fetchone()))
    return tuple(rows)


def tables_with_rows(connection: Any) -> list[str]:
    """The Django tables (those ``flush`` empties) that hold at least one row, in one query per
    400 tables: an empty table costs an index-free look at its first page."""
    quote = connection.ops.quote_name
    tables = sorted(connection.introspection.django_table_names(only_existing=True))
    found: list[str] = []
    with connection.cursor() as cursor:
        for start in range(0, len(tables), _CHECKED_AT_ONCE):
            chunk = tables[start : start + _CHECKED_AT_ONCE]
            cursor.execute(
                " UNION ALL ".join(
                    f"SELECT %s WHERE EXISTS (SELECT 1 FROM {quote(table)})" for table in chunk
                ),
                chunk,
            )
            found.extend(row[0] for row in cursor.fetchall())
    return found


def empty_written_tables(using: str) -> bool:
    """Leave the database as Django's ``flush`` (then ``post_migrate``) leaves it, deleting rows
    only from the tables that have some; False when this cannot stand for the flush: the first
    time in a process (the flush itself sets the reference) or when a test changed the content
    types or permissions that ``post_migrate`` writes.

    ``flush`` truncates every table (PostgreSQL: 1.5-2 s after each transactional test, new files
    for some 200 tables) and writes the content types and permissions again; a test writes to a
    handful of tables. Django's foreign keys are deferred to the commit, so the order of the
    deletes does not matter; sequences are not reset (neither does ``flush`` here)."""
    connection = connections[using]
    reference = _refilled_as_flushed.get(using)
    if reference is None or _refilled_fingerprint(connection) != reference:
        return False
    quote = connection.ops.quote_name
    written = [t for t in tables_with_rows(connection) if t not in REFILLED_AFTER_FLUSH]
    if written:
        with transaction.atomic(using=using), connection.cursor() as cursor:
            for table in written:
                cursor.execute(f"DELETE FROM {quote(table)}")
    return True


def flushed(using: str) -> None:
    """Remember what ``post_migrate`` wrote after a real flush of ``using``."""
    _refilled_as_flushed[using] = _refilled_fingerprint(connections[using])


def flush_only_written_tables(test_case: Any) -> None:
    """``TransactionTestCase._fixture_teardown`` (the flush after each transactional or live
    server test) deleting only written rows when that leaves what the flush would."""
    if test_case.available_apps is not None or test_case.serialized_rollback:
        DJANGO_FIXTURE_TEARDOWN(test_case)
        return
    for using in test_case._databases_names(include_mirrors=False):
        if not empty_written_tables(using):
            call_command(
                "flush", verbosity=0, interactive=False, database=using, reset_sequences=False
            )
            flushed(using)
