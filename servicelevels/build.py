"""Admission records from what the Kueue sync stores: Workloads, their transitions and pods.

One record per admission attempt of a Workload (docs/architecture.md, "Queue service levels"),
derived from the Workload's stored transitions in time order:

* attempt 1 is queued at the Workload's creation; a ``requeued`` transition before the attempt
  reserves quota moves its ``queued_at`` to that time (Kueue's own wait: "created or requeued
  until admission", the Requeued condition's lastTransitionTime);
* ``quota_reserved`` / ``admitted`` set the attempt's times (the first occurrence wins);
* ``preempted`` / ``evicted`` end the attempt (``evicted_at``, the Evicted reason, the Preempted
  reason and the preemptor). An eviction requeues at once, so the next attempt is opened, queued
  at the eviction, and moved to a later ``requeued`` (the end of a backoff) if one follows;
* ``deactivated`` ends the attempt and opens none: a deactivated Workload waits for nothing
  until a ``requeued`` (Reactivated) opens the next attempt;
* ``finished`` / ``deleted`` end the attempt (``finished_at``): it no longer waits;
* ``running_at`` is the first of the Workload's pods (allocations) Running from the attempt's
  admission until it ended.

On the first build of a Workload from a LIST (``source=conditions``), earlier evictions that
``status.schedulingStats.evictions`` counts but whose times the conditions no longer show only
number the attempts: the first record seen gets attempt ``1 + unseen evictions``. Records for
those earlier attempts are never invented, and an attempt whose queued time is unknown (a
requeue the conditions no longer show) is skipped and logged. Unknown eviction or preemption
reasons are stored as ``Other`` and logged.

Idempotent: records are keyed (cluster, workload UID, attempt); a rebuild writes only fields that
changed, so a re-run or a re-list writes nothing. Records are history and are never deleted.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from core import bulk
from fleet.models import Cluster
from quotas import constants as qc
from quotas.choices import TransitionKind
from quotas.models import Allocation, Workload, WorkloadTransition
from servicelevels.choices import EvictionReason, PreemptionReason, RecordSource
from servicelevels.models import AdmissionRecord

logger = logging.getLogger(__name__)

# Same-instant transitions apply in this order: an eviction closes the attempt before the
# requeue that comes with it opens the next one.
_ORDER: dict[str, int] = {
    TransitionKind.CREATED: 0,
    TransitionKind.QUOTA_RESERVED: 1,
    TransitionKind.ADMITTED: 2,
    TransitionKind.PODS_READY: 3,
    TransitionKind.PREEMPTED: 4,
    TransitionKind.EVICTED: 5,
    TransitionKind.DEACTIVATED: 6,
    TransitionKind.REQUEUED: 7,
    TransitionKind.FINISHED: 8,
    TransitionKind.DELETED: 9,
}
_EVICTION_REASONS = frozenset(EvictionReason.values)
_PREEMPTION_REASONS = frozenset(PreemptionReason.values)


@dataclass
class Step:
    """One stored transition, as the derivation reads it."""

    kind: str
    at: datetime
    reason: str = ""
    preemptor_id: int | None = None
    preemptor_path: str = ""
    preemptor_queue: str = ""


@dataclass
class Attempt:
    """One admission attempt's times, before it becomes a record."""

    number: int
    queued_at: datetime
    queued_known: bool = True
    quota_reserved_at: datetime | None = None
    admitted_at: datetime | None = None
    running_at: datetime | None = None
    evicted_at: datetime | None = None
    eviction_reason: str = ""
    preemption_reason: str = ""
    preempted_by_id: int | None = None
    preempted_by_path: str = ""
    preempting_cluster_queue_name: str = ""
    finished_at: datetime | None = None
    deactivated: bool = False

    @property
    def ended(self) -> bool:
        return self.evicted_at is not None or self.finished_at is not None


@dataclass
class BuildResult:
    created: int = 0
    updated: int = 0
    skipped: int = 0
    skip_reasons: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped += 1
        self.skip_reasons[reason] = self.skip_reasons.get(reason, 0) + 1


def _eviction_reason(reason: str, result: BuildResult, what: str) -> str:
    if reason in _EVICTION_REASONS:
        return reason
    if reason.startswith("DeactivatedDueTo"):
        return EvictionReason.DEACTIVATED
    logger.warning("admission records: %s has unknown eviction reason %r (Other)", what, reason)
    result.skip("unknown_eviction_reason")
    return EvictionReason.OTHER


def _preemption_reason(reason: str, result: BuildResult, what: str) -> str:
    if reason in _PREEMPTION_REASONS:
        return reason
    logger.warning("admission records: %s has unknown preemption reason %r (Other)", what, reason)
    result.skip("unknown_preemption_reason")
    return PreemptionReason.OTHER


def derive_attempts(
    created_at: datetime | None,
    steps: Iterable[Step],
    pod_runs: Iterable[tuple[datetime, datetime | None]] = (),
    *,
    first: int = 1,
    result: BuildResult | None = None,
    what: str = "workload",
) -> list[Attempt]:
    """The attempts a Workload's transitions describe (pure; see the module docstring).

    ``first`` numbers the first attempt; above 1 (earlier evictions known only by their count)
    its queued time is known only from a ``requeued`` step, else the attempt is skipped.
    ``pod_runs``: (started, ended) of the Workload's pods, for ``running_at``.
    """
    result = result if result is not None else BuildResult()
    ordered = sorted(steps, key=lambda s: (s.at, _ORDER.get(s.kind, 99)))
    if created_at is None:
        created_at = ordered[0].at if ordered else None
    if created_at is None:
        return []
    attempts = [Attempt(number=first, queued_at=created_at, queued_known=first == 1)]
    waiting_reactivation = False
    for step in ordered:
        current = attempts[-1]
        kind = step.kind
        if kind in (TransitionKind.QUOTA_RESERVED, TransitionKind.ADMITTED):
            if waiting_reactivation:
                waiting_reactivation = False
                current = _open_next(attempts, step.at)
            name = "quota_reserved_at" if kind == TransitionKind.QUOTA_RESERVED else "admitted_at"
            if current.ended:
                continue
            if getattr(current, name) is None:
                setattr(current, name, step.at)
        elif kind == TransitionKind.PREEMPTED:
            target = current if not current.ended or current.evicted_at == step.at else None
            if target is None and len(attempts) > 1 and attempts[-2].evicted_at == step.at:
                target = attempts[-2]
            if target is None:
                target = current
            target.preemption_reason = _preemption_reason(step.reason, result, what)
            target.preempted_by_id = step.preemptor_id
            target.preempted_by_path = step.preemptor_path
            target.preempting_cluster_queue_name = step.preemptor_queue
            if target.evicted_at is None:
                target.evicted_at = step.at
                target.eviction_reason = EvictionReason.PREEMPTED
                _open_next(attempts, step.at)
        elif kind in (TransitionKind.EVICTED, TransitionKind.DEACTIVATED):
            deactivated = kind == TransitionKind.DEACTIVATED or step.reason.startswith(
                "DeactivatedDueTo"
            )
            prev = attempts[-2] if len(attempts) > 1 else None
            if prev is not None and prev.evicted_at == step.at and current.queued_at == step.at:
                # The eviction the Preempted step of this instant recorded already.
                if deactivated:
                    prev.deactivated = True
                    attempts.pop()
                    waiting_reactivation = True
                continue
            if current.ended:
                continue
            current.evicted_at = step.at
            current.eviction_reason = _eviction_reason(step.reason, result, what)
            current.deactivated = deactivated
            if deactivated:
                waiting_reactivation = True
            else:
                _open_next(attempts, step.at)
        elif kind == TransitionKind.REQUEUED:
            if waiting_reactivation:
                waiting_reactivation = False
                _open_next(attempts, step.at)
            elif current.quota_reserved_at is None and current.admitted_at is None:
                if not current.ended and step.at >= current.queued_at:
                    current.queued_at = step.at
                    current.queued_known = True
        elif kind in (TransitionKind.FINISHED, TransitionKind.DELETED):
            if not current.ended:
                current.finished_at = step.at
    _running(attempts, list(pod_runs))
    kept = []
    for attempt in attempts:
        if not attempt.queued_known:
            logger.info(
                "admission records: %s attempt %d skipped: its requeue time is unknown",
                what,
                attempt.number,
            )
            result.skip("queued_time_unknown")
            continue
        kept.append(attempt)
    return kept


def _open_next(attempts: list[Attempt], at: datetime) -> Attempt:
    nxt = Attempt(number=attempts[-1].number + 1, queued_at=at)
    attempts.append(nxt)
    return nxt


def _running(attempts: list[Attempt], pod_runs: list[tuple[datetime, datetime | None]]) -> None:
    """``running_at``: the first pod Running from the attempt's admission until it ended."""
    for index, attempt in enumerate(attempts):
        admitted = attempt.admitted_at or attempt.quota_reserved_at
        if admitted is None:
            continue
        end = attempt.evicted_at or attempt.finished_at
        after = attempts[index - 1].evicted_at if index > 0 else None
        starts = [
            max(started, admitted)
            for started, ended in pod_runs
            if (end is None or started < end)
            and (ended is None or ended > admitted)
            and (after is None or started >= after)
        ]
        if starts:
            attempt.running_at = min(starts)


# --- the database -------------------------------------------------------------------------------

_WORKLOAD_FIELDS = (
    "id",
    "uid",
    "namespace",
    "name",
    "observed_at",
    "cluster_queue_id",
    "cluster_queue__name",
    "cluster_queue__cohort_name",
    "cluster_queue__team_id",
    "local_queue_id",
    "local_queue__name",
    "queue_name",
    "priority",
    "priority_class_name",
    "requested_gpus",
)


def build_records(
    cluster: Cluster,
    workload_ids: Iterable[int] | None = None,
    *,
    source: str = RecordSource.LIVE,
    evictions_total: Mapping[tuple[str, str], int] | None = None,
) -> BuildResult:
    """Create or refresh the records of ``workload_ids`` (None: every Workload of the cluster).

    ``source`` marks records created now (existing ones keep theirs); ``evictions_total``:
    (namespace, name) -> ``schedulingStats`` evictions, numbering the first attempts of a
    Workload seen for the first time.
    """
    result = BuildResult()
    workloads = Workload.objects.filter(cluster=cluster).exclude(uid="")
    if workload_ids is not None:
        ids = sorted(set(workload_ids))
        if not ids:
            return result
        rows = [
            row
            for query in bulk.filter_in(workloads, "id", ids, qc.LOOKUP_BATCH_SIZE)
            for row in query.values(*_WORKLOAD_FIELDS)
        ]
    else:
        rows = list(workloads.values(*_WORKLOAD_FIELDS))
    if not rows:
        return result
    for start in range(0, len(rows), qc.LOOKUP_BATCH_SIZE):
        _build_chunk(
            cluster, rows[start : start + qc.LOOKUP_BATCH_SIZE], source, evictions_total, result
        )
    if result.created or result.updated or result.skipped:
        logger.info(
            "admission records %s: created %d, updated %d, skipped %s",
            cluster.name,
            result.created,
            result.updated,
            result.skip_reasons or 0,
        )
    return result


def _build_chunk(
    cluster: Cluster,
    rows: list[dict[str, Any]],
    source: str,
    evictions_total: Mapping[tuple[str, str], int] | None,
    result: BuildResult,
) -> None:
    ids = [row["id"] for row in rows]
    steps: dict[int, list[Step]] = defaultdict(list)
    for t in WorkloadTransition.objects.filter(workload_id__in=ids).values(
        "workload_id",
        "kind",
        "at",
        "reason",
        "preemptor_id",
        "preemptor_path",
        "preemptor__namespace",
        "preemptor__name",
        "preemptor__cluster_queue__name",
    ):
        # Kueue's "preemptor path" is the preemptor's queue in the cohort tree (/cohort/queue).
        kueue_path = t["preemptor_path"] or ""
        path = f"{t['preemptor__namespace']}/{t['preemptor__name']}" if t["preemptor__name"] else ""
        queue = t["preemptor__cluster_queue__name"] or kueue_path.rstrip("/").rpartition("/")[2]
        steps[t["workload_id"]].append(
            Step(
                kind=t["kind"],
                at=t["at"],
                reason=t["reason"],
                preemptor_id=t["preemptor_id"],
                preemptor_path=path,
                preemptor_queue=queue,
            )
        )
    runs: dict[int, list[tuple[datetime, datetime | None]]] = defaultdict(list)
    for a in Allocation.objects.filter(workload_id__in=ids).values(
        "workload_id", "started_at", "ended_at"
    ):
        runs[a["workload_id"]].append((a["started_at"], a["ended_at"]))
    uids = [row["uid"] for row in rows]
    stored: dict[tuple[str, int], AdmissionRecord] = {
        (r.workload_uid, r.attempt): r
        for r in AdmissionRecord.objects.filter(cluster=cluster, workload_uid__in=uids)
    }
    first_stored: dict[str, int] = {}
    for uid, number in stored:
        first_stored[uid] = min(number, first_stored.get(uid, number))
    creates: list[AdmissionRecord] = []
    updates: list[AdmissionRecord] = []
    changed_fields: set[str] = set()
    for row in rows:
        what = f"{row['namespace']}/{row['name']}"
        try:
            attempts = _attempts_of(row, steps[row["id"]], runs[row["id"]], first_stored,
                                    evictions_total, result, what)  # fmt: skip
        except (TypeError, ValueError, AttributeError) as exc:  # never fail the sync
            logger.warning("admission records: %s skipped: %s", what, exc)
            result.skip("malformed")
            continue
        for attempt in attempts:
            values = _values(row, attempt)
            record = stored.get((row["uid"], attempt.number))
            if record is None:
                creates.append(
                    AdmissionRecord(
                        cluster=cluster,
                        workload_uid=row["uid"],
                        attempt=attempt.number,
                        source=source,
                        **values,
                    )
                )
                continue
            diff = [name for name, value in values.items() if getattr(record, name) != value]
            if diff:
                for name in diff:
                    setattr(record, name, values[name])
                changed_fields.update(diff)
                updates.append(record)
    with transaction.atomic():
        if creates:
            AdmissionRecord.objects.bulk_create(
                creates, batch_size=qc.WRITE_BATCH_SIZE, ignore_conflicts=True
            )
        if updates:
            AdmissionRecord.objects.bulk_update(
                updates, sorted(changed_fields | {"updated_at"}), batch_size=qc.WRITE_BATCH_SIZE
            )
    result.created += len(creates)
    result.updated += len(updates)


def _attempts_of(
    row: dict[str, Any],
    steps: list[Step],
    runs: list[tuple[datetime, datetime | None]],
    first_stored: dict[str, int],
    evictions_total: Mapping[tuple[str, str], int] | None,
    result: BuildResult,
    what: str,
) -> list[Attempt]:
    first = first_stored.get(row["uid"])
    if first is None:
        total = (evictions_total or {}).get((row["namespace"], row["name"]), 0)
        seen = sum(
            1 for s in steps if s.kind in (TransitionKind.EVICTED, TransitionKind.DEACTIVATED)
        )
        first = 1 + max(0, total - seen)
    return derive_attempts(row["observed_at"], steps, runs, first=first, result=result, what=what)


def _values(row: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
    return {
        "workload_id": row["id"],
        "namespace": row["namespace"],
        "workload_name": row["name"],
        "cluster_queue_id": row["cluster_queue_id"],
        "cluster_queue_name": row["cluster_queue__name"] or "",
        "local_queue_id": row["local_queue_id"],
        "local_queue_name": row["local_queue__name"] or row["queue_name"] or "",
        "team_id": row["cluster_queue__team_id"],
        "cohort_name": row["cluster_queue__cohort_name"] or "",
        "priority_class_name": row["priority_class_name"] or "",
        "priority": row["priority"],
        "gpus": float(row["requested_gpus"] or 0.0),
        "queued_at": attempt.queued_at,
        "quota_reserved_at": attempt.quota_reserved_at,
        "admitted_at": attempt.admitted_at,
        "running_at": attempt.running_at,
        "evicted_at": attempt.evicted_at,
        "eviction_reason": attempt.eviction_reason,
        "preemption_reason": attempt.preemption_reason,
        "preempted_by_id": attempt.preempted_by_id,
        "preempted_by_path": attempt.preempted_by_path,
        "preempting_cluster_queue_name": attempt.preempting_cluster_queue_name,
        "finished_at": attempt.finished_at,
    }


def refresh_after_write(
    cluster: Cluster,
    workload_ids: Iterable[int],
    *,
    source: str,
    evictions_total: Mapping[tuple[str, str], int] | None = None,
) -> None:
    """The sync's hook: build the records of the Workloads it wrote, once the write committed.

    A failure is logged, never raised: the sync's own write is already committed.
    """
    ids = sorted(set(workload_ids))
    if not ids:
        return
    totals = dict(evictions_total or {})

    def run() -> None:
        try:
            build_records(cluster, ids, source=source, evictions_total=totals)
        except Exception:  # the records can be rebuilt; the sync must go on
            logger.exception("admission records for cluster %s not built", cluster.name)

    transaction.on_commit(run)


def on_workloads_written(
    sender: object,
    *,
    cluster: Cluster,
    workload_ids: Iterable[int],
    listed: bool,
    evictions_total: Mapping[tuple[str, str], int] | None = None,
    **kwargs: object,
) -> None:
    """``quotas.store.signals.workloads_written``: records created from a LIST are rebuilt from
    the Workloads' conditions (``conditions``); from WATCH events they were seen live."""
    source = RecordSource.CONDITIONS if listed else RecordSource.LIVE
    refresh_after_write(cluster, workload_ids, source=source, evictions_total=evictions_total)


__all__ = [
    "Attempt",
    "BuildResult",
    "Step",
    "build_records",
    "derive_attempts",
    "on_workloads_written",
    "refresh_after_write",
]
