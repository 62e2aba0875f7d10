"""Evaluate the hoarding rules over stored windows and keep the episodes
(docs/architecture.md "Hoarding alerts").

``evaluate_range`` walks the cluster's stored windows ending in ``(start, end]`` oldest first,
in chunks (``alerts.reading`` reads what the rules need of them), asks ``alerts.rules`` what
held in each, and moves the episodes on: a condition that starts opens a (pending) episode at
the window's start, one that holds extends it, fires it once it held for the rule's duration
and escalates it in place; the first window where it no longer holds resolves it at that
window's start. A pending episode that ends before it fires is deleted: it was never an
alert. A workload whose rows did not change through a chunk but for their activities, and a
subject whose findings did not, move on through the chunk in one step (``RuleSet.split``,
``EpisodeBook.apply``), with the same sums in the same order as window by window: a backfill
of a week is mostly such stretches.

Re-evaluation is idempotent: every episode remembers the newest window it has seen
(``evaluated_until``) and a window it has seen is skipped, so running a range twice, or a
backfill over live history, leaves the same rows. The run holds the cluster's row lock, so two
evaluations of one cluster never interleave.
"""

from __future__ import annotations

import logging
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from alerts.episodes import EpisodeBook
from alerts.reading import read_chunks
from alerts.rules import QueueInfo, RuleSet, WorkloadInfo
from alerts.thresholds import ThresholdResolver
from core.bulk import fetch_rows, filter_in
from core.gcpause import gc_paused
from core.mig import GPU_RESOURCE
from core.pgsettings import local_settings
from fleet.models import Cluster
from ledger.window_detail import window_detail
from quotas.models import ClusterQueue, Workload

logger = logging.getLogger(__name__)

# Ids per ``IN`` list where the database has no array parameter (SQLite's variable limit).
LOOKUP_BATCH_SIZE = 500


@dataclass
class EvaluationResult:
    cluster: str
    windows: int = 0
    created: int = 0
    updated: int = 0
    deleted: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "windows": self.windows,
            "created": self.created,
            "updated": self.updated,
            "deleted": self.deleted,
        }


def evaluate_range(
    cluster_id: int,
    start: datetime,
    end: datetime,
    *,
    live: bool = True,
    now: datetime | None = None,
) -> EvaluationResult:
    """Evaluate every stored window of the cluster ending in ``(start, end]`` that has its
    per-window rows (``ledger.window_detail``): an hour deep-backfilled or pruned is never
    evaluated, even while some of its windows are still stored, so no episode claims an hour
    the pages can show only hourly figures of."""
    now = now or timezone.now()
    start = window_detail(cluster_id, start, end).window_start
    # JIT off: compiling each chunk's queries cost more than running them (bench/alerts.py);
    # work_mem: a chunk's row identities and their arrays are hashed in memory (16 MB for
    # 200,000 rows), not spilled to disk.
    settings = {"jit": "off", "work_mem": "64MB"}
    with transaction.atomic(), gc_paused(), local_settings(connection.alias, settings):
        cluster = Cluster.objects.select_for_update().get(pk=cluster_id)
        result = EvaluationResult(cluster=cluster.name)
        resolver = ThresholdResolver(cluster.pk)
        rules = RuleSet(cluster.name, resolver, _queues(cluster.pk), {})
        book = EpisodeBook(cluster, start, live=live)
        highest = resolver.highest_idle_threshold()
        chunks = read_chunks(
            cluster.pk,
            start,
            end,
            rules.holders,
            highest,
            # Read before the chunk is yielded: the rules below make no queries while the
            # database groups the next chunk.
            prepare=lambda chunk: _add_workloads(cluster.pk, rules.workloads, chunk.workload_ids()),
        )
        # Closed here, not when collected: the next chunk's grouping ends before the
        # transaction does, whatever happens below.
        with closing(chunks):
            for chunk in chunks:
                rules.split(chunk, highest)
                findings = [
                    rules.detect(window, position) for position, window in enumerate(chunk.windows)
                ]
                book.apply(chunk.windows, findings, rules.runs)
                result.windows += len(chunk.windows)
        book.finish()
        _add_workloads(cluster.pk, rules.workloads, book.workload_ids())
        result.created, result.updated, result.deleted = book.save(now, rules.workloads)
    if result.created or result.updated or result.deleted:
        logger.info(
            "cluster %s: evaluated %d windows in (%s, %s]: %d episodes created, %d updated, "
            "%d pending ones dropped",
            cluster.name,
            result.windows,
            start.isoformat(),
            end.isoformat(),
            result.created,
            result.updated,
            result.deleted,
        )
    return result


# --- queues and workloads -------------------------------------------------------------------


def _queues(cluster_id: int) -> dict[int, QueueInfo]:
    return {
        pk: QueueInfo(name, team_id, cohort_id)
        for pk, name, team_id, cohort_id in ClusterQueue.objects.filter(cluster_id=cluster_id)
        .order_by()
        .values_list("pk", "name", "team_id", "cohort_id")
    }


WORKLOAD_FIELDS = (
    "pk",
    "namespace",
    "name",
    "cluster_queue_id",
    "local_queue_id",
    "labels",
    "priority_class_name",
    "owner_kind",
    "admitted_gpus",
    "requested_gpus",
    "flavors",
    "scheduler",
)


def _add_workloads(cluster_id: int, known: dict[int, WorkloadInfo], ids: set[int]) -> None:
    """Read the workloads of ``ids`` not in ``known`` yet into it."""
    missing = ids - known.keys()
    if not missing:
        return
    rows = [
        row
        for queryset in filter_in(
            Workload.objects.filter(cluster_id=cluster_id).order_by(),
            "pk",
            sorted(missing),
            LOOKUP_BATCH_SIZE,
        )
        for row in fetch_rows(queryset, *WORKLOAD_FIELDS)
    ]
    for (
        pk,
        namespace,
        name,
        cluster_queue_id,
        local_queue_id,
        labels,
        priority_class_name,
        owner_kind,
        admitted_gpus,
        requested_gpus,
        flavors,
        scheduler,
    ) in rows:
        flavors = flavors if isinstance(flavors, dict) else {}
        known[pk] = WorkloadInfo(
            id=pk,
            namespace=namespace,
            name=name,
            cluster_queue_id=cluster_queue_id,
            local_queue_id=local_queue_id,
            labels=labels if isinstance(labels, dict) else {},
            priority_class=priority_class_name,
            owner_kind=owner_kind,
            gpus=admitted_gpus or requested_gpus or 0.0,
            flavor=str(flavors.get(GPU_RESOURCE) or next(iter(flavors.values()), "")),
            scheduler=scheduler or "kueue",
        )
