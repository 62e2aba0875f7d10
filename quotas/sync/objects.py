"""The in-memory lists a sync keeps (``ObjectLists``): object identities, what ingest made of
them, and the changes watch events leave to write.

Objects are keyed (namespace, name), with ``""`` for the namespace of cluster-scoped kinds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from quotas.constants import LABEL_CLUSTER_QUEUE, LIST_KINDS
from quotas.ingest import KueueBatch, KueueSnapshot
from quotas.kueue import KINDS

KIND_NAMES = tuple(kind.name for kind in KINDS)
NAMESPACED = frozenset(kind.name for kind in KINDS if kind.namespaced)
SNAPSHOT_FIELD = {kind: keyword for keyword, kind in LIST_KINDS.items()}
# Kinds with at most a few thousand objects: every incremental build reads all of them (the
# writer only writes the rows that changed). Workloads, Pods and Nodes are read selectively.
SMALL_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass")

# Kinds whose rows ingest reads together with other kinds' objects: a Node's flavor from the
# ResourceFlavors, a flavor's GPU model from its Nodes, a Workload's borrowing from the
# ClusterQueues, its queue from the LocalQueues and its priority from the classes, a Pod's
# Workload from the Workloads. Without those lists they would be written wrong (a node without
# its flavor, workloads borrowing nothing), so a sync whose LIST of one of them failed writes
# neither, as it never reads a failed or partial LIST as everything deleted
# (docs/architecture.md "Upstream facts").
NEEDS: dict[str, tuple[str, ...]] = {
    "Node": ("ResourceFlavor",),
    "ResourceFlavor": ("Node",),
    "Workload": ("ClusterQueue", "LocalQueue", "WorkloadPriorityClass"),
    "Pod": ("Workload",),
}

Key = tuple[str, str]


def held_back(available: set[str]) -> dict[str, str]:
    """Kinds that cannot be written without a kind outside ``available`` -> the missing kind."""
    held: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for kind, needs in NEEDS.items():
            if kind in held:
                continue
            missing = [need for need in needs if need not in available or need in held]
            if missing:
                held[kind] = missing[0]
                changed = True
    return held


@dataclass
class Changes:
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


def store_key(kind: str, key: Key) -> tuple[str, ...]:
    """The key as ``quotas.ingest`` and ``quotas.store`` spell it: (name,) for cluster-scoped."""
    return key if kind in NAMESPACED else (key[1],)


def parsed_keys(batch: KueueBatch) -> dict[str, set[Key]]:
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


def may_hold(obj: dict[str, Any]) -> bool:
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


def object_uid(obj: Any) -> str:
    """``metadata.uid`` of an object, ``""`` when it has none."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str(meta.get("uid") or "") if isinstance(meta, dict) else ""


def object_version(obj: dict[str, Any]) -> str:
    """``metadata.resourceVersion`` of an object, ``""`` when it has none."""
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


def _per_kind_dicts() -> dict[str, dict[Key, dict[str, Any]]]:
    return {kind: {} for kind in KIND_NAMES}


def _per_kind_lists() -> dict[str, list[Any]]:
    return {kind: [] for kind in KIND_NAMES}


def _per_kind_sets() -> dict[str, set[Key]]:
    return {kind: set() for kind in KIND_NAMES}


@dataclass
class ObjectLists:
    """The in-memory state of one sync: the last full lists, their resourceVersions, and which of
    them are complete. The LIST step fills it, WATCH events update it, the writer reads it."""

    objects: dict[str, dict[Key, dict[str, Any]]] = field(default_factory=_per_kind_dicts)
    # Objects without a readable identity: ingest counts and skips them on every full build.
    unkeyed: dict[str, list[Any]] = field(default_factory=_per_kind_lists)
    versions: dict[str, str] = field(default_factory=dict)
    # Kinds whose in-memory list is complete: listed in full and kept up to date by WATCH.
    complete: set[str] = field(default_factory=set)
    # Kinds the API server does not serve (Cohort on older Kueue): known to be empty.
    unserved: set[str] = field(default_factory=set)
    unidentified: frozenset[str] = frozenset()
    # Keyed objects ingest skipped as malformed: left out of incremental builds (they would be
    # logged again on every write) until an event changes them.
    bad: dict[str, set[Key]] = field(default_factory=_per_kind_sets)

    def replace(self, kind: str, items: list[dict[str, Any]], version: str) -> None:
        """Make ``items`` (a complete LIST at ``version``) the kind's list."""
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
        self.versions[kind] = version

    def forget(self, kind: str) -> None:
        """Drop a kind's list: it is no longer complete and nothing of it is written."""
        self.complete.discard(kind)
        self.objects[kind], self.unkeyed[kind] = {}, []
        self.versions.pop(kind, None)

    def snapshot(
        self,
        kinds: Iterable[str],
        select: dict[str, list[dict[str, Any]]] | None = None,
    ) -> KueueSnapshot:
        """The lists of ``kinds`` as a snapshot; ``select`` replaces a kind's list."""
        lists: dict[str, list[Any]] = {}
        for kind in kinds:
            if select is not None and kind in select:
                lists[SNAPSHOT_FIELD[kind]] = select[kind]
            else:
                lists[SNAPSHOT_FIELD[kind]] = [*self.objects[kind].values(), *self.unkeyed[kind]]
        return KueueSnapshot(observed_at=timezone.now(), complete=frozenset(self.complete), **lists)

    def workload_queue(self, obj: dict[str, Any]) -> str:
        """The ClusterQueue a Workload object belongs to (admission, else the ClusterQueue its
        labels name, else its LocalQueue's)."""
        status = obj.get("status")
        if isinstance(status, dict):
            admission = status.get("admission")
            if isinstance(admission, dict) and isinstance(admission.get("clusterQueue"), str):
                return admission["clusterQueue"]
        spec = obj.get("spec")
        meta = obj.get("metadata")
        if not isinstance(spec, dict) or not isinstance(meta, dict):
            return ""
        labels = meta.get("labels")
        if isinstance(labels, dict) and labels.get(LABEL_CLUSTER_QUEUE):
            # A source without LocalQueues (Volcano, KAI) names the ClusterQueue on the Workload.
            return str(labels[LABEL_CLUSTER_QUEUE])
        local_queue = self.objects["LocalQueue"].get(
            (str(meta.get("namespace") or ""), str(spec.get("queueName") or ""))
        )
        lq_spec = local_queue.get("spec") if local_queue else None
        return str(lq_spec.get("clusterQueue") or "") if isinstance(lq_spec, dict) else ""

    def note_queues(self, changes: Changes, *workloads: dict[str, Any] | None) -> None:
        """Record the ClusterQueues of these Workload objects (before and after) as changed."""
        for obj in workloads:
            if obj is not None:
                queue_name = self.workload_queue(obj)
                if queue_name:
                    changes.queues.add(queue_name)
