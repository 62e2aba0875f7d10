"""The WATCH of one sync: one thread per kind doing HTTP only, while the calling thread applies
the events in batches to the sync's in-memory lists, writes what changed and samples each window.

``410 Gone`` relists that kind and turns the difference into events. The watch ends on time
whatever the server does: every stream (and every call the main thread makes meanwhile) is cut
``WATCH_END_GRACE_SECONDS`` after the watch's end, and a kind whose stream had to be cut is
recorded as an error and is no longer complete (its deletions wait for the next LIST).
"""

from __future__ import annotations

import gc
import logging
import math
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from core.deadlines import Deadline
from quotas.constants import (
    EVENT_BATCH_MAX,
    EVENT_BATCH_SECONDS,
    WATCH_END_GRACE_SECONDS,
    WATCH_RETRY_MAX_SECONDS,
    WATCH_RETRY_SECONDS,
)
from quotas.kueue import KubeError, KubeTimeout, ResourceExpired
from quotas.sync.objects import KIND_NAMES, Changes
from quotas.sync.samples import sample_window, seconds_to_next_window

if TYPE_CHECKING:
    from quotas.sync.cluster import ClusterSync

logger = logging.getLogger(__name__)


def watch_events(
    sync: ClusterSync, seconds: float, *, stop_after_events: int | None = None
) -> None:
    """Apply WATCH events of every complete kind for ``seconds``, writing in batches.

    ``stop_after_events`` ends the watch early, once that many object events are written.
    """
    deadline = time.monotonic() + seconds
    # Streams end by the watch's end on their own (timeoutSeconds); past this they are cut.
    sync.deadline = Deadline(
        seconds + WATCH_END_GRACE_SECONDS,
        "the watch deadline",
        f"the watch's {seconds:g} s and {WATCH_END_GRACE_SECONDS:g} s for its streams to end",
    )
    # Threads still running past this are abandoned (they are daemons, and their streams cut).
    hard_end = deadline + WATCH_END_GRACE_SECONDS + 1.0
    applied_before = sync.events_applied
    events: queue.Queue[tuple[str, str, Any]] = queue.Queue()
    stop = threading.Event()
    running: dict[str, threading.Thread] = {}

    def start(kind: str) -> None:
        thread = threading.Thread(
            target=_watch_kind,
            args=(sync, kind, sync.versions[kind], deadline, events, stop),
            name=f"watch-{sync.cluster.name}-{kind}",
            daemon=True,
        )
        running[kind] = thread
        thread.start()

    for kind in KIND_NAMES:
        if kind in sync.complete:
            start(kind)
    changes = Changes()
    # The listed objects (about 1 GB at 50,000 workloads) stay alive through the watch: keep
    # full collections from walking them, which took over a second inside a timed write.
    # Frozen objects are still freed by reference counting; unfreeze hands them back after.
    gc.freeze()
    try:
        while running:
            now = time.monotonic()
            if now >= hard_end:
                for kind in sorted(running):
                    sync.complete.discard(kind)
                    sync.errors.append(f"{kind} watch: still running after {sync.deadline}")
                running.clear()
                break
            wait = min(deadline - now + 1.0, hard_end - now)
            if changes.since is not None:
                wait = min(wait, changes.since + EVENT_BATCH_SECONDS - now)
            wait = min(wait, seconds_to_next_window(sync))
            try:
                kind, what, payload = events.get(timeout=max(0.01, wait))
            except queue.Empty:
                kind, what, payload = "", "tick", None
            if what == "event":
                sync.apply_event(kind, payload, changes)
            elif what == "relist":
                sync.relist_kind(kind, changes)
                if kind in sync.complete and time.monotonic() < deadline - 0.1:
                    start(kind)
                else:
                    running.pop(kind, None)
            elif what == "failed":
                sync.complete.discard(kind)
                sync.errors.append(f"{kind} watch: {payload}")
                running.pop(kind, None)
            elif what == "done":
                running.pop(kind, None)
            enough = (
                stop_after_events is not None
                and sync.events_applied - applied_before >= stop_after_events
            )
            due = changes.since is not None and (
                time.monotonic() - changes.since >= EVENT_BATCH_SECONDS
                or changes.count >= EVENT_BATCH_MAX
            )
            if changes and (due or enough or not running):
                sync.flush(changes)
                changes = Changes()
            if enough:
                break
            if seconds_to_next_window(sync) <= 0:
                if changes:
                    sync.flush(changes)
                    changes = Changes()
                sample_window(sync)
        if changes:
            sync.flush(changes)
    finally:
        stop.set()
        gc.unfreeze()


def _watch_kind(
    sync: ClusterSync,
    kind: str,
    version: str,
    deadline: float,
    events: queue.Queue[tuple[str, str, Any]],
    stop: threading.Event,
) -> None:
    """Runs in a thread: HTTP only, everything goes to ``events`` (never the database)."""
    retry = WATCH_RETRY_SECONDS
    try:
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining < 0.1:
                break
            try:
                for event in sync.client.watch(
                    kind, version, math.ceil(remaining), stop=stop, deadline=sync.deadline
                ):
                    version = event.resource_version or version
                    events.put((kind, "event", event))
                    retry = WATCH_RETRY_SECONDS
            except KubeTimeout as exc:
                # The stream did not end with the watch: the server (or a proxy) holds it open.
                logger.warning("cluster %s: %s", sync.cluster.name, exc)
                events.put((kind, "failed", exc.message))
                return
            except ResourceExpired as exc:
                logger.info("cluster %s: %s; relisting", sync.cluster.name, exc.message)
                events.put((kind, "relist", None))
                return
            except KubeError as exc:
                if exc.permanent:
                    logger.warning("cluster %s: %s", sync.cluster.name, exc)
                    events.put((kind, "failed", exc.message))
                    return
                logger.info("cluster %s: %s; watching again", sync.cluster.name, exc)
                stop.wait(min(retry, max(0.0, deadline - time.monotonic())))
                retry = min(retry * 2, WATCH_RETRY_MAX_SECONDS)
    except Exception as exc:  # noqa: BLE001 - the main thread must hear about any failure
        logger.exception("cluster %s: watch of %s crashed", sync.cluster.name, kind)
        events.put((kind, "failed", repr(exc)))
        return
    events.put((kind, "done", version))
