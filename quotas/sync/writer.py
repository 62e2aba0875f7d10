"""``Writer``: turns the in-memory lists into rows and writes them.

* ``build_all`` / ``write_all``: the whole lists, after a LIST: ``build_snapshot`` on them and
  ``write_snapshot`` with ``complete`` = the kinds whose LIST finished.
* ``flush``: only what WATCH events changed: it builds rows for the changed objects with the
  context they need, and writes those. A DELETED event removes the object from its in-memory
  list, which is complete, so the object is marked deleted exactly as a complete LIST would:
  Workloads, Pods and Nodes by key (``quotas.store.mark_deleted``), the small kinds by the
  writer's pass over their lists.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction

from fleet.models import Cluster
from quotas.ingest import KueueBatch, build_snapshot
from quotas.store import mark_deleted, write_snapshot
from quotas.sync.objects import (
    KIND_NAMES,
    SMALL_KINDS,
    Changes,
    Key,
    ObjectLists,
    may_hold,
    object_uid,
    parsed_keys,
    store_key,
)
from quotas.sync.tally import Tally

logger = logging.getLogger(__name__)


class Writer:
    """Writes ``lists`` for ``cluster``, counting in ``tally``; remembers each workload's
    inferred borrowing, so an incremental write also rewrites the workloads whose borrowing
    another workload's change moved."""

    def __init__(self, cluster: Cluster, lists: ObjectLists, tally: Tally) -> None:
        self.cluster = cluster
        self.lists = lists
        self.tally = tally
        self.borrowing: dict[Key, tuple[bool, float]] = {}

    # --- everything, after a LIST ----------------------------------------------------------------
    def build_all(self) -> KueueBatch:
        """Rows for the whole lists; remembers what ingest skipped and each workload's borrowing."""
        lists = self.lists
        batch = build_snapshot(lists.snapshot(KIND_NAMES), settings.GPULEDGER_TEAM_LABELS)
        lists.unidentified = frozenset(batch.unidentified)
        parsed = parsed_keys(batch)
        for kind in SMALL_KINDS + ("Workload",):
            lists.bad[kind] = set(lists.objects[kind]) - parsed[kind]
        self.tally.count_build(batch)
        self._remember_borrowing(batch.workloads)
        return batch

    def write_all(self, batch: KueueBatch) -> int:
        """Write ``build_all``'s rows; kinds whose LIST failed are written, never deleted."""
        result = write_snapshot(self.cluster, batch, frozenset(self.lists.complete))
        self.tally.rows_written += result.rows_written
        return result.rows_written

    def _remember_borrowing(self, workloads: Iterable[Any]) -> None:
        for row in workloads:
            self.borrowing[row.key] = (row.borrowing, row.borrowed_gpus)

    # --- what WATCH events changed ---------------------------------------------------------------
    def flush(self, changes: Changes) -> None:
        """Write what the events changed: build rows for them (with the context they need)."""
        lists = self.lists
        changed = changes.keys
        batch = build_snapshot(
            lists.snapshot(KIND_NAMES, select=self._select(changes)),
            settings.GPULEDGER_TEAM_LABELS,
        )
        parsed = parsed_keys(batch)
        self._keep_changed_rows(batch, changed.get("Workload", set()))
        self._count_changed_skips(parsed, changed)
        # The in-memory lists are complete (for the kinds in ``complete``): what is not in them
        # is gone, and skipped or unselected objects are still there.
        for kind in SMALL_KINDS:
            batch.seen[kind] = {store_key(kind, key) for key in lists.objects[kind]}
        batch.unidentified = set(batch.unidentified) | set(lists.unidentified)
        trusted = lists.complete - batch.unidentified
        # Only small kinds that lost objects need the writer's deletion pass over their lists;
        # Workloads, Pods and Nodes that went are marked by key.
        complete = frozenset(lists.complete & changes.deleted & set(SMALL_KINDS))
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
        self.tally.rows_written += result.rows_written + deleted
        logger.info(
            "cluster %s: applied %d watch events (%s)",
            self.cluster.name,
            changes.count,
            ", ".join(f"{kind} {len(keys)}" for kind, keys in sorted(changed.items())),
        )

    def _select(self, changes: Changes) -> dict[str, list[dict[str, Any]]]:
        """The objects an incremental build reads, per kind: the changed ones and their context.

        Every well-formed object of the small kinds; of the Workloads, the changed ones and the
        others that may hold quota in the touched queues (borrowing is inferred over holders
        only) or own the changed pods; of the Pods and Nodes, the changed ones.
        """
        objects, bad = self.lists.objects, self.lists.bad
        changed = changes.keys
        queues = set(changes.queues) | {key[1] for key in changed.get("ClusterQueue", ())}
        pod_namespaces = {key[0] for key in changed.get("Pod", ())}
        changed_workloads = changed.get("Workload", set())
        if changed.get("LocalQueue"):
            # A LocalQueue that now points elsewhere moves its pending workloads.
            pod_namespaces |= {key[0] for key in changed["LocalQueue"]}
        workload_queue = self.lists.workload_queue
        workloads = [
            obj
            for key, obj in objects["Workload"].items()
            if key in changed_workloads
            or (
                key not in bad["Workload"]
                # The queue test first: it is a few dict lookups, and rules out most workloads.
                and (key[0] in pod_namespaces or (queues and workload_queue(obj) in queues))
                and may_hold(obj)
            )
        ]
        select: dict[str, list[dict[str, Any]]] = {
            kind: [
                obj
                for key, obj in objects[kind].items()
                if key not in bad[kind] or key in changed.get(kind, ())
            ]
            for kind in SMALL_KINDS
        }
        select["Workload"] = workloads
        for kind in ("Pod", "Node"):
            select[kind] = [
                objects[kind][key] for key in changed.get(kind, ()) if key in objects[kind]
            ]
        return select

    def _keep_changed_rows(self, batch: KueueBatch, changed_workloads: set[Key]) -> None:
        """Keep the workload rows of what changed, plus workloads whose inferred borrowing moved."""
        keep = {
            row.key
            for row in batch.workloads
            if row.key in changed_workloads
            or self.borrowing.get(row.key) != (row.borrowing, row.borrowed_gpus)
        }
        self._remember_borrowing(batch.workloads)
        for key in changed_workloads:
            if key not in self.lists.objects["Workload"]:
                self.borrowing.pop(key, None)
        batch.workloads = [row for row in batch.workloads if row.key in keep]
        batch.transitions = [
            row for row in batch.transitions if (row.workload_namespace, row.workload_name) in keep
        ]

    def _gone_keys(self, kind: str, entries: dict[Key, str]) -> list[tuple[str, ...]]:
        """``mark_deleted`` keys of the objects that went and did not come back.

        A Pod that came back under the same name is a new pod when its uid differs: the old
        one's allocation ends all the same.
        """
        keys: list[tuple[str, ...]] = []
        for key, uid in entries.items():
            current = self.lists.objects[kind].get(key)
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
        objects, bad = self.lists.objects, self.lists.bad
        for kind, keys in changed.items():
            for key in keys:
                if key not in objects[kind] or key in parsed[kind]:
                    bad[kind].discard(key)
                    continue
                if kind in ("Pod", "Node"):
                    continue  # a pod without GPUs or a CPU node is not a skip
                bad[kind].add(key)
                self.tally.skip(f"{kind}: skipped in watch event")
