"""Complete days rewritten in (hour, holding) order: the same rows, another physical order, once,
and only days that are complete (``ledger.partition_order``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from ledger import partition_order, partitions
from ledger.models import GpuUsage
from ledger.rollup import prune_usage
from ledger.tasks import order_usage_partitions
from tests.ledger.test_partitions import write

DAY = datetime(2026, 7, 20, tzinfo=UTC)
postgres_only = pytest.mark.postgresql(reason="partitions are PostgreSQL's")
FIELDS = ("gpu_key", "pod", "window_end", "activity", "sm_active", "gpus")


def rows() -> list[tuple]:
    return sorted(GpuUsage.objects.values_list(*FIELDS))


def physical_order(day) -> list[tuple]:
    """(hour, holding, window end) of the partition's rows in the order they lie on disk."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT date_trunc('hour', window_end), holding_id, window_end "  # noqa: S608
            f"FROM {partitions.partition_name(day)} ORDER BY ctid"
        )
        return cursor.fetchall()


def write_day(cluster) -> None:
    # Window by window, as the collector writes: three pods' rows interleaved in each window,
    # over two hours of the day; the activity differs per window and pod.
    for minute in range(1, 121, 7):
        end = DAY + timedelta(minutes=minute)
        write(cluster, end, pods=3, activity=minute / 200, sm_active=minute / 200)


@postgres_only
def test_a_complete_day_is_rewritten_in_hour_then_holding_order_with_the_same_rows(cluster):
    write_day(cluster)
    before = rows()
    assert physical_order(DAY.date()) != sorted(physical_order(DAY.date()))

    assert partition_order.order_day(DAY.date()) is True

    assert rows() == before
    on_disk = physical_order(DAY.date())
    assert on_disk == sorted(on_disk) and len(on_disk) == len(before)
    assert DAY.date() in partition_order.ordered_days()
    with connection.cursor() as cursor:  # the parent's two indexes, attached, none built twice
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s",
            [partitions.partition_name(DAY.date())],
        )
        definitions = sorted(row[0].split(" USING ")[1] for row in cursor.fetchall())
    assert definitions == ["brin (window_end)", "btree (holding_id)"]
    assert DAY.date() in partitions.existing_days()
    # Once: a second run changes nothing; the day is still written to and pruned as before.
    assert partition_order.order_day(DAY.date()) is False
    write(cluster, DAY + timedelta(hours=5), pods=1)
    assert len(rows()) == len(before) + 1
    prune_usage(DAY + timedelta(days=1))
    assert DAY.date() not in partitions.existing_days()
    assert rows() == []


@postgres_only
def test_the_beat_task_orders_only_days_that_are_complete_and_settled(cluster):
    import time_machine

    write_day(cluster)
    with time_machine.travel(DAY + timedelta(days=1, hours=1), tick=False):
        # Ended an hour ago: late windows may come. (Other days' partitions, left by tests that
        # committed, may be ordered here: only this day is the subject.)
        assert DAY.date().isoformat() not in order_usage_partitions()
    with time_machine.travel(DAY + timedelta(days=1, hours=4), tick=False):
        ordered = order_usage_partitions()
        assert DAY.date().isoformat() in ordered
        assert order_usage_partitions() == []


@pytest.mark.skipif(connection.vendor == "postgresql", reason="SQLite's path")
def test_sqlite_has_no_partitions_to_order(cluster):
    write_day(cluster)
    before = rows()
    assert partition_order.order_day(DAY.date()) is False
    assert order_usage_partitions() == []
    assert rows() == before
