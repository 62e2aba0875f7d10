"""The test database as a URL, for the child processes some tests start (a Celery worker, a
lease holder to kill) to connect to the data the test committed."""

from __future__ import annotations

from django.db import connection


def child_database_url() -> str:
    """``DATABASE_URL`` of the database this test runs on: the SQLite file, or PostgreSQL."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    user = settings["USER"] or "postgres"
    host = settings["HOST"] or "127.0.0.1"
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{host}:{settings['PORT'] or 5432}/{settings['NAME']}"
