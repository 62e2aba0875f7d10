"""A deep backfill's hours in several processes, so every core decodes, bins and writes.

The hours are dealt round-robin to ``GPULEDGER_DEEP_BACKFILL_WORKERS`` forked processes; each
runs them as one process would (its own queries in flight, each hour written in its own
transaction, an hour another process or run already wrote skipped) and reports each hour it
wrote. A failure in one (a Prometheus error, an unusable answer) lets the others finish the hour
they are writing, then stops them and is raised here: every hour written is whole, and running
the backfill again resumes. Forked processes need committed data and a database other processes
can write: inside a transaction, on SQLite, without ``fork`` or in a daemonic process (a Celery
prefork child), the hours run in this process.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connection, connections

from fleet.prometheus import PrometheusError

if TYPE_CHECKING:
    from ledger.deep.backfill import DeepBackfill

logger = logging.getLogger(__name__)

# How often the parent looks for a worker that died without a word.
_POLL_SECONDS = 2.0


def usable(workers: int, hours: int) -> int:
    """The worker processes a run of ``hours`` hours can use (1: this process)."""
    if workers <= 1 or hours <= 1 or not hasattr(os, "fork"):
        return 1
    if multiprocessing.current_process().daemon:  # a daemonic process may not have children
        return 1
    if connection.vendor == "sqlite" or connection.in_atomic_block:
        return 1
    return min(workers, hours)


def run_forked(
    backfill: DeepBackfill,
    hours: list[datetime],
    workers: int,
    run_hours: Callable[..., None],
    on_hour: Callable[[datetime, int], None],
) -> None:
    """``run_hours(hours, on_hour, stop)`` of a round-robin share of ``hours`` in each of
    ``workers`` forked processes; ``on_hour(hour, skipped items)`` here for each hour written."""
    context = multiprocessing.get_context("fork")
    messages: Any = context.Queue()
    stop = context.Event()
    # Nothing open is shared with the children: each opens its own connections.
    connections.close_all()
    backfill.client.close()
    processes = [
        context.Process(
            target=_child,
            args=(run_hours, hours[number::workers], messages, stop),
            name=f"deep-backfill-{number}",
            daemon=True,
        )
        for number in range(workers)
    ]
    for process in processes:
        process.start()
    failure: BaseException | None = None
    running = len(processes)
    try:
        while running:
            try:
                kind, *details = messages.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if all(process.exitcode is not None for process in processes):
                    # Every worker ended; one ended without a word (killed).
                    failure = failure or RuntimeError("a deep backfill worker process died")
                    break
                continue
            if kind == "hour":
                on_hour(datetime.fromisoformat(details[0]), int(details[1]))
                continue
            running -= 1
            if kind == "error" and failure is None:
                failure = _error(*details)
                stop.set()
    finally:
        stop.set()
        for process in processes:
            process.join()
        messages.close()
    if failure is not None:
        raise failure


def _child(run_hours: Callable[..., None], hours: list[datetime], messages: Any, stop: Any) -> None:
    try:
        run_hours(
            hours,
            lambda hour, skipped: messages.put(("hour", hour.isoformat(), skipped)),
            stop.is_set,
        )
    except PrometheusError as exc:
        messages.put(("error", exc.message, exc.permanent, exc.status))
    except BaseException as exc:  # noqa: BLE001 (reported to the parent, raised there)
        logger.exception("Deep backfill worker failed")
        messages.put(("error", f"{type(exc).__name__}: {exc}", None, None))
    else:
        messages.put(("done",))
    finally:
        connections.close_all()
        messages.close()
        messages.join_thread()


def _error(message: str, permanent: bool | None, status: int | None) -> BaseException:
    if permanent is None:
        return RuntimeError(f"a deep backfill worker failed: {message}")
    return PrometheusError(message, permanent=permanent, status=status)
