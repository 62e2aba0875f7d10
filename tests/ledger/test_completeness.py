"""An hour whose rollup failed is rolled up later; the sweep, settling, pruning (ledger.rollup)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import OperationalError, connection
from django.db.models import Sum

from fleet import constants as c
from fleet.choices import IngestSource
from fleet.models import Cluster, CollectionCursor
from ledger.choices import RollupScope
from ledger.collector import Collector
from ledger.models import GpuUsage, HourlyRollup, RollupHour
from ledger.rollup import completeness, hour, prune_usage, roll_up_hour, sweep
from ledger.rollup.verify import rebuild_hours, verify_hour
from ledger.tasks import roll_up_dirty_hours
from quotas.models import ClusterQueue, ClusterQueueSample
from tests.fleet.conftest import T0, WINDOW_SECONDS

H = datetime(2026, 6, 15, 10, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def write_window(cluster: Cluster, end: datetime, pods: int = 2) -> None:
    """A window of usage as the collector writes it: rows, then the hour's change counter."""
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
            gpus=1.0,
            capacity_gpus=1.0,
            activity=0.5,
            activity_source="sm_active",
        )
        for index in range(pods)
    )
    completeness.mark_changed(cluster.pk, end - timedelta(microseconds=1))


def fleet_allocated(cluster: Cluster, at: datetime = H) -> float | None:
    rows = HourlyRollup.objects.filter(cluster=cluster, scope=RollupScope.FLEET, hour=at)
    return rows.aggregate(total=Sum("allocated_gpu_hours"))["total"]


def state(cluster: Cluster, at: datetime = H) -> RollupHour:
    return RollupHour.objects.get(cluster=cluster, hour=at)


# --- the change counter ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_each_window_dirties_its_hour_until_a_rollup_that_saw_it_commits(cluster):
    write_window(cluster, H + MINUTE)
    write_window(cluster, H + 2 * MINUTE)
    # the window ending on the hour belongs to the hour before
    write_window(cluster, H + timedelta(hours=1))
    assert state(cluster).changes == 3 and state(cluster).is_dirty
    assert not RollupHour.objects.filter(cluster=cluster, hour=H + timedelta(hours=1)).exists()

    roll_up_hour(cluster.pk, H)

    assert not state(cluster).is_dirty and state(cluster).rolled_changes == 3
    assert fleet_allocated(cluster) == pytest.approx(3 * 2 / 60)


@pytest.mark.django_db
def test_a_window_committed_while_the_rollup_computes_leaves_the_hour_dirty(cluster, monkeypatch):
    write_window(cluster, H + MINUTE)
    compute = hour._compute_rows

    def a_window_arrives_meanwhile(*args):
        rows = compute(*args)
        write_window(cluster, H + 2 * MINUTE)
        return rows

    monkeypatch.setattr(hour, "_compute_rows", a_window_arrives_meanwhile)
    roll_up_hour(cluster.pk, H)
    monkeypatch.setattr(hour, "_compute_rows", compute)

    # the rollup counted one window of two: it must not call the hour clean
    assert state(cluster).is_dirty
    assert sweep.due_hours(cluster.pk) == [H]
    assert sweep.roll_up_due_hours(cluster.pk).rolled_up == [H]
    assert fleet_allocated(cluster) == pytest.approx(2 * 2 / 60)
    assert sweep.due_hours(cluster.pk) == []


@pytest.mark.django_db
def test_a_rollup_killed_before_its_commit_leaves_no_rows_and_the_hour_dirty(cluster, monkeypatch):
    write_window(cluster, H + MINUTE)

    def dies(*args, **kwargs):
        raise SystemExit("killed")

    monkeypatch.setattr(hour, "record_rollup", dies)
    with pytest.raises(SystemExit):
        roll_up_hour(cluster.pk, H)
    assert fleet_allocated(cluster) is None and state(cluster).is_dirty


# --- the collector ------------------------------------------------------------------------------

START = T0 + timedelta(minutes=45)
LIVE_NOW = T0 + timedelta(minutes=75, seconds=c.COLLECT_DELAY_SECONDS + 1)


@pytest.fixture
def beta(beta_prometheus, settings):
    settings.GPULEDGER_COLLECT_SECONDS = WINDOW_SECONDS
    settings.GPULEDGER_CATCHUP_HOURS = 24
    cluster = Cluster.objects.create(name="beta", prometheus_url=beta_prometheus.url)
    CollectionCursor.objects.create(
        cluster=cluster, source=IngestSource.DCGM, last_window_end=START
    )
    return cluster


def fail_rollups_of(monkeypatch, failing: datetime, times: int | None) -> list[datetime]:
    """``roll_up_hour`` of ``failing`` raises "database is locked" (``times`` times, or always)."""
    real = sweep.roll_up_hour
    failures: list[datetime] = []

    def locked(cluster_id: int, at: datetime) -> int:
        if at == failing and (times is None or len(failures) < times):
            failures.append(at)
            raise OperationalError("database is locked")
        return real(cluster_id, at)

    monkeypatch.setattr(sweep, "roll_up_hour", locked)
    return failures


@pytest.mark.integration
@pytest.mark.django_db
def test_an_hour_whose_rollup_failed_all_run_is_rolled_up_by_the_next_run(beta, monkeypatch):
    # given the database is locked whenever this run rolls up hour T0
    failures = fail_rollups_of(monkeypatch, T0, times=None)
    result = Collector(beta).run(now=LIVE_NOW)
    # then the windows are in, hour T0 has no rollup and stays dirty; the next hour is fine
    assert result.windows == 30 and len(failures) == 2  # on completion, and in the final pass
    assert result.hours_rolled_up == [T0 + timedelta(hours=1)]
    assert fleet_allocated(beta, T0) is None
    assert state(beta, T0).is_dirty
    monkeypatch.undo()

    # when the next run has no window to collect, it still rolls the hour up
    again = Collector(beta).run(now=LIVE_NOW)
    assert again.windows == 0 and again.hours_rolled_up == [T0]
    assert not RollupHour.objects.filter(cluster=beta).dirty().exists()
    assert verify_hour(beta, T0).differences == []


@pytest.mark.integration
@pytest.mark.django_db
def test_a_rollup_that_raises_once_is_retried_by_the_same_runs_final_pass(beta, monkeypatch):
    failures = fail_rollups_of(monkeypatch, T0, times=1)
    result = Collector(beta).run(now=LIVE_NOW)
    assert failures == [T0]
    assert result.hours_rolled_up == [T0, T0 + timedelta(hours=1)]
    assert not RollupHour.objects.filter(cluster=beta).dirty().exists()
    assert verify_hour(beta, T0).differences == []


@pytest.mark.integration
@pytest.mark.django_db
def test_a_backfill_with_nothing_left_to_collect_still_rolls_up_dirty_hours(
    beta, monkeypatch, settings
):
    from django.core.management import call_command

    # A retention that reaches this history: the per-window path, not the deep backfill.
    settings.GPULEDGER_USAGE_RETENTION_DAYS = 36500
    options = {"start": START.isoformat(), "end": (START + 30 * MINUTE).isoformat()}
    fail_rollups_of(monkeypatch, T0, times=None)
    call_command("collect_metrics", cluster="beta", no_progress=True, **options)
    assert state(beta, T0).is_dirty
    monkeypatch.undo()

    call_command("collect_metrics", cluster="beta", no_progress=True, **options)
    assert not state(beta, T0).is_dirty
    assert verify_hour(beta, T0).differences == []


# --- the sweep ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_sweep_task_rolls_up_the_dirty_hours_of_every_cluster(cluster):
    other = Cluster.objects.create(name="other")
    for target in (cluster, other):
        write_window(target, H + MINUTE)
        write_window(target, H + timedelta(hours=1, minutes=1))
    roll_up_hour(other.pk, H)  # already clean

    answer = roll_up_dirty_hours()

    assert answer["failed"] == 0
    assert sorted(answer["rolled_up"]) == [str(cluster.pk), str(other.pk)]
    assert len(answer["rolled_up"][str(cluster.pk)]) == 2
    assert answer["rolled_up"][str(other.pk)] == [(H + timedelta(hours=1)).isoformat()]
    assert not RollupHour.objects.dirty().exists()
    assert roll_up_dirty_hours() == {"rolled_up": {}, "failed": 0}


@pytest.mark.django_db
def test_an_hour_rolled_up_before_it_settled_is_rolled_up_once_more_after(cluster, settings):
    settings.GPULEDGER_ROLLUP_SETTLE_SECONDS = 300
    end = H + timedelta(hours=1)
    queue = ClusterQueue.objects.create(cluster=cluster, name="cq-a")
    write_window(cluster, end)
    with time_machine.travel(end + timedelta(seconds=40), tick=False):
        assert roll_up_dirty_hours()["rolled_up"] == {str(cluster.pk): [H.isoformat()]}
    # the Kueue sync writes the hour's last queue sample late; nothing bumps a counter for it
    ClusterQueueSample.objects.create(
        cluster_queue=queue, flavor_name="h100", sampled_at=end, nominal=Decimal(4)
    )
    with time_machine.travel(end + timedelta(seconds=299), tick=False):
        assert roll_up_dirty_hours()["rolled_up"] == {}  # not settled yet
    with time_machine.travel(end + timedelta(seconds=301), tick=False):
        assert roll_up_dirty_hours()["rolled_up"] == {str(cluster.pk): [H.isoformat()]}
        assert roll_up_dirty_hours()["rolled_up"] == {}
    fleet = HourlyRollup.objects.filter(cluster=cluster, scope=RollupScope.FLEET, hour=H)
    assert fleet.aggregate(n=Sum("nominal_gpu_hours"))["n"] == pytest.approx(4 / 60)


@pytest.mark.django_db
def test_the_sweep_re_rolls_the_open_hour_at_most_every_rollup_interval(cluster, settings):
    settings.GPULEDGER_ROLLUP_SECONDS = 300
    with time_machine.travel(H + timedelta(minutes=10), tick=False):
        write_window(cluster, H + MINUTE)
        assert len(roll_up_dirty_hours()["rolled_up"]) == 1
        write_window(cluster, H + 2 * MINUTE)
    with time_machine.travel(H + timedelta(minutes=14), tick=False):
        assert roll_up_dirty_hours()["rolled_up"] == {}
        assert state(cluster).is_dirty
    with time_machine.travel(H + timedelta(minutes=16), tick=False):
        assert len(roll_up_dirty_hours()["rolled_up"]) == 1
    assert fleet_allocated(cluster) == pytest.approx(2 * 2 / 60)


@pytest.mark.django_db
def test_the_sweep_logs_a_failing_hour_and_carries_on_with_the_next(cluster, monkeypatch):
    write_window(cluster, H + MINUTE)
    write_window(cluster, H + timedelta(hours=1, minutes=1))
    fail_rollups_of(monkeypatch, H, times=None)
    answer = roll_up_dirty_hours()
    assert answer["failed"] == 1
    assert answer["rolled_up"] == {str(cluster.pk): [(H + timedelta(hours=1)).isoformat()]}
    assert sweep.due_hours(cluster.pk) == [H]


# --- pruning --------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.skipif(
    connection.vendor == "postgresql",
    reason="PostgreSQL drops whole days of usage: tests/ledger/test_partitions.py",
)
def test_an_hour_cut_into_by_the_usage_retention_is_never_rebuilt(cluster):
    for minute in (1, 2, 59):
        write_window(cluster, H + minute * MINUTE)
    roll_up_hour(cluster.pk, H)
    before = fleet_allocated(cluster)

    prune_usage(H + 30 * MINUTE)

    assert state(cluster).usage_pruned
    RollupHour.objects.filter(cluster=cluster).update(changes=99)  # even if it were dirty
    assert sweep.due_hours(cluster.pk) == []
    assert rebuild_hours(cluster, [H]).kept[0][0] == H
    check = verify_hour(cluster, H)
    assert check.unverifiable and not check.differences
    assert fleet_allocated(cluster) == before
