"""``ClusterSync``: the in-memory state of one sync and the steps that write it.

* ``relist``: LIST every kind, ``build_snapshot`` on the lists, ``write_snapshot`` with
  ``complete`` = the kinds the client returned a complete LIST of (``quotas.kueue`` returns
  nothing else: a lie, a failed page or a timeout leaves the kind out), then sample the window.
  It ends by the sync's deadline: past it, the run fails and nothing is written.
* ``apply_event`` / ``relist_kind``: keep the in-memory lists up to date from WATCH events (and
  from a relist after ``410 Gone``), recording what changed.
* ``flush``: build rows for what changed, with the context they need, and write only those.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.deadlines import Deadline
from fleet.models import Cluster, IngestRun
from quotas.ingest import KueueBatch, KueueSnapshot, build_snapshot
from quotas.kueue import KubeError, KubeTimeout, KueueClient, ResourceExpired, WatchEvent
from quotas.store import mark_deleted, write_snapshot
from quotas.sync.objects import (
    KIND_NAMES,
    SMALL_KINDS,
    SNAPSHOT_FIELD,
    Changes,
    Key,
    held_back,
    may_hold,
    object_key,
    object_uid,
    object_version,
    parsed_keys,
    store_key,
)
from quotas.sync.samples import sample_window
from quotas.sync.watch import watch_events

logger = logging.getLogger(__name__)


class ClusterSync:
    """The in-memory state of one sync: the last full lists, their resourceVersions, counters."""

    def __init__(
        self,
        cluster: Cluster,
        client: KueueClient,
        run: IngestRun,
        deadline: Deadline | None = None,
    ) -> None:
        self.cluster = cluster
        self.client = client
        self.run = run
        # Every upstream call ends by this; the watch replaces it with its own end.
        self.deadline = deadline or Deadline.never()
        self.objects: dict[str, dict[Key, dict[str, Any]]] = {k: {} for k in KIND_NAMES}
        # Objects without a readable identity: ingest counts and skips them on every full build.
        self.unkeyed: dict[str, list[Any]] = {k: [] for k in KIND_NAMES}
        self.versions: dict[str, str] = {}
        # Kinds whose in-memory list is complete: listed in full and kept up to date by WATCH.
        self.complete: set[str] = set()
        # Kinds the API server does not serve (Cohort on older Kueue): known to be empty.
        self.unserved: set[str] = set()
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
        """The complete list of one kind, or None when it failed, lied, timed out or is not
        served (recorded): only the client's complete answer makes a kind complete."""
        for attempt in (1, 2):
            try:
                result = self.client.list_objects(kind, deadline=self.deadline)
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
                    self.unserved.add(kind)
                    return None
                logger.warning(
                    "cluster %s: LIST %s failed, nothing of it is marked deleted: %s",
                    self.cluster.name,
                    kind,
                    exc,
                )
                self.errors.append(
                    f"{kind} not listed (nothing of it marked deleted): {exc.message}"
                )
                self.failures.append(exc)
                return None
            return result.items, result.resource_version
        return None

    def relist(self) -> KueueBatch:
        """LIST every kind, write the snapshot, sample the window; KubeError if nothing listed."""
        started = time.perf_counter()
        self.client.discover(refresh=True, deadline=self.deadline)
        for index, kind in enumerate(KIND_NAMES):
            self._check_deadline(KIND_NAMES[index:])
            listed = self.list_kind(kind)
            if listed is None:
                self.complete.discard(kind)
                # A LIST cut off by the run's deadline ends the run: nothing is written.
                self._check_deadline(KIND_NAMES[index + 1 :])
                continue
            items, version = listed
            self._replace(kind, items)
            self.versions[kind] = version
            self.complete.add(kind)
        self._hold_back()
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
        batch = build_snapshot(self.snapshot(KIND_NAMES), settings.GPULEDGER_TEAM_LABELS)
        built_at = time.perf_counter()
        self.unidentified = frozenset(batch.unidentified)
        parsed = parsed_keys(batch)
        for kind in SMALL_KINDS + ("Workload",):
            self.bad[kind] = set(self.objects[kind]) - parsed[kind]
        self._count_build(batch)
        self._remember_borrowing(batch.workloads)
        result = write_snapshot(self.cluster, batch, frozenset(self.complete))
        written_at = time.perf_counter()
        self.rows_written += result.rows_written
        sample_window(self, batch, force=True)
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

    def _hold_back(self) -> None:
        """Leave out of this run the kinds ingest would read wrong without a failed LIST."""
        for kind, missing in held_back(self.complete | self.unserved).items():
            if kind not in self.complete:
                continue
            self.complete.discard(kind)
            self.objects[kind], self.unkeyed[kind] = {}, []
            self.versions.pop(kind, None)
            self.errors.append(
                f"{kind} not written: its rows need the {missing} list, which is not complete"
            )

    def _check_deadline(self, unlisted: Iterable[str]) -> None:
        """Raise ``KubeTimeout`` once the run's deadline has passed."""
        if not self.deadline.expired():
            return
        left = ", ".join(unlisted)
        raise KubeTimeout(
            f"{self.deadline} reached"
            + (f"; not listed: {left}" if left else "")
            + "; nothing was written",
            deadline=self.deadline,
            run_deadline=True,
        )

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

    def snapshot(
        self,
        kinds: Iterable[str],
        select: dict[str, list[dict[str, Any]]] | None = None,
    ) -> KueueSnapshot:
        """The in-memory lists of ``kinds`` as a snapshot; ``select`` replaces a kind's list."""
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

    # --- WATCH -------------------------------------------------------------------------------
    def watch(self, seconds: float, *, stop_after_events: int | None = None) -> None:
        """Apply WATCH events of every complete kind for ``seconds``, writing in batches.

        ``stop_after_events`` ends the watch early, once that many object events are written.
        """
        watch_events(self, seconds, stop_after_events=stop_after_events)

    def apply_event(self, kind: str, event: WatchEvent, changes: Changes) -> None:
        """Apply one WATCH event to the in-memory lists and record what it changed."""
        if event.type == "INVALID":
            # Another kind, or no identity: the client logged it; never read as a change.
            self.skipped += 1
            self.skip_reasons[f"{kind}: watch event {event.problem}"] += 1
            return
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
            changes.gone[kind][key] = object_uid(event.object)
        else:
            self.objects[kind][key] = event.object
        changes.add(kind, key)

    def relist_kind(self, kind: str, changes: Changes) -> None:
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
            if old is not None and new is not None and object_version(old) == object_version(new):
                continue
            if new is None:
                changes.deleted.add(kind)
                changes.gone[kind][key] = object_uid(old)
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

    def flush(self, changes: Changes) -> None:
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
                and may_hold(obj)
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
            self.snapshot(KIND_NAMES, select=select), settings.GPULEDGER_TEAM_LABELS
        )
        parsed = parsed_keys(batch)
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
            batch.seen[kind] = {store_key(kind, key) for key in self.objects[kind]}
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
                if current is None or object_uid(current) != uid:
                    keys.append((*key, uid))
            elif current is None:
                keys.append(store_key(kind, key))
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
