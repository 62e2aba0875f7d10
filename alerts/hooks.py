"""Queue the evaluation of the rules whenever the collector has written windows; keep room for
the open episodes' per-window updates after ``migrate``."""

from __future__ import annotations

import logging
from datetime import datetime
from functools import partial
from typing import Any

from django.apps import apps
from django.db import connections, transaction
from django.db.models.signals import post_migrate

from alerts.models import Episode
from alerts.tasks import request_evaluation
from ledger.signals import windows_collected

logger = logging.getLogger(__name__)


def on_windows_collected(
    sender: Any, *, cluster_id: int, start: datetime, end: datetime, live: bool, **kwargs: Any
) -> None:
    """Queue the windows for the evaluation task once the transaction that wrote them commits
    (at once outside one); nothing is queued if it rolls back. The collector holds its lease
    only while it writes: the evaluation runs in its own task (``alerts.tasks``)."""
    transaction.on_commit(
        partial(request_evaluation, cluster_id, start, end, live),
        robust=True,
    )


# Free space left in each page of the episode table on PostgreSQL: every collection window
# rewrites each open episode (its hours and evidence) without touching an indexed column, and a
# new row version that fits in its page is a HOT update, which skips the table's eleven indexes
# (bench/alerts.py: the update of 5,796 open episodes 1.0 s → 0.3 s under load). Django's
# migrations cannot express a table's storage parameters, so this runs after ``migrate``.
EPISODE_FILLFACTOR = 60


def keep_room_for_updates(sender: Any, *, using: str = "default", **kwargs: Any) -> None:
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    table = Episode._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [table])
        found = cursor.fetchone()
        wanted = f"fillfactor={EPISODE_FILLFACTOR}"
        if found is None or wanted in (found[0] or []):
            return
        cursor.execute(
            f"ALTER TABLE {connection.ops.quote_name(table)} SET (fillfactor = "
            f"{EPISODE_FILLFACTOR})"
        )
    logger.info("%s: fillfactor set to %d", table, EPISODE_FILLFACTOR)


def connect() -> None:
    windows_collected.connect(on_windows_collected, dispatch_uid="alerts.evaluate")
    post_migrate.connect(
        keep_room_for_updates,
        sender=apps.get_app_config("alerts"),
        dispatch_uid="alerts.fillfactor",
    )
