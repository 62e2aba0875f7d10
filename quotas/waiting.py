"""When a Workload waited for quota: its waiting intervals, from its creation and the condition
history we keep (``WorkloadTransition``), so pending GPU-hours are right for any past hour.

Kueue keeps only the last transition of each condition, so a Workload that was admitted, evicted
and admitted again before the first sync shows ``QuotaReserved=True`` (the re-admission) and
``Requeued=True`` (the requeue after the eviction), while ``Evicted`` and ``Preempted`` went back
to False. What it also keeps is ``accumulatedPastExecutionTimeSeconds``: the time spent admitted
in the earlier admit-evict cycles. The rules, walking the transitions in time order from the
creation (waiting):

* ``quota_reserved`` / ``admitted`` end a wait; ``evicted`` / ``preempted`` start one;
  ``deactivated`` ends a wait (an inactive Workload does not wait) and ``requeued`` after it
  starts one again; ``finished`` and ``deleted`` end everything.
* An eviction, preemption or requeue that comes while the Workload already waits, with no
  eviction seen since the wait began, means an admission we never saw (it happened before our
  history starts): it is placed ``accumulatedPastExecutionTimeSeconds`` (less the admitted time
  we did see) before that eviction, so the total time waited is exact. Where Kueue requeued
  after a backoff the split point is the requeue, not the eviction: the hours the two waits land
  in may shift by the backoff, their sum does not.
* A wait still open has no end (None); the caller clips it at what it knows.

Pure: no database.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from quotas.choices import TransitionKind, WorkloadState

Interval = tuple[datetime, datetime | None]

_HOLD = frozenset({TransitionKind.QUOTA_RESERVED, TransitionKind.ADMITTED})
_RELEASE = frozenset({TransitionKind.EVICTED, TransitionKind.PREEMPTED})
_END = frozenset({TransitionKind.FINISHED, TransitionKind.DELETED})
# Several conditions of one event share a time; holds are read before releases at one instant.
_ORDER: dict[str, int] = {
    TransitionKind.CREATED: 0,
    TransitionKind.QUOTA_RESERVED: 1,
    TransitionKind.ADMITTED: 1,
    TransitionKind.PODS_READY: 2,
    TransitionKind.EVICTED: 3,
    TransitionKind.PREEMPTED: 3,
    TransitionKind.DEACTIVATED: 3,
    TransitionKind.REQUEUED: 4,
    TransitionKind.QUOTA_RELEASED: 3,
    TransitionKind.FINISHED: 5,
    TransitionKind.DELETED: 6,
}


def waiting_intervals(
    created: datetime | None,
    transitions: Iterable[tuple[str, datetime]],
    *,
    state: str,
    accumulated_seconds: int = 0,
    finished_at: datetime | None = None,
    deleted_at: datetime | None = None,
) -> list[Interval]:
    """The Workload's waiting intervals ``[start, end)``, oldest first (module docstring)."""
    events = sorted(transitions, key=lambda event: (event[1], _ORDER.get(event[0], 9)))
    if created is None:
        created = events[0][1] if events else None
    if created is None:
        return []
    intervals: list[Interval] = []
    status = "waiting"
    opened = created
    evicted_since_open = False
    held_since: datetime | None = None
    held_seconds = 0.0

    def close(at: datetime) -> None:
        if at > opened:
            intervals.append((opened, at))

    for kind, at in events:
        if at < created:
            at = created
        if kind in _END:
            if status == "waiting":
                close(at)
            status = "done"
            break
        if kind in _HOLD:
            if status == "waiting":
                close(at)
                status, held_since = "holding", at
            continue
        if kind == TransitionKind.DEACTIVATED:
            if status == "waiting":
                close(at)
            elif status == "holding" and held_since is not None:
                held_seconds += (at - held_since).total_seconds()
            status = "inactive"
            continue
        if kind in _RELEASE or kind == TransitionKind.REQUEUED:
            if status == "holding":
                if held_since is not None:
                    held_seconds += (at - held_since).total_seconds()
                status, opened, evicted_since_open = "waiting", at, True
            elif status == "inactive" and kind == TransitionKind.REQUEUED:
                status, opened, evicted_since_open = "waiting", at, True
            elif status == "waiting" and not evicted_since_open:
                # An admission before our history: it ended here and lasted what is left of the
                # accumulated execution time.
                unseen = max(0.0, accumulated_seconds - held_seconds)
                admitted = max(opened, at - timedelta(seconds=unseen))
                close(admitted)
                held_seconds += (at - admitted).total_seconds()
                opened, evicted_since_open = at, True
    if status == "waiting":
        ends = [moment for moment in (finished_at, deleted_at) if moment is not None]
        if ends:
            close(min(ends))
        elif state == WorkloadState.INACTIVE:
            # Deactivated at a time no transition recorded: the last wait is not counted.
            pass
        else:
            intervals.append((opened, None))
    return intervals


def overlap_seconds(intervals: Iterable[Interval], start: datetime, end: datetime) -> float:
    """Seconds of ``[start, end)`` inside the intervals; an open interval runs to ``end``."""
    total = 0.0
    for first, last in intervals:
        lo = max(first, start)
        hi = end if last is None else min(last, end)
        if hi > lo:
            total += (hi - lo).total_seconds()
    return total
