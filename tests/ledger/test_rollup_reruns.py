"""Hourly rollups of the hand-worked hour (``tests/ledger/rollup_scenario.py``) rolled up again,
late, per cluster, over ranges, and pruned."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from fleet.models import Cluster
from ledger import rollup
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup
from ledger.rollup import (
    UNATTRIBUTED,
    hours_touched,
    prune_rollups,
    prune_usage,
    roll_up_hour,
    roll_up_range,
)
from quotas.models import ClusterQueueSample
from tests.ledger.rollup_scenario import (
    H0,
    H1,
    H1_WINDOWS,
    H100,
    MINUTE,
    W,
    keys_of,
    rollup_row,
    snapshot,
    snapshot_hour,
    usage_row,
)


def test_rerunning_an_hour_changes_nothing(scenario):
    first = roll_up_hour(scenario.cluster.pk, H0)
    before = snapshot()

    again = roll_up_hour(scenario.cluster.pk, H0)

    assert again == first == HourlyRollup.objects.count()
    assert snapshot() == before


def test_a_late_window_re_rolls_its_hour_only(scenario):
    roll_up_range(scenario.cluster.pk, H0, H1 + MINUTE)
    hour_one = snapshot_hour(H1)
    late = H0 + 3 * MINUTE
    GpuUsage.objects.bulk_create(
        [usage_row(scenario.cluster, late, "n1/g0/", namespace="ns-a", pod="train-0", sm=0.2)]
    )

    for hour in hours_touched([late]):
        roll_up_hour(scenario.cluster.pk, hour)

    fleet = rollup_row(RollupScope.FLEET, "test", H100)
    assert fleet.allocated_gpu_hours == pytest.approx(16 * W + 1 * W)
    assert fleet.active_gpu_hours == pytest.approx(4.515 * W + 0.2 * W)
    assert fleet.windows == 4
    assert snapshot_hour(H1) == hour_one


def test_a_group_gone_from_usage_loses_its_row_on_re_roll(scenario):
    roll_up_hour(scenario.cluster.pk, H0)
    GpuUsage.objects.filter(namespace="ns-c").delete()

    roll_up_hour(scenario.cluster.pk, H0)

    assert ("ns-c", "h100") not in keys_of(RollupScope.NAMESPACE)
    assert (UNATTRIBUTED, "h100") not in keys_of(RollupScope.WORKLOAD)


def test_rolling_up_one_cluster_leaves_other_clusters_alone(scenario):
    other = Cluster.objects.create(name="other")
    GpuUsage.objects.bulk_create([usage_row(other, H0 + MINUTE, "x/g0/", namespace="ns-a")])
    roll_up_hour(other.pk, H0)
    theirs = list(HourlyRollup.objects.filter(cluster=other).values_list("pk", flat=True))

    roll_up_hour(scenario.cluster.pk, H0)

    assert list(HourlyRollup.objects.filter(cluster=other).values_list("pk", flat=True)) == theirs
    fleet = rollup_row(RollupScope.FLEET, "test", H100)
    assert fleet.allocated_gpu_hours == pytest.approx(16 * W)


def test_roll_up_range_covers_every_hour_touching_the_range(scenario):
    written = roll_up_range(scenario.cluster.pk, H0 + 30 * MINUTE, H1)
    assert set(HourlyRollup.objects.values_list("hour", flat=True)) == {H0}
    assert written == HourlyRollup.objects.count()

    written = roll_up_range(scenario.cluster.pk, H0, H1 + timedelta(seconds=1))

    assert set(HourlyRollup.objects.values_list("hour", flat=True)) == {H0, H1}
    assert written == HourlyRollup.objects.count()


@pytest.mark.skipif(
    connection.vendor == "postgresql",
    reason="PostgreSQL drops whole days of usage: tests/ledger/test_partitions.py",
)
def test_prune_usage_drops_old_usage_and_samples_in_batches_and_keeps_rollups(
    scenario, monkeypatch
):
    monkeypatch.setattr(rollup.prune, "PRUNE_BATCH_SIZE", 4)
    roll_up_range(scenario.cluster.pk, H0, H1 + MINUTE)
    rollups = snapshot()

    deleted = prune_usage(H1)

    # Usage ending before 13:00: 9 rows at 12:01, 9 at 12:02, 1 at 12:00.
    # Samples before 13:00: 1 at 12:00, 3 + cpu at 12:01, 3 at 12:02.
    assert deleted == (9 + 9 + 1) + (1 + 4 + 3)
    assert set(GpuUsage.objects.values_list("window_end", flat=True)) == {H1, *H1_WINDOWS}
    assert set(ClusterQueueSample.objects.values_list("sampled_at", flat=True)) == {
        H1,
        H1_WINDOWS[0],
    }
    assert snapshot() == rollups


def test_prune_rollups_drops_only_hours_before_the_cut(scenario, monkeypatch):
    monkeypatch.setattr(rollup.prune, "PRUNE_BATCH_SIZE", 3)
    roll_up_range(scenario.cluster.pk, H0, H1 + MINUTE)
    hour_one = snapshot_hour(H1)
    old = HourlyRollup.objects.filter(hour=H0).count()
    assert old > 0

    deleted = prune_rollups(H1)

    assert deleted == old
    assert snapshot() == hour_one
    assert GpuUsage.objects.filter(window_end__lte=H1).count() == 9 + 9 + 8 + 1


@pytest.mark.postgresql(reason="only the fast path changes planner settings")
def test_the_fast_path_gives_back_the_planner_settings_of_the_callers_transaction(scenario):
    def current() -> tuple[str, ...]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('work_mem'), current_setting('enable_sort')")
            return cursor.fetchone()

    before = current()

    roll_up_range(scenario.cluster.pk, H0, H1 + MINUTE)  # inside the test's transaction

    assert current() == before
