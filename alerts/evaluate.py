"""Evaluate the hoarding rules over stored windows and keep the episodes (DESIGN "Hoarding").

``evaluate_range`` walks the cluster's stored windows ending in ``(start, end]`` oldest first,
asks ``alerts.rules`` what held in each, and moves the episodes on: a condition that starts
opens a (pending) episode at the window's start, one that holds extends it, fires it once it
held for the rule's duration and escalates it in place; the first window where it no longer
holds resolves it at that window's start. A pending episode that ends before it fires is
deleted: it was never an alert.

Re-evaluation is idempotent: every episode remembers the newest window it has seen
(``evaluated_until``) and a window it has seen is skipped, so running a range twice, or a
backfill over live history, leaves the same rows. The run holds the cluster's row lock, so two
evaluations of one cluster never interleave.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from alerts.episodes import EpisodeBook
from alerts.rules import (
    USAGE_FIELDS,
    QueueInfo,
    QueueSample,
    RuleSet,
    UsageRow,
    WorkloadInfo,
)
from alerts.thresholds import ThresholdResolver
from core.mig import GPU_RESOURCE
from fleet.models import Cluster
from ledger.models import GpuUsage
from quotas.choices import HOLDING_STATES, TransitionKind
from quotas.models import ClusterQueue, ClusterQueueSample, Workload, WorkloadTransition

logger = logging.getLogger(__name__)

# Transitions that end a quota hold.
HOLD_ENDS = (
    TransitionKind.QUOTA_RELEASED,
    TransitionKind.EVICTED,
    TransitionKind.PREEMPTED,
    TransitionKind.DEACTIVATED,
    TransitionKind.FINISHED,
    TransitionKind.DELETED,
)
# Evidence keeps at most this many GPUs per episode (a 64-GPU gang fits).
EVIDENCE_GPUS = 64

EPISODE_UPDATE_FIELDS = [
    "severity",
    "team",
    "cluster_queue",
    "local_queue",
    "namespace",
    "workload",
    "node",
    "gpu_uuids",
    "gpus",
    "fired_at",
    "escalated_at",
    "resolved_at",
    "held_seconds",
    "last_held_at",
    "evaluated_until",
    "idle_gpu_hours",
    "held_gpu_hours",
    "cost",
    "evidence",
    "summary",
    "exempt",
    "exempt_reason",
    "silenced_until",
    "updated_at",
]


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
    """Evaluate every stored window of the cluster ending in ``(start, end]``."""
    now = now or timezone.now()
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=cluster_id)
        result = EvaluationResult(cluster=cluster.name)
        resolver = ThresholdResolver(cluster.pk)
        rules = RuleSet(cluster.name, resolver, _queues(cluster.pk), _holders(cluster.pk, start))
        book = EpisodeBook(cluster, start, live=live)
        for window_start, window_end, rows, samples in _windows(cluster.pk, start, end):
            missing = {
                row.workload_id
                for row in rows
                if row.workload_id is not None and row.workload_id not in rules.workloads
            }
            if missing:
                rules.workloads.update(_workloads(cluster.pk, missing))
            findings = rules.detect(window_start, window_end, rows, samples)
            book.apply(window_start, window_end, findings)
            result.windows += 1
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


# --- reading stored data ---------------------------------------------------------------------


# Rows read per query when a range spans many windows: about 60 MB of tuples.
ROWS_PER_READ = 200_000


def _windows(
    cluster_id: int, start: datetime, end: datetime
) -> Iterator[tuple[datetime, datetime, list[UsageRow], list[QueueSample]]]:
    """Each stored window ending in (start, end], oldest first, with its rows and queue samples.

    One index seek finds the next stored window; then as many windows as ``ROWS_PER_READ``
    rows allow are read in one query (a backfill of a week is a few hundred reads, not ten
    thousand)."""
    usage = GpuUsage.objects.filter(cluster_id=cluster_id)
    cursor = start
    span: timedelta | None = None
    while True:
        first = (
            usage.filter(window_end__gt=cursor, window_end__lte=end)
            .order_by("window_end")
            .values_list("window_start", "window_end")
            .first()
        )
        if first is None:
            return
        if span is None:
            per_window = usage.filter(window_end=first[1]).count()
            span = (first[1] - first[0]) * max(1, ROWS_PER_READ // max(per_window, 1))
        upto = min(end, first[0] + span)
        windows: dict[datetime, tuple[datetime, list[UsageRow]]] = {}
        for values in (
            usage.filter(window_end__gte=first[1], window_end__lte=upto)
            .order_by()
            .values_list("window_start", "window_end", *USAGE_FIELDS)
        ):
            found = windows.get(values[1])
            if found is None:
                found = windows[values[1]] = (values[0], [])
            found[1].append(UsageRow(*values[2:]))
        samples = _samples(cluster_id, first[1], upto)
        for window_end in sorted(windows):
            window_start, rows = windows.pop(window_end)
            yield window_start, window_end, rows, samples.pop(window_end, [])
        cursor = upto


def _samples(cluster_id: int, first: datetime, last: datetime) -> dict[datetime, list[QueueSample]]:
    """The GPU quota samples of the windows ending in [first, last], by window end."""
    found: dict[datetime, list[QueueSample]] = defaultdict(list)
    for sampled_at, queue_id, flavor, borrowed, lent in (
        ClusterQueueSample.objects.filter(
            cluster_queue__cluster_id=cluster_id,
            sampled_at__gte=first,
            sampled_at__lte=last,
            resource=GPU_RESOURCE,
        )
        .order_by()
        .values_list("sampled_at", "cluster_queue_id", "flavor_name", "borrowed", "lent")
    ):
        found[sampled_at].append(QueueSample(queue_id, flavor, float(borrowed), float(lent)))
    return found


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
    "pod_sets",
    "flavors",
    "state",
    "quota_reserved_at",
    "admitted_at",
    "finished_at",
    "deleted_at",
)


def _holders(cluster_id: int, start: datetime) -> dict[int, WorkloadInfo]:
    """Workloads that may hold quota in or after ``start``: holding now, or with a hold that
    ended after it (an end transition, finish or deletion since)."""
    ended = set(
        WorkloadTransition.objects.filter(
            workload__cluster_id=cluster_id, kind__in=HOLD_ENDS, at__gt=start
        )
        .order_by()
        .values_list("workload_id", flat=True)
    )
    queryset = Workload.objects.filter(cluster_id=cluster_id).filter(
        Q(state__in=HOLDING_STATES, deleted_at__isnull=True)
        | Q(finished_at__gt=start)
        | Q(deleted_at__gt=start)
        | Q(pk__in=ended)
    )
    return _infos(queryset.filter(Q(admitted_gpus__gt=0) | Q(requested_gpus__gt=0)))


def _workloads(cluster_id: int, ids: set[int]) -> dict[int, WorkloadInfo]:
    return _infos(Workload.objects.filter(cluster_id=cluster_id, pk__in=ids))


def _infos(queryset: object) -> dict[int, WorkloadInfo]:
    infos: dict[int, WorkloadInfo] = {}
    not_holding: list[int] = []
    for values in queryset.order_by().values_list(*WORKLOAD_FIELDS):  # type: ignore[attr-defined]
        record = dict(zip(WORKLOAD_FIELDS, values, strict=True))
        pod_sets = record["pod_sets"] if isinstance(record["pod_sets"], list) else []
        pods = sum(
            int(pod_set.get("count") or 0)
            for pod_set in pod_sets
            if isinstance(pod_set, dict) and float(pod_set.get("gpus_per_pod") or 0) > 0
        )
        flavors = record["flavors"] if isinstance(record["flavors"], dict) else {}
        info = WorkloadInfo(
            id=record["pk"],
            namespace=record["namespace"],
            name=record["name"],
            cluster_queue_id=record["cluster_queue_id"],
            local_queue_id=record["local_queue_id"],
            labels=record["labels"] if isinstance(record["labels"], dict) else {},
            priority_class=record["priority_class_name"],
            owner_kind=record["owner_kind"],
            gpus=record["admitted_gpus"] or record["requested_gpus"] or 0.0,
            pods_expected=pods,
            flavor=str(flavors.get(GPU_RESOURCE) or next(iter(flavors.values()), "")),
            hold_start=record["quota_reserved_at"] or record["admitted_at"],
        )
        if record["state"] in HOLDING_STATES and record["deleted_at"] is None:
            info.hold_end = None
        else:
            info.hold_end = record["finished_at"] or record["deleted_at"] or info.hold_start
            not_holding.append(info.id)
        infos[info.id] = info
    if not_holding:
        ends: dict[int, list[datetime]] = defaultdict(list)
        for workload_id, at in (
            WorkloadTransition.objects.filter(workload_id__in=not_holding, kind__in=HOLD_ENDS)
            .order_by()
            .values_list("workload_id", "at")
        ):
            ends[workload_id].append(at)
        for workload_id, moments in ends.items():
            info = infos[workload_id]
            after = [at for at in moments if info.hold_start is not None and at > info.hold_start]
            if after:
                info.hold_end = min(after)
    return infos
