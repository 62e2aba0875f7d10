"""``Watch``: the WATCH of one sync: one thread per kind doing HTTP only, while the calling
thread applies the events in batches to the in-memory lists, writes what changed and samples
each window.

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
from collections.abc import Callable
from typing import Any

from core.deadlines import Deadline
from quotas.constants import (
    EVENT_BATCH_MAX,
    EVENT_BATCH_SECONDS,
    WATCH_END_GRACE_SECONDS,
    WATCH_RETRY_MAX_SECONDS,
    WATCH_RETRY_SECONDS,
)
from quotas.kueue import KubeError, KubeTimeout, KueueClient, ResourceExpired, WatchEvent
from quotas.sync.listing import Lister
from quotas.sync.objects import KIND_NAMES, Changes, ObjectLists, object_key, object_uid
from quotas.sync.samples import Sampler
from quotas.sync.tally import RELISTED_AFTER_GONE, Tally

logger = logging.getLogger(__name__)

# What a WATCH thread tells the main thread: (kind, "event" | "relist" | "failed" | "done", data).
Message = tuple[str, str, Any]


class Watch:
    """One WATCH of every complete kind in ``lists``, for ``seconds``.

    ``lister`` relists a kind after ``410 Gone``, ``flush`` writes a batch of changes and
    ``sampler`` samples each window the watch passes; errors and counts go to ``tally``.
    """

    def __init__(
        self,
        cluster_name: str,
        client: KueueClient,
        lists: ObjectLists,
        tally: Tally,
        *,
        lister: Lister,
        sampler: Sampler,
        flush: Callable[[Changes], None],
        seconds: float,
    ) -> None:
        self.cluster_name = cluster_name
        self.client = client
        self.lists = lists
        self.tally = tally
        self.lister = lister
        self.sampler = sampler
        self.flush = flush
        # Streams end by the watch's end on their own (timeoutSeconds); past this they are cut,
        # and so is every call the main thread makes meanwhile.
        self.deadline = Deadline(
            seconds + WATCH_END_GRACE_SECONDS,
            "the watch deadline",
            f"the watch's {seconds:g} s and {WATCH_END_GRACE_SECONDS:g} s for its streams to end",
        )
        # The watch's end, on the monotonic clock: streams are asked to end by it.
        self.end = time.monotonic() + seconds
        self.events: queue.Queue[Message] = queue.Queue()
        self.stop = threading.Event()
        self.running: dict[str, threading.Thread] = {}

    def run(self, *, stop_after_events: int | None = None) -> None:
        """Apply the events, writing in batches, until every stream ended or the watch is over.

        ``stop_after_events`` ends the watch early, once that many object events are written.
        """
        for kind in KIND_NAMES:
            if kind in self.lists.complete:
                self._start(kind)
        # The listed objects (about 1 GB at 50,000 workloads) stay alive through the watch: keep
        # full collections from walking them, which took over a second inside a timed write.
        # Frozen objects are still freed by reference counting; unfreeze hands them back after.
        gc.freeze()
        try:
            self._loop(stop_after_events)
        finally:
            self.stop.set()
            gc.unfreeze()

    def _start(self, kind: str) -> None:
        thread = threading.Thread(
            target=self._watch_kind,
            args=(kind, self.lists.versions[kind]),
            name=f"watch-{self.cluster_name}-{kind}",
            daemon=True,
        )
        self.running[kind] = thread
        thread.start()

    def _loop(self, stop_after_events: int | None) -> None:
        tally, running, sampler = self.tally, self.running, self.sampler
        # Threads still running past this are abandoned (they are daemons, and their streams cut).
        hard_end = self.end + WATCH_END_GRACE_SECONDS + 1.0
        applied_before = tally.events_applied
        changes = Changes()
        while running:
            now = time.monotonic()
            if now >= hard_end:
                for kind in sorted(running):
                    self.lists.complete.discard(kind)
                    tally.errors.append(f"{kind} watch: still running after {self.deadline}")
                running.clear()
                break
            wait = min(self.end - now + 1.0, hard_end - now)
            if changes.since is not None:
                wait = min(wait, changes.since + EVENT_BATCH_SECONDS - now)
            wait = min(wait, sampler.seconds_to_next_window())
            try:
                message = self.events.get(timeout=max(0.01, wait))
            except queue.Empty:
                message = ("", "tick", None)
            self._handle(message, changes)
            enough = (
                stop_after_events is not None
                and tally.events_applied - applied_before >= stop_after_events
            )
            due = changes.since is not None and (
                time.monotonic() - changes.since >= EVENT_BATCH_SECONDS
                or changes.count >= EVENT_BATCH_MAX
            )
            if changes and (due or enough or not running):
                self.flush(changes)
                changes = Changes()
            if enough:
                break
            if sampler.seconds_to_next_window() <= 0:
                if changes:
                    self.flush(changes)
                    changes = Changes()
                sampler.sample(self.deadline)
        if changes:
            self.flush(changes)

    def _handle(self, message: Message, changes: Changes) -> None:
        """Act on one message of a WATCH thread (a timeout's "tick" does nothing)."""
        kind, what, payload = message
        if what == "event":
            self.apply_event(kind, payload, changes)
        elif what == "relist":
            self.tally.notes[f"{kind}: {RELISTED_AFTER_GONE}"] += 1
            self.lister.relist_kind(kind, changes, self.deadline)
            if kind in self.lists.complete and time.monotonic() < self.end - 0.1:
                self._start(kind)
            else:
                self.running.pop(kind, None)
        elif what == "failed":
            self.lists.complete.discard(kind)
            self.tally.errors.append(f"{kind} watch: {payload}")
            self.running.pop(kind, None)
        elif what == "done":
            self.running.pop(kind, None)

    def apply_event(self, kind: str, event: WatchEvent, changes: Changes) -> None:
        """Apply one WATCH event to the in-memory lists and record what it changed."""
        lists = self.lists
        if event.type == "INVALID":
            # Another kind, or no identity: the client logged it; never read as a change.
            self.tally.skip(f"{kind}: watch event {event.problem}")
            return
        if event.resource_version:
            lists.versions[kind] = event.resource_version
        if event.type == "BOOKMARK":
            return
        key = object_key(kind, event.object)
        if key is None:
            # Nothing to key it by: ingest would skip it, and there is nothing to update.
            logger.warning(
                "cluster %s: %s %s event without a name skipped",
                self.cluster_name,
                event.type,
                kind,
            )
            self.tally.skip(f"{kind}: missing_name")
            return
        self.tally.events_applied += 1
        previous = lists.objects[kind].get(key)
        if kind == "Workload":
            lists.note_queues(changes, previous, event.object)
        if event.type == "DELETED":
            lists.objects[kind].pop(key, None)
            changes.deleted.add(kind)
            changes.gone[kind][key] = object_uid(event.object)
        else:
            lists.objects[kind][key] = event.object
        changes.add(kind, key)

    def _watch_kind(self, kind: str, version: str) -> None:
        """Runs in a thread: HTTP only, everything goes to ``events`` (never the database)."""
        events, stop = self.events, self.stop
        retry = WATCH_RETRY_SECONDS
        try:
            while not stop.is_set():
                remaining = self.end - time.monotonic()
                if remaining < 0.1:
                    break
                try:
                    for event in self.client.watch(
                        kind, version, math.ceil(remaining), stop=stop, deadline=self.deadline
                    ):
                        version = event.resource_version or version
                        events.put((kind, "event", event))
                        retry = WATCH_RETRY_SECONDS
                except KubeTimeout as exc:
                    # The stream did not end with the watch: the server (or a proxy) holds it open.
                    logger.warning("cluster %s: %s", self.cluster_name, exc)
                    events.put((kind, "failed", exc.message))
                    return
                except ResourceExpired as exc:
                    logger.info("cluster %s: %s; relisting", self.cluster_name, exc.message)
                    events.put((kind, "relist", None))
                    return
                except KubeError as exc:
                    if exc.permanent:
                        logger.warning("cluster %s: %s", self.cluster_name, exc)
                        events.put((kind, "failed", exc.message))
                        return
                    logger.info("cluster %s: %s; watching again", self.cluster_name, exc)
                    stop.wait(min(retry, max(0.0, self.end - time.monotonic())))
                    retry = min(retry * 2, WATCH_RETRY_MAX_SECONDS)
        except Exception as exc:  # noqa: BLE001 - the main thread must hear about any failure
            logger.exception("cluster %s: watch of %s crashed", self.cluster_name, kind)
            events.put((kind, "failed", repr(exc)))
            return
        events.put((kind, "done", version))
