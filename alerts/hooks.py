"""Evaluate the rules whenever the collector (or the simulator) has written windows."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from alerts.evaluate import evaluate_range
from ledger.signals import windows_collected

logger = logging.getLogger(__name__)


def on_windows_collected(
    sender: Any, *, cluster_id: int, start: datetime, end: datetime, live: bool, **kwargs: Any
) -> None:
    """Episodes of the windows just written; a failure is logged and never stops collection
    (the next window's evaluation, or ``manage.py evaluate_alerts``, catches up)."""
    try:
        evaluate_range(cluster_id, start, end, live=live)
    except Exception:
        logger.exception(
            "cluster %s: evaluating alerts for (%s, %s] failed",
            cluster_id,
            start.isoformat(),
            end.isoformat(),
        )


def connect() -> None:
    windows_collected.connect(on_windows_collected, dispatch_uid="alerts.evaluate")
