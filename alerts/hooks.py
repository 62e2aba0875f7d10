"""Evaluate the rules whenever the collector (or the simulator) has written windows; keep
room for the open episodes' per-window updates after ``migrate``."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import connections
from django.db.models.signals import post_migrate

from alerts.evaluate import evaluate_range
from alerts.models import Episode
from ledger.models import UsageWindow
from ledger.signals import windows_collected

logger = logging.getLogger(__name__)


def on_windows_collected(
    sender: Any, *, cluster_id: int, start: datetime, end: datetime, live: bool, **kwargs: Any
) -> None:
    """Episodes of the windows just written, and of the stored windows after them
    (``_through``); a failure is logged and never stops collection (the next window's
    evaluation, or ``manage.py evaluate_alerts``, catches up)."""
    try:
        evaluate_range(cluster_id, start, _through(cluster_id, end), live=live)
    except Exception:
        logger.exception(
            "cluster %s: evaluating alerts for (%s, %s] failed",
            cluster_id,
            start.isoformat(),
            end.isoformat(),
        )


def _through(cluster_id: int, end: datetime) -> datetime:
    """Where the evaluation of windows written up to ``end`` has to go on to: the newest
    stored window.

    Windows written after others were evaluated (a re-collected hole, a backfill before live
    history) can open an episode that the already-evaluated windows after them would end: it
    must meet what those windows say (resolve where its condition no longer held, join the
    episode of its subject that covers them) and not be joined across them to a later one.
    Windows already evaluated are skipped per subject (``EpisodeBook``); at the live head there
    is no window after ``end`` and this is one index probe."""
    newest = (
        UsageWindow.objects.filter(cluster_id=cluster_id, window_end__gt=end)
        .order_by("-window_end")
        .values_list("window_end", flat=True)
        .first()
    )
    return end if newest is None else newest


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
