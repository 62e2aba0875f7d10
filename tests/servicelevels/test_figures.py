"""Queue service-level figures against waits and percentiles computed by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from servicelevels.figures import admissions_by_queue, levels, periods
from servicelevels.models import AdmissionRecord
from servicelevels.stats import nearest_rank

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def record(
    cluster, uid: str, *, queue: str = "batch", attempt: int = 1, **times
) -> AdmissionRecord:
    return AdmissionRecord.objects.create(
        cluster=cluster,
        workload_uid=uid,
        namespace="ml",
        workload_name=uid,
        attempt=attempt,
        cluster_queue_name=queue,
        local_queue_name="default",
        cohort_name="research",
        priority_class_name="normal",
        gpus=times.pop("gpus", 8.0),
        **times,
    )


def test_nearest_rank_is_the_value_at_rank_ceil_q_n():
    values = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
    assert nearest_rank(values, 0.5) == 50.0  # rank 5
    assert nearest_rank(values, 0.9) == 90.0  # rank 9
    assert nearest_rank(values, 0.95) == 100.0  # rank ceil(9.5) = 10
    assert nearest_rank([7.0], 0.5) == 7.0
    assert nearest_rank([], 0.5) is None
    with pytest.raises(ValueError):
        nearest_rank(values, 0.0)


def test_waits_percentiles_and_running_delay_over_admissions_in_the_period(cluster):
    # Waits of 1, 2, ..., 20 minutes, admitted during the first hour; running 30 s later for
    # the even ones only.
    for n in range(1, 21):
        admitted = T0 + minutes(2 * n)
        record(
            cluster,
            f"w{n}",
            queued_at=admitted - minutes(n),
            quota_reserved_at=admitted,
            admitted_at=admitted,
            running_at=admitted + timedelta(seconds=15 * n) if n % 2 == 0 else None,
        )
    (row,) = levels(T0, T0 + timedelta(hours=1))
    assert row.group == "batch" and row.cluster == "test"
    assert row.admissions == 20
    # Nearest rank on 20 values: p50 = rank 10, p90 = rank 18, p95 = rank 19.
    assert row.wait_seconds_p50 == 600.0
    assert row.wait_seconds_p90 == 18 * 60.0
    assert row.wait_seconds_p95 == 19 * 60.0
    assert row.wait_seconds_max == 20 * 60.0
    assert row.wait_seconds_mean == pytest.approx(10.5 * 60.0)
    # Running delays of the ten even ones: 30, 60, ..., 300 s. p50 = rank 5, p95 = rank 10.
    assert row.running_delay_seconds_p50 == 150.0
    assert row.running_delay_seconds_p95 == 300.0


def test_an_admission_at_the_period_end_counts_in_that_period_not_the_next(cluster):
    record(cluster, "edge", queued_at=T0, admitted_at=T0 + timedelta(hours=1))
    first, second = levels(T0, T0 + timedelta(hours=2), step="hour")
    assert (first.admissions, second.admissions) == (1, 0)
    assert first.period_end == second.period_start == T0 + timedelta(hours=1)


def test_pending_at_end_and_the_oldest_wait(cluster):
    end = T0 + timedelta(hours=4)
    record(cluster, "old", queued_at=T0 + minutes(10))
    record(cluster, "young", queued_at=T0 + timedelta(hours=3))
    record(cluster, "later", queued_at=end + minutes(1))  # not yet queued at the end
    record(cluster, "admitted", queued_at=T0, admitted_at=T0 + timedelta(hours=1))
    record(cluster, "gone", queued_at=T0, finished_at=T0 + timedelta(hours=2))  # deleted waiting
    (row,) = levels(T0, end)
    assert row.pending_at_end == 2
    assert row.oldest_pending_seconds == (end - (T0 + minutes(10))).total_seconds()


def test_evictions_preemptions_and_the_gpu_hours_of_preempted_runs(cluster):
    record(
        cluster,
        "p1",
        gpus=8.0,
        queued_at=T0,
        admitted_at=T0 + minutes(5),
        running_at=T0 + minutes(10),
        evicted_at=T0 + minutes(100),
        eviction_reason="Preempted",
        preemption_reason="InCohortReclamation",
        preempting_cluster_queue_name="prod",
    )
    record(
        cluster,
        "p2",
        gpus=2.0,
        queued_at=T0,
        admitted_at=T0 + minutes(5),
        evicted_at=T0 + minutes(30),  # preempted before its pods ran: no GPU time lost
        eviction_reason="Preempted",
        preemption_reason="InClusterQueue",
        preempting_cluster_queue_name="batch",
    )
    record(
        cluster,
        "t1",
        queued_at=T0,
        admitted_at=T0 + minutes(5),
        running_at=T0 + minutes(6),
        evicted_at=T0 + minutes(20),
        eviction_reason="PodsReadyTimeout",
    )
    (row,) = levels(T0, T0 + timedelta(hours=3))
    assert row.evictions == {"Preempted": 2, "PodsReadyTimeout": 1}
    assert row.preemptions == 2
    assert row.preemptions_by_reason == {"InCohortReclamation": 1, "InClusterQueue": 1}
    assert row.preemptions_by_queue == {"prod": 1, "batch": 1}
    assert row.preempted_gpu_hours == pytest.approx(8.0 * 90 / 60)


def test_groups_and_team_visibility(cluster):
    from quotas.models import Team

    vision = Team.objects.create(name="vision")
    speech = Team.objects.create(name="speech")
    a = record(cluster, "a", queue="batch", queued_at=T0, admitted_at=T0 + minutes(4))
    a.team = vision
    a.save()
    b = record(cluster, "b", queue="prod", queued_at=T0, admitted_at=T0 + minutes(8))
    b.team = speech
    b.save()
    by_team = {
        row.group: row.wait_seconds_max
        for row in levels(T0, T0 + timedelta(hours=1), group_by="team")
    }
    assert by_team == {"vision": 240.0, "speech": 480.0}
    seen = levels(T0, T0 + timedelta(hours=1), group_by="cluster_queue", teams=[vision.pk])
    assert [row.group for row in seen] == ["batch"]


def test_periods_clip_to_the_range_and_refuse_unknown_steps():
    start = T0 + timedelta(hours=22, minutes=30)
    spans = periods(start, start + timedelta(hours=26), "day")
    assert spans[0] == (start, T0 + timedelta(days=1))
    assert spans[-1][1] == start + timedelta(hours=26)
    assert len(spans) == 3  # 22:30-24:00, the next day, 00:00-00:30
    with pytest.raises(ValueError):
        periods(T0, T0 + timedelta(hours=1), "week")


def test_admissions_by_queue_is_the_levels_admissions_figure(cluster):
    for n in range(6):
        record(
            cluster,
            f"a{n}",
            queue="batch" if n % 3 else "serving",
            queued_at=T0 + minutes(10 * n),
            admitted_at=T0 + minutes(10 * n + 5),
        )
    record(cluster, "edge", queue="batch", queued_at=T0, admitted_at=T0)  # at the start: out
    record(cluster, "waiting", queue="batch", queued_at=T0)
    end = T0 + timedelta(hours=1)
    by_levels = {row.group: row.admissions for row in levels(T0, end)}
    assert admissions_by_queue(T0, end, cluster="test") == by_levels == {"batch": 4, "serving": 2}


def test_a_group_written_after_the_groups_were_listed_is_left_out_never_misnamed(
    cluster, monkeypatch
):
    from servicelevels import figures

    record(cluster, "b1", queue="batch", queued_at=T0, admitted_at=T0 + minutes(10))
    record(cluster, "s1", queue="serving", queued_at=T0, admitted_at=T0 + minutes(20))
    real_read, calls = figures._read, []

    def read_then_write(queryset):
        rows = real_read(queryset)
        calls.append(1)
        if len(calls) == 1:
            # The sync writes, between the group list and the records' read, a record of a new
            # group sorting first and one more of an existing group.
            record(cluster, "a1", queue="alpha", queued_at=T0, admitted_at=T0 + minutes(30))
            record(cluster, "b2", queue="batch", queued_at=T0, admitted_at=T0 + minutes(40))
        return rows

    monkeypatch.setattr(figures, "_read", read_then_write)
    rows = {row.group: row.wait_seconds_max for row in levels(T0, T0 + timedelta(hours=1))}
    # Each listed group has the figures of its own records, as read: the new group's record
    # counts nowhere until the next answer lists its group.
    assert rows == {"batch": 2400.0, "serving": 1200.0}
    monkeypatch.setattr(figures, "_read", real_read)
    again = {row.group: row.admissions for row in levels(T0, T0 + timedelta(hours=1))}
    assert again == {"alpha": 1, "batch": 2, "serving": 1}


def test_levels_of_one_cluster_queue_are_its_rows_of_all_queues(cluster):
    record(cluster, "b1", queue="batch", queued_at=T0, admitted_at=T0 + minutes(10))
    record(cluster, "s1", queue="serving", queued_at=T0, admitted_at=T0 + minutes(20))
    end = T0 + timedelta(hours=2)
    every = [row.as_dict() for row in levels(T0, end, step="hour") if row.group == "batch"]
    one = [row.as_dict() for row in levels(T0, end, step="hour", cluster_queue="batch")]
    assert one == every and len(one) == 2
