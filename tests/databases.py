"""The test database as a URL, for the child processes some tests start (a Celery worker, a
lease holder to kill) to connect to the data the test committed, and data built once for all
the tests of a module."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction


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
