"""A deep-backfilled hour's grain -> every scope's usage rows, in the shape
``ledger.rollup.portable.usage_rows`` gives them (key, flavor, GPU model, the usage figures,
peak allocated GPUs, windows, carried foreign keys), so ``ledger.rollup.hour`` names them and
adds quota and pending figures exactly as for an hour of per-window rows.

Pods resolve to Workload / LocalQueue / ClusterQueue / Team through ``ledger.store.owners``
(stored allocations, then the owner chain from kube-state-metrics, the Kueue pod labels, the
namespace's only LocalQueue, its TeamNamespace), once for the hour; rows take the flavor of
their node as per-window rows do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from core.timewindows import Window
from fleet.ingest import PodOwner, UsageRow, WindowBatch
from fleet.inventory import NodeInfo
from fleet.models import Cluster
from ledger.choices import RollupScope
from ledger.deep.grain import Grain, Piece, PodKey
from ledger.rollup.groups import NO_COHORT, UNATTRIBUTED
from ledger.rollup.row_figures import USAGE_FIGURES
from ledger.store.owners import Owner, resolve_owners
from quotas.allocations import read_pod_allocations
from quotas.models import ClusterQueue

ALLOCATED_ONLY = {
    RollupScope.TEAM,
    RollupScope.COHORT,
    RollupScope.CLUSTER_QUEUE,
    RollupScope.LOCAL_QUEUE,
    RollupScope.NAMESPACE,
    RollupScope.WORKLOAD,
}
NO_OWNER = Owner()


def hour_owners(
    cluster: Cluster, hour: datetime, grain: Grain, owners: Mapping[PodKey, PodOwner]
) -> dict[PodKey, Owner]:
    """Who each pod of the hour is charged to (``ledger.store.owners``, the hour as window)."""
    usage = [
        UsageRow(
            gpu_key="",
            host="",
            uuid="",
            gi_id="",
            namespace=namespace,
            pod=pod,
            container="",
            pod_uid=uid,
            node_name="",
            allocated=True,
            gpus=0.0,
            capacity_gpus=0.0,
            cluster_queue_name=cluster_queue,
            local_queue_name=local_queue,
        )  # fmt: skip
        for (namespace, pod), (uid, cluster_queue, local_queue) in sorted(grain.pod_facts.items())
    ]
    for piece in grain.pieces:
        if piece.pod and (piece.namespace, piece.pod) not in grain.pod_facts:
            usage.append(
                UsageRow(
                    gpu_key="",
                    host="",
                    uuid="",
                    gi_id="",
                    namespace=piece.namespace,
                    pod=piece.pod,
                    container="",
                    pod_uid="",
                    node_name="",
                    allocated=True,
                    gpus=0.0,
                    capacity_gpus=0.0,
                )  # fmt: skip
            )
    if not usage:
        return {}
    batch = WindowBatch(
        window=Window(hour, hour + timedelta(hours=1)),
        gpus=[],
        usage=usage,
        allocations=[],
        stats=grain.stats,
        label_style_used="",
        owners=dict(owners),
    )
    pods = sorted({(row.namespace, row.pod) for row in usage})
    return resolve_owners(cluster, batch, read_pod_allocations(cluster, pods))


def _cohorts(cluster: Cluster) -> dict[int, str]:
    """ClusterQueue id -> its cohort group (as ``ledger.rollup.groups`` names it)."""
    return {
        pk: cohort or cohort_name or NO_COHORT
        for pk, cohort, cohort_name in ClusterQueue.objects.filter(cluster=cluster).values_list(
            "id", "cohort__name", "cohort_name"
        )
    }


def _keys(
    cluster: Cluster, cohorts: Mapping[int, str]
) -> dict[str, Callable[[str, str, Owner], Any]]:
    """Per scope: (namespace, node, owner) -> the group key (an id for named scopes)."""
    return {
        RollupScope.FLEET: lambda _ns, _node, _o: cluster.name,
        RollupScope.NODE: lambda _ns, node, _o: node or UNATTRIBUTED,
        RollupScope.FLAVOR: lambda _ns, _node, _o: None,  # the flavor, filled in below
        RollupScope.TEAM: lambda _ns, _node, o: o.team_id,
        RollupScope.COHORT: lambda _ns, _node, o: (
            UNATTRIBUTED
            if o.cluster_queue_id is None
            else cohorts.get(o.cluster_queue_id, NO_COHORT)
        ),
        RollupScope.CLUSTER_QUEUE: lambda _ns, _node, o: o.cluster_queue_id,
        RollupScope.LOCAL_QUEUE: lambda _ns, _node, o: o.local_queue_id,
        RollupScope.NAMESPACE: lambda ns, _node, _o: ns or UNATTRIBUTED,
        RollupScope.WORKLOAD: lambda _ns, _node, o: o.workload_id,
    }


def scope_rows(
    cluster: Cluster,
    grain: Grain,
    owners: Mapping[PodKey, Owner],
    nodes: Mapping[str, NodeInfo],
) -> dict[str, list[dict[str, Any]]]:
    """Every scope's usage rows of the hour."""
    keys = _keys(cluster, _cohorts(cluster))
    flavors: dict[tuple[str, str], str] = {}

    def flavor_of(node: str, host: str) -> str:
        flavor = flavors.get((node, host))
        if flavor is None:
            info = nodes.get(node) or nodes.get(host)
            flavor = flavors[(node, host)] = info.flavor if info else ""
        return flavor

    pieces = _merged(grain.pieces)
    held, hosts = grain.held.columns(), grain.hosts.columns()
    windows = max(len(grain.slots), 1)
    return {
        scope: _one_scope(scope, key_of, pieces, (grain, held, hosts, windows), owners, flavor_of)
        for scope, key_of in keys.items()
    }


def _merged(pieces: list[Piece]) -> list[Piece]:
    """The pieces, those of one (namespace, pod, node, host, model, allocated) added up: every
    scope groups them alike."""
    merged: dict[tuple[str, str, str, str, str, bool], Piece] = {}
    for piece in pieces:
        key = (
            piece.namespace, piece.pod, piece.node_name, piece.host, piece.model, piece.allocated
        )  # fmt: skip
        found = merged.get(key)
        if found is None:
            merged[key] = found = Piece(*key)
        for figure, value in piece.figures.items():
            found.figures[figure] += value
    return list(merged.values())


Columns3 = tuple[np.ndarray, np.ndarray, np.ndarray]


def _one_scope(
    scope: str,
    key_of: Callable[[str, str, Owner], Any],
    pieces: list[Piece],
    windowed: tuple[Grain, Columns3, Columns3, int],
    owners: Mapping[PodKey, Owner],
    flavor_of: Callable[[str, str], str],
) -> list[dict[str, Any]]:
    grain, held, hosts, count = windowed
    rows: dict[tuple[Any, str, str], dict[str, Any]] = {}
    allocated_only = scope in ALLOCATED_ONLY

    def identity(namespace: str, pod: str, node: str, host: str, model: str) -> tuple:
        flavor = flavor_of(node, host)
        owner = owners.get((namespace, pod), NO_OWNER) if pod else NO_OWNER
        key = (
            (flavor or UNATTRIBUTED)
            if scope == RollupScope.FLAVOR
            else key_of(namespace, node, owner)
        )
        return (key, flavor, model), owner

    for piece in pieces:
        if allocated_only and not piece.allocated:
            continue
        ident, owner = identity(
            piece.namespace, piece.pod, piece.node_name, piece.host, piece.model
        )
        _add(rows, ident, piece, owner, scope)
    # Per window: the GPUs held by each group's pods (its peak), and the windows it has any
    # holding in (or, outside the allocated-only scopes, a host with DCGM series).
    numbers: dict[tuple, int] = {}
    held_numbers = np.fromiter(
        (
            numbers.setdefault(identity(ns, pod, node, node, model)[0], len(numbers))
            for ns, pod, node, model in grain.held.keys
        ),
        np.int64,
        len(grain.held.keys),
    )
    host_numbers = np.fromiter(
        (
            numbers.setdefault(identity("", "", host, host, model)[0], len(numbers))
            for host, model in grain.hosts.keys
        ),
        np.int64,
        len(grain.hosts.keys),
    )
    size = len(numbers) * count
    cells = held_numbers[held[0]] * count + held[1]
    sums = np.bincount(cells, weights=held[2], minlength=size).reshape(-1, count)
    holding = np.bincount(cells, minlength=size).reshape(-1, count) > 0
    peaks = np.where(holding, sums, -math.inf).max(axis=1, initial=-math.inf)
    windows = holding
    if not allocated_only:
        host_cells = host_numbers[hosts[0]] * count + hosts[1]
        windows = windows | (np.bincount(host_cells, minlength=size).reshape(-1, count) > 0)
    counted = windows.sum(axis=1)
    for ident, row in rows.items():
        number = numbers.get(ident)
        if number is None:
            row["peak_allocated_gpus"] = 0.0
            row["windows"] = 0
        else:
            peak = float(peaks[number])
            row["peak_allocated_gpus"] = peak if peak > -math.inf else 0.0
            row["windows"] = int(counted[number])
    return list(rows.values())


def _add(
    rows: dict[tuple[Any, str, str], dict[str, Any]],
    ident: tuple[Any, str, str],
    piece: Piece,
    owner: Owner,
    scope: str,
) -> None:
    row = rows.get(ident)
    if row is None:
        row = rows[ident] = {
            "key": ident[0],
            "flavor": ident[1],
            "gpu_model": ident[2],
            **dict.fromkeys(USAGE_FIGURES, 0.0),
        }
        if scope == RollupScope.WORKLOAD:
            row["team_id"] = None
            row["cluster_queue_id"] = None
    for figure, value in piece.figures.items():
        if scope in ALLOCATED_ONLY and figure == "capacity_gpu_hours":
            continue
        row[figure] += value
    if scope == RollupScope.WORKLOAD:
        for name, fk in (
            ("team_id", owner.team_id),
            ("cluster_queue_id", owner.cluster_queue_id),
        ):
            if fk is not None and (row[name] is None or fk > row[name]):
                row[name] = fk
