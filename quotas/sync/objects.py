"""The in-memory lists a sync keeps: object identities, what ingest made of them, and the
changes watch events leave to write.

Objects are keyed (namespace, name), with ``""`` for the namespace of cluster-scoped kinds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from quotas.constants import LIST_KINDS
from quotas.ingest import KueueBatch
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
# neither (docs/architecture.md "Upstream facts": never read a failed or partial LIST as all
# deleted).
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
