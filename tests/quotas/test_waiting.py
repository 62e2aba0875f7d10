"""Waiting intervals of a Workload from its creation and condition history (quotas.waiting)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from quotas.choices import TransitionKind as K
from quotas.choices import WorkloadState as S
from quotas.waiting import overlap_seconds, waiting_intervals

T0 = datetime(2026, 8, 22, 6, tzinfo=UTC)
MIN = timedelta(minutes=1)


def at(minutes: int) -> datetime:
    return T0 + minutes * MIN


def test_a_workload_admitted_once_waited_from_creation_to_its_reservation():
    intervals = waiting_intervals(
        at(0), [(K.QUOTA_RESERVED, at(10)), (K.ADMITTED, at(10))], state=S.ADMITTED
    )
    assert intervals == [(at(0), at(10))]


def test_a_workload_still_pending_waits_with_no_end():
    assert waiting_intervals(at(5), [], state=S.PENDING) == [(at(5), None)]


def test_evicted_waited_and_readmitted_with_the_whole_history_seen():
    history = [
        (K.QUOTA_RESERVED, at(10)),
        (K.EVICTED, at(70)),
        (K.PREEMPTED, at(70)),
        (K.REQUEUED, at(70)),
        (K.QUOTA_RESERVED, at(100)),
    ]
    intervals = waiting_intervals(at(0), history, state=S.ADMITTED, accumulated_seconds=3600)
    assert intervals == [(at(0), at(10)), (at(70), at(100))]


def test_a_first_admission_before_our_history_is_placed_by_the_accumulated_time():
    # given: the first sync came after the re-admission; Kueue only kept Requeued=True (the
    # requeue right after the preemption at 70) and QuotaReserved=True (the re-admission).
    history = [(K.REQUEUED, at(70)), (K.QUOTA_RESERVED, at(100)), (K.ADMITTED, at(100))]

    intervals = waiting_intervals(at(0), history, state=S.ADMITTED, accumulated_seconds=3600)

    # then: admitted 60 minutes before the eviction, i.e. from 10 to 70
    assert intervals == [(at(0), at(10)), (at(70), at(100))]


def test_an_evicted_workload_pending_now_waits_since_its_eviction():
    history = [(K.EVICTED, at(70)), (K.PREEMPTED, at(70)), (K.REQUEUED, at(70))]
    intervals = waiting_intervals(at(0), history, state=S.PREEMPTED, accumulated_seconds=1800)
    assert intervals == [(at(0), at(40)), (at(70), None)]


def test_finished_deleted_and_deactivated_end_a_wait():
    assert waiting_intervals(at(0), [(K.FINISHED, at(5))], state=S.FAILED) == [(at(0), at(5))]
    assert waiting_intervals(at(0), [], state=S.PENDING, deleted_at=at(7)) == [(at(0), at(7))]
    deactivated = [(K.DEACTIVATED, at(9)), (K.REQUEUED, at(20))]
    assert waiting_intervals(at(0), deactivated, state=S.PENDING) == [
        (at(0), at(9)),
        (at(20), None),
    ]


def test_overlap_counts_the_part_inside_the_hour_and_runs_open_waits_to_its_end():
    intervals = [(at(-30), at(10)), (at(50), None)]
    assert overlap_seconds(intervals, at(0), at(60)) == (10 + 10) * 60
