"""What the Kueue store tells other apps after a write, without importing them.

``workloads_written`` is sent inside the write's transaction, once per batch, with
``sender`` = the Cluster, ``workload_ids`` (the Workloads written, marked deleted, or whose
pods were written), ``listed`` (True when the Workloads came from a complete LIST, False for
WATCH events) and ``evictions_total`` ((namespace, name) -> ``status.schedulingStats``
evictions). Receivers that write must do so after the commit (``transaction.on_commit``) and
never raise into the sync.
"""

from __future__ import annotations

from django.dispatch import Signal

workloads_written = Signal()
