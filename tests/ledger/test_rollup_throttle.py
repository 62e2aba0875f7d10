"""The hour still being collected is re-rolled at most every GPULEDGER_ROLLUP_SECONDS."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Sum

from ledger.choices import RollupScope
from ledger.collector import Collector, CollectResult
from ledger.models import GpuUsage, HourlyRollup, RollupHour

HOUR = datetime(2026, 6, 15, 10, tzinfo=UTC)


def _usage(cluster, minute: int, pod: str) -> None:
    end = HOUR + timedelta(minutes=minute)
    GpuUsage.objects.create(
        cluster=cluster,
        window_start=end - timedelta(minutes=1),
        window_end=end,
        gpu_key=f"node-1/GPU-{pod}/",
        namespace="team-a",
        pod=pod,
        node_name="node-1",
        allocated=True,
        gpus=1.0,
        capacity_gpus=1.0,
        activity=0.5,
        activity_source="sm_active",
    )


def _allocated(cluster) -> float:
    return HourlyRollup.objects.filter(
        cluster=cluster, scope=RollupScope.FLEET, hour=HOUR
    ).aggregate(a=Sum("allocated_gpu_hours"))["a"]


@pytest.mark.django_db
def test_an_open_hour_is_not_re_rolled_within_the_interval(cluster, settings):
    settings.GPULEDGER_ROLLUP_SECONDS = 300
    collector = Collector(cluster, window_seconds=60)
    _usage(cluster, 1, "a")
    collector._roll_up(HOUR, CollectResult(cluster=cluster.name), open_hour=True)
    assert _allocated(cluster) == pytest.approx(1 / 60)

    _usage(cluster, 2, "b")
    collector._roll_up(HOUR, CollectResult(cluster=cluster.name), open_hour=True)
    assert _allocated(cluster) == pytest.approx(1 / 60)

    # A complete hour is always rolled up.
    collector._roll_up(HOUR, CollectResult(cluster=cluster.name), open_hour=False)
    assert _allocated(cluster) == pytest.approx(2 / 60)


@pytest.mark.django_db
def test_an_open_hour_is_re_rolled_once_the_interval_passed(cluster, settings):
    settings.GPULEDGER_ROLLUP_SECONDS = 300
    collector = Collector(cluster, window_seconds=60)
    _usage(cluster, 1, "a")
    collector._roll_up(HOUR, CollectResult(cluster=cluster.name), open_hour=True)
    RollupHour.objects.filter(cluster=cluster, hour=HOUR).update(
        rolled_up_at=datetime.now(UTC) - timedelta(seconds=301)
    )

    _usage(cluster, 2, "b")
    collector._roll_up(HOUR, CollectResult(cluster=cluster.name), open_hour=True)
    assert _allocated(cluster) == pytest.approx(2 / 60)
