"""GPUs "now" for the pages: the ledger's newest windows and their figures (``ledger.now``).

Queue figures now (the newest ClusterQueue samples, GPU quotas, GPUs held by holding workloads,
the eviction pace) are ``quotas.now``'s, shared with the API.
"""

from __future__ import annotations

from ledger.now import (
    busy_now,
    busy_thresholds,
    figures_now,
    held_now,
    latest_usage,
    latest_windows,
)

__all__ = [
    "busy_now",
    "busy_thresholds",
    "figures_now",
    "held_now",
    "latest_usage",
    "latest_windows",
]
