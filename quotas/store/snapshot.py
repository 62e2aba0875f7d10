"""``write_snapshot``: one Kueue/API-server batch written in one transaction, kind by kind.

The order follows the foreign keys: flavors, cohorts, teams, ClusterQueues and their quotas,
LocalQueues, team namespaces, priority classes, Workloads and their transitions, then the
Kubernetes kinds, whose rows other writers share: Nodes (``fleet.inventory``) and the pods'
Allocations (``quotas.allocations``).
"""

from __future__ import annotations

import logging

from django.db import transaction

from core import bulk
from fleet.inventory import sync_nodes
from fleet.models import Cluster
from quotas.allocations import write_pod_allocations
from quotas.constants import LOOKUP_BATCH_SIZE
from quotas.ingest import KueueBatch
from quotas.models import Workload
from quotas.store.queues import (
    write_cluster_queues,
    write_cohorts,
    write_flavors,
    write_local_queues,
    write_priority_classes,
    write_quotas,
    write_team_namespaces,
    write_teams,
)
from quotas.store.signals import workloads_written
from quotas.store.workloads import write_transitions, write_workloads
from quotas.store.writer import SnapshotWriter, WriteResult

logger = logging.getLogger(__name__)


def write_snapshot(cluster: Cluster, batch: KueueBatch, complete: frozenset[str]) -> WriteResult:
    """Write every row of ``batch`` for ``cluster`` in one transaction (``quotas.store``).

    ``complete``: the kinds whose LIST finished; only those may mark rows deleted.
    """
    w = SnapshotWriter(cluster, batch, complete)
    with transaction.atomic():
        write_flavors(w)
        cohorts = write_cohorts(w)
        teams = write_teams(w)
        queues = write_cluster_queues(w, cohorts, teams)
        write_quotas(w, queues)
        local_queues = write_local_queues(w, queues)
        write_team_namespaces(w, teams)
        write_priority_classes(w)
        workloads = write_workloads(w, queues, local_queues)
        write_transitions(w, workloads)
        nodes = _write_nodes(w)
        _write_allocations(w, nodes, workloads)
        _tell_workloads_written(w, workloads)
    result = w.result
    logger.info(
        "Kueue sync %s: created %s, updated %s, deleted %s, %d transitions",
        cluster.name,
        {k: v for k, v in result.created.items() if v},
        {k: v for k, v in result.updated.items() if v},
        {k: v for k, v in result.deleted.items() if v},
        result.transitions_added,
    )
    return result


def _write_nodes(w: SnapshotWriter) -> dict[str, int]:
    listed = {
        row.meta.name: {
            "gpu_product": row.gpu_product,
            "node_pool": row.node_pool,
            "flavor": row.flavor,
            "gpu_capacity": row.gpu_capacity,
            "gpu_allocatable": row.gpu_allocatable,
            "mig_allocatable": row.mig_allocatable,
            "labels": row.meta.labels,
        }
        for row in w.batch.nodes
    }
    written = sync_nodes(w.cluster, listed, seen=w.seen("Node"), now=w.now)
    w.record("Node", written)
    return {key[0]: pk for key, pk in written.ids.items()}


def _write_allocations(
    w: SnapshotWriter, nodes: dict[str, int], workloads: dict[tuple[str, str], int]
) -> None:
    listed = w.batch.seen.get("Pod", set()) if "Pod" in w.deletable else None
    written = write_pod_allocations(
        w.cluster, w.batch.pods, w.now, node_ids=nodes, workload_ids=workloads, listed=listed
    )
    w.result.created["Allocation"] = written.created
    w.result.updated["Allocation"] = written.updated
    w.result.deleted["Allocation"] = written.ended


def _tell_workloads_written(w: SnapshotWriter, workloads: dict[tuple[str, str], int]) -> None:
    """Send ``workloads_written`` for the Workloads this batch wrote, deleted or ran pods of."""
    ids = set(workloads.values()) | set(w.marked_deleted.get("Workload", []))
    pod_keys = {
        (pod.meta.namespace, pod.workload_name)
        for pod in w.batch.pods
        if pod.workload_name and (pod.meta.namespace, pod.workload_name) not in workloads
    }
    if pod_keys:
        found = bulk.read_keys(
            Workload.objects.filter(cluster=w.cluster),
            ("namespace", "name"),
            sorted(pod_keys),
            ("id",),
            LOOKUP_BATCH_SIZE,
        )
        ids.update(row["id"] for row in found.values())
    if not ids:
        return
    workloads_written.send(
        sender=Cluster,
        cluster=w.cluster,
        workload_ids=sorted(ids),
        listed="Workload" in w.complete,
        evictions_total={row.key: row.evictions_total for row in w.batch.workloads},
    )
