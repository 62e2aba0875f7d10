"""Signals the ledger sends; apps above it (alerts) connect to them, the ledger imports none.

``windows_collected`` is sent once a collection run, a backfill or the simulator has written
usage windows of one cluster, with ``cluster_id``, ``start`` and ``end`` (the windows ending in
``(start, end]``) and ``live`` (False for a backfill of history). It is sent after the windows
are committed; receivers run in the collector's process and must not raise.
"""

from django.dispatch import Signal

windows_collected = Signal()
