"""MIG quota in the quota GPU-hours: a MIG instance of an ``Ng`` profile counts N/7 of a GPU in
nominal, borrowed and lent GPU-hours, as it does in allocation.

Hand-worked hour 09:00-10:00 UTC, three 60 s windows ending 09:01, 09:02 and 10:00:

* ``cq-mig`` has quota only of MIG: 2 × ``nvidia.com/mig-3g.40gb`` in flavor ``a100-mig``
  (2 × 3/7 = 6/7 GPU), lends 1 instance (3/7 GPU) in each window.
* ``cq-both`` has 4 whole GPUs in ``h100`` and 7 × ``nvidia.com/mig-1g.10gb`` (7 × 1/7 = 1 GPU)
  in ``a100-mig``, borrowing 1 instance (1/7 GPU) in each window.
* a sample of ``example.com/fpga`` (not a GPU) counts for nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from fleet.models import Cluster
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.rollup import roll_up_hour
from ledger.rollup.verify import verify_hour
from quotas.models import ClusterQueue, ClusterQueueSample, Team

pytestmark = pytest.mark.django_db

HOUR = datetime(2025, 4, 7, 9, 0, tzinfo=UTC)
WINDOWS = [HOUR + timedelta(minutes=1), HOUR + timedelta(minutes=2), HOUR + timedelta(hours=1)]
W = 60 / 3600  # one GPU over one 60 s window, in GPU-hours


def _sample(cq: ClusterQueue, flavor: str, resource: str, at: datetime, **values: int) -> None:
    ClusterQueueSample.objects.create(
        cluster_queue=cq,
        flavor_name=flavor,
        resource=resource,
        sampled_at=at,
        window_seconds=60,
        **{name: Decimal(value) for name, value in values.items()},
    )


@pytest.fixture
def cluster() -> Cluster:
    cluster = Cluster.objects.create(name="mig", display_name="MIG cluster")
    team = Team.objects.create(name="vision")
    only_mig = ClusterQueue.objects.create(cluster=cluster, name="cq-mig", team=team)
    both = ClusterQueue.objects.create(cluster=cluster, name="cq-both")
    for at in WINDOWS:
        _sample(only_mig, "a100-mig", "nvidia.com/mig-3g.40gb", at, nominal=2, lent=1)
        _sample(both, "h100", "nvidia.com/gpu", at, nominal=4)
        _sample(both, "a100-mig", "nvidia.com/mig-1g.10gb", at, nominal=7, borrowed=1, total=1)
        _sample(both, "a100-mig", "example.com/fpga", at, nominal=5)
    return cluster


def _row(cluster: Cluster, scope: str, key: str, flavor: str) -> HourlyRollup:
    return HourlyRollup.objects.get(cluster=cluster, hour=HOUR, scope=scope, key=key, flavor=flavor)


def test_mig_quota_counts_slices_over_seven(cluster: Cluster) -> None:
    roll_up_hour(cluster.pk, HOUR)
    only_mig = _row(cluster, RollupScope.CLUSTER_QUEUE, "cq-mig", "a100-mig")
    assert only_mig.nominal_gpu_hours == pytest.approx(2 * 3 / 7 * 3 * W)
    assert only_mig.lent_gpu_hours == pytest.approx(3 / 7 * 3 * W)
    team = _row(cluster, RollupScope.TEAM, "vision", "a100-mig")
    assert team.nominal_gpu_hours == pytest.approx(6 / 7 * 3 * W)

    both_mig = _row(cluster, RollupScope.CLUSTER_QUEUE, "cq-both", "a100-mig")
    assert both_mig.nominal_gpu_hours == pytest.approx(7 * 1 / 7 * 3 * W)
    assert both_mig.borrowed_gpu_hours == pytest.approx(1 / 7 * 3 * W)
    both_h100 = _row(cluster, RollupScope.CLUSTER_QUEUE, "cq-both", "h100")
    assert both_h100.nominal_gpu_hours == pytest.approx(4 * 3 * W)

    fleet = HourlyRollup.objects.filter(cluster=cluster, hour=HOUR, scope=RollupScope.FLEET)
    total = sum(row.nominal_gpu_hours for row in fleet)
    assert total == pytest.approx((6 / 7 + 4 + 1) * 3 * W)


def test_verify_weighs_mig_like_the_rollup(cluster: Cluster) -> None:
    roll_up_hour(cluster.pk, HOUR)
    assert verify_hour(cluster, HOUR).differences == []
    # A rollup that counted MIG instances as whole GPUs is caught.
    row = _row(cluster, RollupScope.FLEET, "mig", "a100-mig")
    row.nominal_gpu_hours = (2 + 7) * 3 * W
    row.save()
    assert verify_hour(cluster, HOUR).differences != []
