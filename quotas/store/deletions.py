"""Objects a WATCH saw deleted: marked by key, never removed (history is kept)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import models

from core import bulk
from core.timewindows import ensure_aware
from fleet.inventory import mark_nodes_deleted
from fleet.models import Cluster
from quotas import constants as c
from quotas.allocations import end_pod_allocations
from quotas.models import (
    ClusterQueue,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
)
from quotas.store.signals import workloads_written
from quotas.store.workloads import record_deletions

# Kueue kinds marked here, with their key fields; Nodes and Pods have writers of their own.
_DELETABLE: dict[str, tuple[type[models.Model], tuple[str, ...]]] = {
    "ResourceFlavor": (ResourceFlavor, ("name",)),
    "Cohort": (Cohort, ("name",)),
    "ClusterQueue": (ClusterQueue, ("name",)),
    "LocalQueue": (LocalQueue, ("namespace", "name")),
    "WorkloadPriorityClass": (WorkloadPriorityClass, ("name",)),
    "Workload": (Workload, ("namespace", "name")),
}


def mark_deleted(cluster: Cluster, kind: str, keys: Iterable[tuple[str, ...]], at: datetime) -> int:
    """Mark the objects of ``kind`` a WATCH saw deleted; returns the rows marked.

    ``keys`` are ingest's identities: ``(namespace, name)`` for namespaced kinds, ``(name,)``
    for the others, ``(namespace, name, uid)`` for a Pod (its open allocation is ended,
    ``quotas.allocations``; a Node is ``fleet.inventory``'s). Rows already marked are left
    alone; a deleted Workload gets its ``deleted`` transition. Call it inside the transaction
    of the batch's ``write_snapshot``.
    """
    at = ensure_aware(at)
    keys = list(keys)
    if kind == "Pod":
        return end_pod_allocations(cluster, keys, at)
    if kind == "Node":
        return mark_nodes_deleted(cluster, [key[0] for key in keys], at)
    model, key_fields = _DELETABLE[kind]
    present = model._default_manager.filter(cluster=cluster, deleted_at__isnull=True)
    found = bulk.read_keys(present, key_fields, keys, ("id",), c.LOOKUP_BATCH_SIZE)
    ids = [row["id"] for row in found.values()]
    bulk.update_in(model._default_manager.all(), "pk", ids, c.LOOKUP_BATCH_SIZE, deleted_at=at)
    if kind == "Workload":
        record_deletions(ids, at)
        if ids:
            workloads_written.send(
                sender=Cluster, cluster=cluster, workload_ids=ids, listed=False, evictions_total={}
            )
    return len(ids)
