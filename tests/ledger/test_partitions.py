"""Compact usage storage: holdings and facts behind the view, daily partitions on PostgreSQL,
retention by dropping days (ledger.models.usage, ledger.partitions, ledger.rollup.prune)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection

from ledger import partitions
from ledger.models import GpuUsage, RollupHour, UsageFact, UsageHolding, UsageWindow
from ledger.rollup import prune_usage, roll_up_hour
from ledger.tasks import create_usage_partitions

DAY = datetime(2026, 6, 15, tzinfo=UTC)
MINUTE = timedelta(minutes=1)

postgres_only = pytest.mark.postgresql(reason="partitions are PostgreSQL's")


@pytest.fixture
def cluster(db):
    from fleet.models import Cluster

    return Cluster.objects.create(name="test")


def write(cluster, end: datetime, pods: int = 2, **figures: object) -> None:
    values = {
        "gpus": 1.0,
        "capacity_gpus": 1.0,
        "activity": 0.5,
        "activity_source": "sm_active",
        "sm_active": 0.5,
        **figures,
    }
    GpuUsage.objects.bulk_create(
        GpuUsage(
            cluster=cluster,
            window_start=end - MINUTE,
            window_end=end,
            gpu_key=f"node-1/GPU-{index}/",
            namespace="team-a",
            pod=f"pod-{index}",
            node_name="node-1",
            allocated=True,
            **values,
        )
        for index in range(pods)
    )


def test_a_holding_is_written_once_and_its_windows_widen_it(cluster):
    for minute in (3, 1, 2):
        write(cluster, DAY + minute * MINUTE)

    assert UsageHolding.objects.count() == 2
    assert UsageFact.objects.count() == 6
    holding = UsageHolding.objects.get(pod="pod-0")
    # Bounds to the hour: its windows end in (00:00, 01:00].
    assert (holding.first_window_end, holding.last_window_end) == (DAY, DAY + 60 * MINUTE)
    assert GpuUsage.objects.filter(pod="pod-0").count() == 3
    assert list(UsageWindow.objects.order_by("window_end").values_list("rows", flat=True)) == [
        2,
        2,
        2,
    ]


def test_a_holding_bound_moves_once_an_hour(cluster):
    write(cluster, DAY + 2 * 60 * MINUTE)  # ends 02:00: the hour 01:00
    write(cluster, DAY + 30 * MINUTE)
    write(cluster, DAY + 2 * 60 * MINUTE + MINUTE)

    holding = UsageHolding.objects.get(pod="pod-0")
    assert (holding.first_window_end, holding.last_window_end) == (DAY, DAY + 180 * MINUTE)


def test_a_window_with_two_rows_of_one_holding_is_refused(cluster):
    with pytest.raises(ValueError, match="two usage rows of one holding"):
        GpuUsage.objects.bulk_create(
            [
                GpuUsage(
                    cluster=cluster,
                    window_start=DAY,
                    window_end=DAY + MINUTE,
                    gpu_key="node-1/GPU-0/",
                    allocated=False,
                    gpus=1.0,
                )
            ]
            * 2
        )


def test_a_pod_on_another_share_of_its_gpu_is_a_new_holding(cluster):
    write(cluster, DAY + MINUTE)
    write(cluster, DAY + 2 * MINUTE, gpus=0.5, shared=True)

    assert UsageHolding.objects.filter(pod="pod-0").count() == 2
    assert sorted(GpuUsage.objects.filter(pod="pod-0").values_list("gpus", flat=True)) == [
        0.5,
        1.0,
    ]


def test_the_view_gives_back_what_was_written(cluster):
    # 0.01 in single precision is 0.009999999776: it would fall below the idle threshold.
    write(
        cluster,
        DAY + MINUTE,
        pods=1,
        activity=0.01,
        sm_active=0.01,
        pipe_tensor_active=0.3,
        gpu_util=33.3,
        dram_active=0.25,
        fb_used_mib=40960.0,
        samples=4,
        expected_samples=4,
    )
    write(
        cluster,
        DAY + 2 * MINUTE,
        pods=1,
        activity=0.2,
        activity_source="gr_engine_active",
        sm_active=None,
        gr_engine_active=0.2,
    )
    write(cluster, DAY + 3 * MINUTE, pods=1, activity=None, activity_source="none", sm_active=None)

    first, second, third = GpuUsage.objects.order_by("window_end")
    assert (first.activity, first.sm_active, first.activity_source) == (0.01, 0.01, "sm_active")
    assert (first.pipe_tensor_active, first.gpu_util) == (0.3, 33.3)
    # Only shown, single precision: within 6e-8 of the value.
    assert first.dram_active == pytest.approx(0.25, rel=6e-8)
    assert first.fb_used_mib == 40960.0
    assert (first.samples, first.expected_samples) == (4, 4)
    assert first.window_start == DAY
    assert (second.activity, second.gr_engine_active, second.sm_active) == (0.2, 0.2, None)
    assert second.activity_source == "gr_engine_active"
    assert (third.activity, third.activity_source) == (None, "none")
    assert GpuUsage.objects.idle(0.011).count() == 1


def test_deleting_rows_of_the_view_deletes_their_facts(cluster):
    write(cluster, DAY + MINUTE)
    write(cluster, DAY + 2 * MINUTE)

    deleted, _ = GpuUsage.objects.filter(window_end=DAY + MINUTE, pod="pod-1").delete()

    assert deleted == 1
    assert UsageFact.objects.count() == 3
    assert UsageWindow.objects.count() == 2
    GpuUsage.objects.filter(window_end=DAY + MINUTE).delete()
    assert list(UsageWindow.objects.values_list("window_end", flat=True)) == [DAY + 2 * MINUTE]


@pytest.mark.skipif(connection.vendor == "postgresql", reason="SQLite's path")
def test_sqlite_prunes_usage_with_a_delete_at_the_exact_cutoff(cluster):
    for minute in (1, 2, 30):
        write(cluster, DAY + minute * MINUTE)

    assert prune_usage(DAY + 10 * MINUTE) == 4

    assert set(GpuUsage.objects.values_list("window_end", flat=True)) == {DAY + 30 * MINUTE}
    assert RollupHour.objects.get(cluster=cluster, hour=DAY).usage_pruned


def days_around_day() -> list[date]:
    """The partitions of the month these tests write in: tests of other modules that commit
    (live-server and transactional ones) leave their own days behind in the test database."""
    return [day for day in partitions.existing_days() if abs((day - DAY.date()).days) < 30]


@postgres_only
def test_the_writer_creates_a_missing_day_and_the_fact_lands_in_it(cluster):
    assert date(2026, 6, 15) not in partitions.existing_days()

    write(cluster, DAY + MINUTE)
    write(cluster, DAY + timedelta(hours=23, minutes=59))
    # Partitioned on window_end: the window ending at midnight is the next day's.
    write(cluster, DAY + timedelta(days=1))

    assert days_around_day() == [date(2026, 6, 15), date(2026, 6, 16)]
    with connection.cursor() as cursor:
        for day, rows in ((date(2026, 6, 15), 4), (date(2026, 6, 16), 2)):
            cursor.execute(f"SELECT COUNT(*) FROM {partitions.partition_name(day)}")
            assert cursor.fetchone()[0] == rows


@postgres_only
def test_the_beat_task_creates_today_and_the_days_ahead(cluster):
    import time_machine

    with time_machine.travel(DAY + timedelta(hours=23), tick=False):
        created = create_usage_partitions()
        again = create_usage_partitions()

    days = [(DAY + timedelta(days=offset)).date() for offset in range(4)]
    assert created == [day.isoformat() for day in days]
    assert again == []
    assert days_around_day() == days


@postgres_only
def test_retention_drops_whole_days_and_flags_their_hours(cluster):
    yesterday = DAY - timedelta(days=1)
    write(cluster, yesterday + 10 * 60 * MINUTE)
    write(cluster, yesterday + 23 * 60 * MINUTE)
    write(cluster, DAY + 10 * MINUTE)
    write(cluster, DAY + 5 * 60 * MINUTE, pods=1)
    roll_up_hour(cluster.pk, DAY)

    # Mid-day cutoff: yesterday goes whole, today stays whole until it is wholly past.
    removed = prune_usage(DAY + 12 * 60 * MINUTE)

    assert removed == 4
    assert partitions.existing_days() == [DAY.date()]
    assert sorted(set(GpuUsage.objects.values_list("window_end", flat=True))) == [
        DAY + 10 * MINUTE,
        DAY + 5 * 60 * MINUTE,
    ]
    flagged = RollupHour.objects.filter(cluster=cluster, usage_pruned=True)
    assert flagged.filter(hour=yesterday + timedelta(hours=9)).exists()
    assert flagged.filter(hour=yesterday + timedelta(hours=22)).exists()
    assert not flagged.filter(hour__gte=DAY).exists()
    assert UsageWindow.objects.filter(window_end__lt=DAY).count() == 0
    # No holding lost: each still has a fact today.
    assert UsageHolding.objects.count() == 2
