"""Named points where a test can make the process die, to prove a crash loses nothing.

``failpoint("rollup.insert")`` kills the process with SIGKILL (no ``finally``, no atexit, no
rollback but the database's own) when the environment variable ``GPULEDGER_FAILPOINT`` names that
point, and does nothing otherwise. ``GPULEDGER_FAILPOINT=collect.write:20`` dies at the 20th hit
of ``collect.write`` in this process, so a test can stop a backfill in the middle of an hour.

The variable is read on every call (one dictionary lookup when it is unset), so a test may set it
with ``monkeypatch.setenv`` in-process too. Production never sets it.
"""

from __future__ import annotations

import logging
import os
import signal
from collections import Counter

logger = logging.getLogger(__name__)

ENV = "GPULEDGER_FAILPOINT"

_hits: Counter[str] = Counter()


def _target(spec: str) -> tuple[str, int]:
    """``name`` or ``name:N`` → (name, N); N defaults to 1."""
    name, _, nth = spec.strip().partition(":")
    try:
        return name, max(1, int(nth)) if nth else 1
    except ValueError:
        return name, 1


def failpoint(name: str) -> None:
    """Die here with SIGKILL if ``GPULEDGER_FAILPOINT`` names this point (and its hit is due)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    target, nth = _target(spec)
    if target != name:
        return
    _hits[name] += 1
    if _hits[name] == nth:
        logger.critical("failpoint %s (hit %d): killing process %d", name, nth, os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)
