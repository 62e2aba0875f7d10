"""One Kueue sync of one cluster: LIST everything, write it, then WATCH and write the changes.

The glue between the thin client (``quotas.kueue``), the pure row builder (``quotas.ingest``) and
the writer (``quotas.store``), in the shape DESIGN describes:

* **LIST** every kind with its resourceVersion; ``build_snapshot`` on the lists;
  ``write_snapshot`` with ``complete`` = the kinds whose LIST finished. A kind whose LIST failed
  (or is not served, like Cohort on older Kueue) is left out of ``complete``, so nothing of that
  kind is ever marked deleted because of it; the run is ``partial`` with the error, and the next
  sync recovers.
* **WATCH** (when ``watch_seconds > 0``) each listed kind from its resourceVersion, one thread per
  kind doing HTTP only; the calling thread applies the events in batches to the lists it keeps in
  memory and writes only what changed. ``410 Gone`` relists that kind and turns the difference
  into events. A DELETED event removes the object from the in-memory list, which is complete, so
  the object is marked deleted exactly as a complete LIST would: Workloads, Pods and Nodes by key
  (``quotas.store.mark_deleted``), the small kinds by the writer's pass over their lists.
* **Per collection window**, one ClusterQueue sample per queue and flavor at the aligned window
  end (``floor_time(now, GPULEDGER_COLLECT_SECONDS)``), so syncs every 30 s still leave exactly one
  sample per window, and pending positions from the visibility API when it is served.

Every run leaves an ``IngestRun`` (source ``kueue``). Two syncs of one cluster never overlap: a
sync claims the cluster's ``CollectionCursor`` with a conditional UPDATE (STYLE rule 11).
"""

from __future__ import annotations

import gc
import logging
import math
import queue
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.timewindows import floor_time
from fleet.choices import IngestSource, IngestStatus
from fleet.models import Cluster, CollectionCursor, IngestRun
from quotas.constants import LIST_KINDS, LOOKUP_BATCH_SIZE, WRITE_BATCH_SIZE
from quotas.ingest import KueueBatch, KueueSnapshot, build_queue_samples, build_snapshot
from quotas.kueue import KINDS, KubeError, KueueClient, ResourceExpired, WatchEvent
from quotas.models import Workload
from quotas.store import mark_deleted, write_queue_samples, write_snapshot

logger = logging.getLogger(__name__)

KIND_NAMES = tuple(kind.name for kind in KINDS)
NAMESPACED = frozenset(kind.name for kind in KINDS if kind.namespaced)
SNAPSHOT_FIELD = {kind: keyword for keyword, kind in LIST_KINDS.items()}
# Kinds with at most a few thousand objects: every incremental build reads all of them (the
# writer only writes the rows that changed). Workloads, Pods and Nodes are read selectively.
SMALL_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass")
# Watch events are written in batches: the first event of a batch waits at most this long, and a
# batch holds at most this many objects. One second keeps pages fresh while a burst of changes
# (a gang of 100 workloads admitted at once) becomes one write.
EVENT_BATCH_SECONDS = 1.0
EVENT_BATCH_MAX = 5000
# A watch that failed transiently is reopened after this long (doubling, capped).
WATCH_RETRY_SECONDS = 1.0
WATCH_RETRY_MAX_SECONDS = 8.0
# The claim on a cluster covers the watch plus this much for the LIST and the writes; a worker
# that died leaves a claim that expires on its own.
CLAIM_SLACK_SECONDS = 600
PENDING_STATES = ("pending", "evicted", "preempted", "requeued")

Key = tuple[str, str]


class SyncBusy(Exception):
    """Another sync of the same cluster holds the claim."""


@dataclass
class _Changes:
    """Keys touched by watch events since the last write, per kind."""

    keys: dict[str, set[Key]] = field(default_factory=lambda: defaultdict(set))
    # ClusterQueues whose borrowing order a changed Workload may have moved.
    queues: set[str] = field(default_factory=set)
    # Kinds with objects gone since the last write: only these need the deletion check.
    deleted: set[str] = field(default_factory=set)
    # Per kind, the objects gone since the last write: key -> the uid of the object that went.
    gone: dict[str, dict[Key, str]] = field(default_factory=lambda: defaultdict(dict))
    count: int = 0
    since: float | None = None

    def add(self, kind: str, key: Key) -> None:
        if self.since is None:
            self.since = time.monotonic()
        self.keys[kind].add(key)
        self.count += 1

    def __bool__(self) -> bool:
        return self.count > 0


def object_key(kind: str, obj: Any) -> Key | None:
    """(namespace, name) of an object; None when it has no readable identity."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    name = meta.get("name")
    namespace = meta.get("namespace") or ""
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        return None
    if kind in NAMESPACED and not namespace:
        return None
    return (namespace if kind in NAMESPACED else "", name)


def _store_key(kind: str, key: Key) -> tuple[str, ...]:
    # quotas.ingest identifies namespaced objects by (namespace, name), others by (name,).
    return key if kind in NAMESPACED else (key[1],)


class ClusterSync:
    """The in-memory state of one sync: the last full lists, their resourceVersions, counters."""

    def __init__(self, cluster: Cluster, client: KueueClient, run: IngestRun) -> None:
        self.cluster = cluster
        self.client = client
        self.run = run
        self.objects: dict[str, dict[Key, dict[str, Any]]] = {k: {} for k in KIND_NAMES}
        # Objects without a readable identity: ingest counts and skips them on every full build.
        self.unkeyed: dict[str, list[Any]] = {k: [] for k in KIND_NAMES}
        self.versions: dict[str, str] = {}
        # Kinds whose in-memory list is complete: listed in full and kept up to date by WATCH.
        self.complete: set[str] = set()
        self.unidentified: frozenset[str] = frozenset()
        # Keyed objects ingest skipped as malformed: left out of incremental builds (they would
        # be logged again on every write) until an event changes them.
        self.bad: dict[str, set[Key]] = {k: set() for k in KIND_NAMES}
        self.errors: list[str] = []
        self.failures: list[KubeError] = []
        self.skip_reasons: Counter[str] = Counter()
        self.notes: Counter[str] = Counter()
        self.records_read = 0
        self.rows_written = 0
        self.skipped = 0
        self.events_applied = 0
        self.borrowing: dict[Key, tuple[bool, float]] = {}
        self.sampled_until: datetime | None = None
        # Seconds spent per phase of the last relist (logged; the benchmark prints them).
        self.timings: dict[str, float] = {}
        self.first_window: datetime | None = None

    # --- LIST --------------------------------------------------------------------------------
    def list_kind(self, kind: str) -> tuple[list[dict[str, Any]], str] | None:
        """The full list of one kind, or None when it failed or is not served (recorded)."""
        for attempt in (1, 2):
            try:
                result = self.client.list_objects(kind)
            except ResourceExpired as exc:
                # The continue token expired mid-list: start that LIST over, once.
                if attempt == 1:
                    logger.info("cluster %s: %s; listing again", self.cluster.name, exc.message)
                    continue
                self.errors.append(f"{kind}: {exc.message}")
                self.failures.append(exc)
                return None
            except KubeError as exc:
                if exc.status == 404:
                    # Cohorts (and the whole group) are absent on older Kueue: not an error.
                    logger.info("cluster %s: %s is not served", self.cluster.name, kind)
                    self.notes[f"{kind}: not served"] = 1
                    return None
                logger.warning("cluster %s: LIST %s failed: %s", self.cluster.name, kind, exc)
                self.errors.append(f"{kind}: {exc.message}")
                self.failures.append(exc)
                return None
            return result.items, result.resource_version
        return None

    def relist(self) -> KueueBatch:
        """LIST every kind, write the snapshot, sample the window; KubeError if nothing listed."""
        started = time.perf_counter()
        self.client.discover(refresh=True)
        for kind in KIND_NAMES:
            listed = self.list_kind(kind)
            if listed is None:
                self.complete.discard(kind)
                continue
            items, version = listed
            self._replace(kind, items)
            self.versions[kind] = version
            self.complete.add(kind)
        if not self.complete:
            # Retrying helps only when some failure was transient.
            permanent = all(exc.permanent for exc in self.failures)
            statuses = {exc.status for exc in self.failures}
            raise KubeError(
                "every LIST failed: " + "; ".join(self.errors or ["nothing served"]),
                statuses.pop() if len(statuses) == 1 else None,
                permanent,
            )
        listed_at = time.perf_counter()
        batch = build_snapshot(self._snapshot(KIND_NAMES), settings.GPULEDGER_TEAM_LABELS)
        built_at = time.perf_counter()
        self.unidentified = frozenset(batch.unidentified)
        parsed = _parsed_keys(batch)
        for kind in SMALL_KINDS + ("Workload",):
            self.bad[kind] = set(self.objects[kind]) - parsed[kind]
        self._count_build(batch)
        self._remember_borrowing(batch.workloads)
        result = write_snapshot(self.cluster, batch, frozenset(self.complete))
        written_at = time.perf_counter()
        self.rows_written += result.rows_written
        self._sample(batch, force=True)
        self.timings = {
            "list": listed_at - started,
            "build": built_at - listed_at,
            "write": written_at - built_at,
            "samples": time.perf_counter() - written_at,
        }
        logger.info(
            "cluster %s: relisted %d objects in %.1f s, built rows in %.1f s, wrote %d rows "
            "in %.1f s, sampled in %.1f s",
            self.cluster.name,
            batch.stats.records_read,
            self.timings["list"],
            self.timings["build"],
            result.rows_written,
            self.timings["write"],
            self.timings["samples"],
        )
        return batch

    def _replace(self, kind: str, items: list[dict[str, Any]]) -> None:
        objects: dict[Key, dict[str, Any]] = {}
        unkeyed: list[Any] = []
        for item in items:
            key = object_key(kind, item)
            if key is None or key in objects:
                unkeyed.append(item)  # ingest logs, counts and skips it
            else:
                objects[key] = item
        self.objects[kind] = objects
        self.unkeyed[kind] = unkeyed

    def _snapshot(
        self,
        kinds: Iterable[str],
        select: dict[str, list[dict[str, Any]]] | None = None,
    ) -> KueueSnapshot:
        lists: dict[str, list[Any]] = {}
        for kind in kinds:
            if select is not None and kind in select:
                lists[SNAPSHOT_FIELD[kind]] = select[kind]
            else:
                lists[SNAPSHOT_FIELD[kind]] = [*self.objects[kind].values(), *self.unkeyed[kind]]
        return KueueSnapshot(observed_at=timezone.now(), complete=frozenset(self.complete), **lists)

    def _count_build(self, batch: KueueBatch) -> None:
        self.records_read += batch.stats.records_read
        self.skipped += batch.stats.skipped
        self.skip_reasons.update(batch.stats.skip_reasons)

    def _remember_borrowing(self, workloads: Iterable[Any]) -> None:
        for row in workloads:
            self.borrowing[row.key] = (row.borrowing, row.borrowed_gpus)

    # --- samples and pending positions -------------------------------------------------------
    def _sample(self, batch: KueueBatch | None = None, *, force: bool = False) -> None:
        """The window's ClusterQueue samples and pending positions, once per aligned window."""
        seconds = settings.GPULEDGER_COLLECT_SECONDS
        window_end = floor_time(timezone.now(), seconds)
        if not force and self.sampled_until is not None and window_end <= self.sampled_until:
            return
        if "ClusterQueue" not in self.complete:
            return
        if batch is None:
            # Samples need every workload (pending demand) but no pods or nodes.
            kinds = (*SMALL_KINDS, "Workload")
            batch = build_snapshot(self._snapshot(kinds), settings.GPULEDGER_TEAM_LABELS)
        rows = build_queue_samples(batch)
        self.rows_written += write_queue_samples(self.cluster, rows, window_end, seconds)
        self.sampled_until = window_end
        self.first_window = self.first_window or window_end
        self._pending_positions()

    def _pending_positions(self) -> None:
        if self.client.discover().visibility_version is None:
            self.notes["visibility API: not served"] = 1
            return
        positions: dict[Key, int] = {}
        for key, cq in self.objects["ClusterQueue"].items():
            status = cq.get("status")
            if not isinstance(status, dict) or not status.get("pendingWorkloads"):
                continue
            try:
                items = self.client.pending_workloads(key[1])
            except KubeError as exc:
                logger.warning(
                    "cluster %s: pending workloads of %s: %s", self.cluster.name, key[1], exc
                )
                self.errors.append(f"visibility {key[1]}: {exc.message}")
                if exc.permanent:
                    return
                continue
            for index, item in enumerate(items):
                meta = item.get("metadata") if isinstance(item, dict) else None
                if not isinstance(meta, dict) or not meta.get("name"):
                    continue
                position = item.get("positionInClusterQueue")
                if not isinstance(position, int) or position < 0:
                    position = index
                positions[(str(meta.get("namespace") or ""), str(meta["name"]))] = position
        self.rows_written += write_pending_positions(self.cluster, positions)

    # --- WATCH -------------------------------------------------------------------------------
    def watch(self, seconds: float, *, stop_after_events: int | None = None) -> None:
        """Apply WATCH events of every complete kind for ``seconds``, writing in batches.

        ``stop_after_events`` ends the watch early, once that many object events are written.
        """
        deadline = time.monotonic() + seconds
        applied_before = self.events_applied
        events: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        stop = threading.Event()
        running: dict[str, threading.Thread] = {}

        def start(kind: str) -> None:
            thread = threading.Thread(
                target=self._watch_kind,
                args=(kind, self.versions[kind], deadline, events, stop),
                name=f"watch-{self.cluster.name}-{kind}",
                daemon=True,
            )
            running[kind] = thread
            thread.start()

        for kind in KIND_NAMES:
            if kind in self.complete:
                start(kind)
        changes = _Changes()
        # The listed objects (about 1 GB at 50,000 workloads) stay alive through the watch: keep
        # full collections from walking them, which took over a second inside a timed write.
        # Frozen objects are still freed by reference counting; unfreeze hands them back after.
        gc.freeze()
        try:
            while running:
                now = time.monotonic()
                wait = deadline - now + 1.0
                if changes.since is not None:
                    wait = min(wait, changes.since + EVENT_BATCH_SECONDS - now)
                wait = min(wait, self._seconds_to_next_window())
                try:
                    kind, what, payload = events.get(timeout=max(0.01, wait))
                except queue.Empty:
                    kind, what, payload = "", "tick", None
                if what == "event":
                    self._apply(kind, payload, changes)
                elif what == "relist":
                    self._relist_kind(kind, changes)
                    if kind in self.complete and time.monotonic() < deadline - 0.1:
                        start(kind)
                    else:
                        running.pop(kind, None)
                elif what == "failed":
                    self.complete.discard(kind)
                    self.errors.append(f"{kind} watch: {payload}")
                    running.pop(kind, None)
                elif what == "done":
                    running.pop(kind, None)
                enough = (
                    stop_after_events is not None
                    and self.events_applied - applied_before >= stop_after_events
                )
                due = changes.since is not None and (
                    time.monotonic() - changes.since >= EVENT_BATCH_SECONDS
                    or changes.count >= EVENT_BATCH_MAX
                )
                if changes and (due or enough or not running):
                    self.flush(changes)
                    changes = _Changes()
                if enough:
                    break
                if self._seconds_to_next_window() <= 0:
                    if changes:
                        self.flush(changes)
                        changes = _Changes()
                    self._sample()
            if changes:
                self.flush(changes)
        finally:
            stop.set()
            gc.unfreeze()

    def _seconds_to_next_window(self) -> float:
        seconds = settings.GPULEDGER_COLLECT_SECONDS
        if self.sampled_until is None:
            return float(seconds)
        next_end = self.sampled_until + timedelta(seconds=seconds)
        return (next_end - timezone.now()).total_seconds()

    def _watch_kind(
        self,
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
                    for event in self.client.watch(kind, version, math.ceil(remaining), stop=stop):
                        version = event.resource_version or version
                        events.put((kind, "event", event))
                        retry = WATCH_RETRY_SECONDS
                except ResourceExpired as exc:
                    logger.info("cluster %s: %s; relisting", self.cluster.name, exc.message)
                    events.put((kind, "relist", None))
                    return
                except KubeError as exc:
                    if exc.permanent:
                        logger.warning("cluster %s: %s", self.cluster.name, exc)
                        events.put((kind, "failed", exc.message))
                        return
                    logger.info("cluster %s: %s; watching again", self.cluster.name, exc)
                    stop.wait(min(retry, max(0.0, deadline - time.monotonic())))
                    retry = min(retry * 2, WATCH_RETRY_MAX_SECONDS)
        except Exception as exc:  # noqa: BLE001 - the main thread must hear about any failure
            logger.exception("cluster %s: watch of %s crashed", self.cluster.name, kind)
            events.put((kind, "failed", repr(exc)))
            return
        events.put((kind, "done", version))

    def _apply(self, kind: str, event: WatchEvent, changes: _Changes) -> None:
        if event.resource_version:
            self.versions[kind] = event.resource_version
        if event.type == "BOOKMARK":
            return
        key = object_key(kind, event.object)
        if key is None:
            # Nothing to key it by: ingest would skip it, and there is nothing to update.
            logger.warning(
                "cluster %s: %s %s event without a name skipped",
                self.cluster.name,
                event.type,
                kind,
            )
            self.skipped += 1
            self.skip_reasons[f"{kind}: missing_name"] += 1
            return
        self.events_applied += 1
        previous = self.objects[kind].get(key)
        if kind == "Workload":
            for obj in (previous, event.object):
                if obj is not None:
                    queue_name = self._workload_queue(obj)
                    if queue_name:
                        changes.queues.add(queue_name)
        if event.type == "DELETED":
            self.objects[kind].pop(key, None)
            changes.deleted.add(kind)
            changes.gone[kind][key] = _uid(event.object)
        else:
            self.objects[kind][key] = event.object
        changes.add(kind, key)

    def _relist_kind(self, kind: str, changes: _Changes) -> None:
        """After 410 Gone: LIST the kind again and turn the difference into changes."""
        listed = self.list_kind(kind)
        if listed is None:
            self.complete.discard(kind)
            return
        items, version = listed
        before = self.objects[kind]
        self._replace(kind, items)
        self.versions[kind] = version
        after = self.objects[kind]
        for key in before.keys() | after.keys():
            old, new = before.get(key), after.get(key)
            if old is not None and new is not None and _rv(old) == _rv(new):
                continue
            if new is None:
                changes.deleted.add(kind)
                changes.gone[kind][key] = _uid(old)
            if kind == "Workload":
                for obj in (old, new):
                    if obj is not None and self._workload_queue(obj):
                        changes.queues.add(self._workload_queue(obj))
            changes.add(kind, key)

    def _workload_queue(self, obj: dict[str, Any]) -> str:
        """The ClusterQueue a Workload object belongs to (admission, else its LocalQueue)."""
        status = obj.get("status")
        if isinstance(status, dict):
            admission = status.get("admission")
            if isinstance(admission, dict) and isinstance(admission.get("clusterQueue"), str):
                return admission["clusterQueue"]
        spec = obj.get("spec")
        meta = obj.get("metadata")
        if not isinstance(spec, dict) or not isinstance(meta, dict):
            return ""
        local_queue = self.objects["LocalQueue"].get(
            (str(meta.get("namespace") or ""), str(spec.get("queueName") or ""))
        )
        lq_spec = local_queue.get("spec") if local_queue else None
        return str(lq_spec.get("clusterQueue") or "") if isinstance(lq_spec, dict) else ""

    def flush(self, changes: _Changes) -> None:
        """Write what the events changed: build rows for them (with the context they need)."""
        changed = changes.keys
        queues = set(changes.queues) | {key[1] for key in changed.get("ClusterQueue", ())}
        pod_namespaces = {key[0] for key in changed.get("Pod", ())}
        changed_workloads = changed.get("Workload", set())
        if changed.get("LocalQueue"):
            # A LocalQueue that now points elsewhere moves its pending workloads.
            pod_namespaces |= {key[0] for key in changed["LocalQueue"]}
        bad = self.bad["Workload"]
        # Context: the other workloads that may hold quota in the touched queues (borrowing is
        # inferred over holders only) or own the changed pods.
        workloads = [
            obj
            for key, obj in self.objects["Workload"].items()
            if key in changed_workloads
            or (
                key not in bad
                # The queue test first: it is a few dict lookups, and rules out most workloads.
                and (key[0] in pod_namespaces or (queues and self._workload_queue(obj) in queues))
                and _may_hold(obj)
            )
        ]
        select: dict[str, list[dict[str, Any]]] = {
            kind: [
                obj
                for key, obj in self.objects[kind].items()
                if key not in self.bad[kind] or key in changed.get(kind, ())
            ]
            for kind in SMALL_KINDS
        }
        select.update(
            {
                "Workload": workloads,
                "Pod": [
                    self.objects["Pod"][key]
                    for key in changed.get("Pod", ())
                    if key in self.objects["Pod"]
                ],
                "Node": [
                    self.objects["Node"][key]
                    for key in changed.get("Node", ())
                    if key in self.objects["Node"]
                ],
            }
        )
        batch = build_snapshot(
            self._snapshot(KIND_NAMES, select=select), settings.GPULEDGER_TEAM_LABELS
        )
        parsed = _parsed_keys(batch)
        # Keep the rows of what changed, plus workloads whose inferred borrowing moved.
        keep = {
            row.key
            for row in batch.workloads
            if row.key in changed_workloads
            or self.borrowing.get(row.key) != (row.borrowing, row.borrowed_gpus)
        }
        self._remember_borrowing(batch.workloads)
        for key in changed_workloads:
            if key not in self.objects["Workload"]:
                self.borrowing.pop(key, None)
        batch.workloads = [row for row in batch.workloads if row.key in keep]
        batch.transitions = [
            row for row in batch.transitions if (row.workload_namespace, row.workload_name) in keep
        ]
        self._count_changed_skips(parsed, changed)
        # The in-memory lists are complete (for the kinds in ``complete``): what is not in them
        # is gone, and skipped or unselected objects are still there.
        for kind in SMALL_KINDS:
            batch.seen[kind] = {_store_key(kind, key) for key in self.objects[kind]}
        batch.unidentified = set(batch.unidentified) | set(self.unidentified)
        trusted = self.complete - batch.unidentified
        # Only small kinds that lost objects need the writer's deletion pass over their lists;
        # Workloads, Pods and Nodes that went are marked by key.
        complete = frozenset(self.complete & changes.deleted & set(SMALL_KINDS))
        gone = {
            kind: self._gone_keys(kind, entries)
            for kind, entries in changes.gone.items()
            if kind not in SMALL_KINDS and kind in trusted
        }
        with transaction.atomic():
            result = write_snapshot(self.cluster, batch, complete)
            deleted = sum(
                mark_deleted(self.cluster, kind, keys, batch.observed_at)
                for kind, keys in gone.items()
                if keys
            )
        self.rows_written += result.rows_written + deleted
        logger.info(
            "cluster %s: applied %d watch events (%s)",
            self.cluster.name,
            changes.count,
            ", ".join(f"{kind} {len(keys)}" for kind, keys in sorted(changed.items())),
        )

    def _gone_keys(self, kind: str, entries: dict[Key, str]) -> list[tuple[str, ...]]:
        """``mark_deleted`` keys of the objects that went and did not come back.

        A Pod that came back under the same name is a new pod when its uid differs: the old
        one's allocation ends all the same.
        """
        keys: list[tuple[str, ...]] = []
        for key, uid in entries.items():
            current = self.objects[kind].get(key)
            if kind == "Pod":
                if current is None or _uid(current) != uid:
                    keys.append((*key, uid))
            elif current is None:
                keys.append(_store_key(kind, key))
        return keys

    def _count_changed_skips(
        self, parsed: dict[str, set[Key]], changed: dict[str, set[Key]]
    ) -> None:
        """Changed objects that ingest skipped (it logged why) count as skipped records."""
        for kind, keys in changed.items():
            for key in keys:
                if key not in self.objects[kind] or key in parsed[kind]:
                    self.bad[kind].discard(key)
                    continue
                if kind in ("Pod", "Node"):
                    continue  # a pod without GPUs or a CPU node is not a skip
                self.bad[kind].add(key)
                self.skipped += 1
                self.skip_reasons[f"{kind}: skipped in watch event"] += 1

    # --- the run -----------------------------------------------------------------------------
    def finish(self, status: str, error: str = "") -> IngestRun:
        run = self.run
        run.status = status
        run.finished_at = timezone.now()
        run.records_read = self.records_read + self.events_applied
        run.rows_written = self.rows_written
        run.skipped = self.skipped
        run.skip_reasons = {**dict(self.skip_reasons), **dict(self.notes)}
        run.error = error or "\n".join(self.errors)
        if self.first_window is not None and self.sampled_until is not None:
            run.window_start = self.first_window - timedelta(
                seconds=settings.GPULEDGER_COLLECT_SECONDS
            )
            run.window_end = self.sampled_until
        run.save()
        return run


def _parsed_keys(batch: KueueBatch) -> dict[str, set[Key]]:
    """The identities ingest turned into rows, per kind."""
    return {
        "ResourceFlavor": {("", r.meta.name) for r in batch.flavors},
        "Cohort": {("", r.meta.name) for r in batch.cohorts},
        "ClusterQueue": {("", r.meta.name) for r in batch.cluster_queues},
        "LocalQueue": {(r.meta.namespace, r.meta.name) for r in batch.local_queues},
        "WorkloadPriorityClass": {("", r.meta.name) for r in batch.priority_classes},
        "Workload": {r.key for r in batch.workloads},
        "Pod": {(r.meta.namespace, r.meta.name) for r in batch.pods},
        "Node": {("", r.meta.name) for r in batch.nodes},
    }


def _may_hold(obj: dict[str, Any]) -> bool:
    """Whether a Workload object may hold quota: it has an admission and has not finished."""
    status = obj.get("status")
    if not isinstance(status, dict) or not status.get("admission"):
        return False
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        for cond in conditions:
            if isinstance(cond, dict) and cond.get("type") == "Finished":
                return cond.get("status") != "True"
    return True


def _uid(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str(meta.get("uid") or "") if isinstance(meta, dict) else ""


def _rv(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


def write_pending_positions(cluster: Cluster, positions: dict[Key, int]) -> int:
    """Set ``Workload.pending_position`` from the visibility API; clear it where it no longer is."""
    scope = Workload.objects.filter(cluster=cluster)
    current = {
        (ns, name): (pk, position)
        for pk, ns, name, position in scope.filter(
            Q(pending_position__isnull=False) | Q(state__in=PENDING_STATES, deleted_at__isnull=True)
        ).values_list("id", "namespace", "name", "pending_position")
    }
    changed = []
    for key, (pk, position) in current.items():
        wanted = positions.get(key)
        if wanted != position:
            changed.append(Workload(pk=pk, pending_position=wanted))
    missing = [key for key in positions if key not in current]
    if missing:
        # Pending by the visibility API but not by our reading of its conditions (a race).
        for start in range(0, len(missing), LOOKUP_BATCH_SIZE):
            chunk = missing[start : start + LOOKUP_BATCH_SIZE]
            query = Q()
            for ns, name in chunk:
                query |= Q(namespace=ns, name=name)
            for pk, ns, name in scope.filter(query).values_list("id", "namespace", "name"):
                changed.append(Workload(pk=pk, pending_position=positions[(ns, name)]))
    if changed:
        Workload.objects.bulk_update(changed, ["pending_position"], batch_size=WRITE_BATCH_SIZE)
    return len(changed)


def sync_cluster(
    cluster_id: int,
    watch_seconds: float = 0,
    *,
    watch_until: datetime | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    client: KueueClient | None = None,
) -> IngestRun:
    """LIST the cluster's Kueue objects, GPU pods and nodes, write them, then WATCH a while.

    The watch lasts ``watch_seconds`` after the LIST, and ends at ``watch_until`` at the latest
    (the task's next beat tick). Returns the run's ``IngestRun``: ``success``, ``partial`` (some
    LIST failed or some objects were skipped; the rest is written and nothing is deleted for the
    failed kinds) or ``failed``.
    A failed run re-raises its ``KubeError`` (``permanent`` tells the caller whether to retry).
    Raises ``SyncBusy`` when another sync of the cluster is running.
    """
    cluster = Cluster.objects.get(pk=cluster_id)
    owner = f"sync-{uuid.uuid4().hex[:12]}"
    now = timezone.now()
    lease = now + timedelta(seconds=watch_seconds + CLAIM_SLACK_SECONDS)
    if not CollectionCursor.objects.claim(cluster, IngestSource.KUEUE, owner, until=lease, now=now):
        raise SyncBusy(f"cluster {cluster.name} is being synced by another worker")
    run = IngestRun.objects.create(
        cluster=cluster,
        source=IngestSource.KUEUE,
        status=IngestStatus.RUNNING,
        started_at=timezone.now(),
    )
    sync: ClusterSync | None = None
    own_client = client is None
    try:
        if client is None:
            client = KueueClient.for_cluster(cluster, kubeconfig=kubeconfig, context=context)
        sync = ClusterSync(cluster, client, run)
        sync.relist()
        if watch_until is not None:
            watch_seconds = min(watch_seconds, (watch_until - timezone.now()).total_seconds())
        if watch_seconds > 0:
            sync.watch(watch_seconds)
    except KubeError as exc:
        failed = sync or ClusterSync(cluster, client, run)  # type: ignore[arg-type]
        failed.errors.append(exc.message)
        failed.finish(IngestStatus.FAILED)
        logger.warning("cluster %s: Kueue sync failed: %s", cluster.name, exc.message)
        raise
    except Exception as exc:
        run.status = IngestStatus.FAILED
        run.finished_at = timezone.now()
        run.error = f"{type(exc).__name__}: {exc}"
        run.save()
        raise
    finally:
        CollectionCursor.objects.release(
            cluster,
            IngestSource.KUEUE,
            owner,
            last_window_end=sync.sampled_until if sync else None,
        )
        if own_client and client is not None:
            client.close()
    status = IngestStatus.PARTIAL if sync.errors or sync.skipped else IngestStatus.SUCCESS
    run = sync.finish(status)
    logger.info(
        "cluster %s: Kueue sync %s: read %d, wrote %d, skipped %d",
        cluster.name,
        run.status,
        run.records_read,
        run.rows_written,
        run.skipped,
    )
    return run
