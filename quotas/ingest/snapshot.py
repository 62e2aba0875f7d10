"""Raw LIST payloads -> a ``KueueSnapshot`` -> a ``KueueBatch``: one parser per kind, in the
order their context needs (LocalQueues and priority classes before Workloads, Workloads before
Pods), bad objects skipped and counted, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from core.timewindows import ensure_aware
from quotas import constants as c
from quotas.ingest.fields import NAMESPACED_KINDS, Malformed, check_api_version, read_meta
from quotas.ingest.nodes import fill_flavor_gpu_models, parse_node
from quotas.ingest.pods import PodJoiner, parse_pod
from quotas.ingest.queues import (
    build_teams,
    parse_cluster_queue,
    parse_cohort,
    parse_flavor,
    parse_local_queue,
    with_implicit_cohorts,
)
from quotas.ingest.rows import KueueBatch, KueueSnapshot
from quotas.ingest.workloads import infer_borrowing, parse_priority_class, parse_workload

logger = logging.getLogger(__name__)


def snapshot_from_lists(observed_at: datetime, **lists: dict | None) -> KueueSnapshot:
    """Wrap raw LIST payloads (``{"items": [...]}``) keyed like ``KueueSnapshot``'s fields.

    A kind is complete when its payload is a LIST with an ``items`` list and no ``continue``
    token (the pagination was followed to the end). A missing, ``None`` or malformed payload
    (a failed LIST) leaves the kind incomplete. Items without ``apiVersion``/``kind`` (the API
    server leaves them out on built-in types) inherit them from the LIST.
    """
    unknown = set(lists) - set(c.LIST_KINDS)
    if unknown:
        raise TypeError(f"unknown LIST keyword(s): {', '.join(sorted(unknown))}")
    complete: set[str] = set()
    values: dict[str, list[dict]] = {}
    for keyword, kind in c.LIST_KINDS.items():
        payload = lists.get(keyword)
        values[keyword] = []
        if payload is None:
            continue
        items = payload.get("items") if isinstance(payload, dict) else None
        if not isinstance(items, list):
            logger.warning("%s LIST payload has no items list; treating it as failed", kind)
            continue
        list_meta = payload.get("metadata")
        token = list_meta.get("continue") if isinstance(list_meta, dict) else None
        if token:
            logger.warning("%s LIST is a partial page (continue token); not complete", kind)
        else:
            complete.add(kind)
        api_version = payload.get("apiVersion")
        values[keyword] = [_with_type(item, api_version, kind) for item in items]
    return KueueSnapshot(
        observed_at=ensure_aware(observed_at), complete=frozenset(complete), **values
    )


def _with_type(item: Any, api_version: object, kind: str) -> Any:
    if not isinstance(item, dict) or ("apiVersion" in item and "kind" in item):
        return item
    return {"apiVersion": api_version, "kind": kind, **item}


def build_snapshot(
    snap: KueueSnapshot,
    team_labels: Sequence[str],
    node_pool_labels: Sequence[str] = c.NODE_POOL_LABELS,
) -> KueueBatch:
    """Turn a snapshot into rows. Never raises on bad objects: they are skipped and counted."""
    batch = KueueBatch(observed_at=ensure_aware(snap.observed_at))
    read = _Reader(batch)
    batch.flavors = read.each("ResourceFlavor", snap.resource_flavors, parse_flavor)
    explicit_cohorts = read.each("Cohort", snap.cohorts, parse_cohort)
    batch.cluster_queues = read.each(
        "ClusterQueue",
        snap.cluster_queues,
        lambda item, meta: parse_cluster_queue(item, meta, team_labels),
    )
    batch.cohorts = with_implicit_cohorts(
        explicit_cohorts, batch.cluster_queues, batch.seen["Cohort"]
    )
    batch.local_queues = read.each("LocalQueue", snap.local_queues, parse_local_queue)
    batch.priority_classes = read.each(
        "WorkloadPriorityClass", snap.workload_priority_classes, parse_priority_class
    )
    lq_targets = {
        (lq.meta.namespace, lq.meta.name): lq.cluster_queue_name for lq in batch.local_queues
    }
    class_values = {pc.meta.name: pc.value for pc in batch.priority_classes}
    parsed = read.each(
        "Workload",
        snap.workloads,
        lambda item, meta: parse_workload(item, meta, lq_targets, class_values),
    )
    batch.workloads = [row for row, _ in parsed]
    batch.transitions = [t for _, transitions in parsed for t in transitions]
    infer_borrowing(batch.workloads, batch.cluster_queues)
    batch.nodes = [
        row
        for row in read.each(
            "Node",
            snap.nodes,
            lambda item, meta: parse_node(item, meta, batch.flavors, node_pool_labels),
        )
        if row is not None
    ]
    joiner = PodJoiner(batch.workloads)
    batch.pods = [
        row
        for row in read.each("Pod", snap.pods, lambda item, meta: parse_pod(item, meta, joiner))
        if row is not None
    ]
    fill_flavor_gpu_models(batch.flavors, batch.nodes)
    batch.teams = build_teams(batch.cluster_queues, batch.local_queues)
    logger.info(
        "Kueue snapshot: %d read, %d skipped, %d workloads, %d pods, %d transitions",
        batch.stats.records_read,
        batch.stats.skipped,
        len(batch.workloads),
        len(batch.pods),
        len(batch.transitions),
    )
    return batch


class _Reader:
    """Runs one parser per item, skipping (and counting) what cannot be read."""

    def __init__(self, batch: KueueBatch) -> None:
        self.batch = batch

    def each(self, kind: str, items: Iterable[Any], parse: Any) -> list:
        rows = []
        for item in items:
            self.batch.stats.records_read += 1
            ident = ""
            try:
                meta = read_meta(item, kind)
                ident = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
                key = (meta.namespace, meta.name) if kind in NAMESPACED_KINDS else (meta.name,)
                if key in self.batch.seen[kind]:
                    raise Malformed("duplicate", "listed twice")
                self.batch.seen[kind].add(key)
                check_api_version(item, kind)
                rows.append(parse(item, meta))
            except Malformed as exc:
                if exc.reason in {"missing_metadata", "missing_name", "missing_namespace"}:
                    self.batch.unidentified.add(kind)
                self.batch.stats.skip(kind, ident, exc.reason, exc.detail)
        return rows
