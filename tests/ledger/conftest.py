"""Rollups with every figure filled in, and their sums worked out by hand.

Cluster "c1", 2026-03-02, hours 10:00, 11:00, 12:00 ended; 13:00 is the hour in progress when
the clock reads 13:20 (``NOW``), its row partial as the collector leaves it.

Team scope (the figures per row are in ``RED`` and ``BLUE`` below): red holds 4, 8 + 1 (two
flavors), 2 and, in the hour in progress, 1 GPU-hours; blue holds 2 at 10:00 and 12:00, all idle.
Worked out by hand over 10:00-13:00 for red: allocated 15, with telemetry 11, active 5.5, idle 1,
tensor 2.5 of 10, GPU_UTIL 7.5 of 10, busy 1.5, nominal 20, borrowed 2, lent 2, pending 4, peak 9.

Blue has no row at 11:00: a gap ("no data"), not a zero. Fleet scope: capacity 16 GPU-hours
every hour; allocated 6, 9, 4 and (in progress) 3.

The generated fleets in a real Prometheus (tests/fleet/conftest.py) are imported for the
collection tests here, and ``scenario`` is the hand-worked hour of tests/ledger/rollup_scenario.py,
built once per module.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from fleet.models import Cluster
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from quotas.models import Team
from tests.databases import kept_for_the_module
from tests.fleet.conftest import (  # noqa: F401  (the collection tests' fixtures)
    alpha_fleet,
    alpha_prometheus,
    beta_fleet,
    beta_prometheus,
)

H10 = datetime(2026, 3, 2, 10, tzinfo=UTC)
H11 = datetime(2026, 3, 2, 11, tzinfo=UTC)
H12 = datetime(2026, 3, 2, 12, tzinfo=UTC)
H13 = datetime(2026, 3, 2, 13, tzinfo=UTC)
H14 = datetime(2026, 3, 2, 14, tzinfo=UTC)
NOW = datetime(2026, 3, 2, 13, 20, tzinfo=UTC)

RED = [
    (H10, "h100", dict(allocated_gpu_hours=4, telemetry_gpu_hours=4, active_gpu_hours=2,
                       idle_gpu_hours=1, tensor_active_gpu_hours=1, tensor_covered_gpu_hours=4,
                       gpu_util_gpu_hours=3, gpu_util_covered_gpu_hours=4,
                       busy_not_working_gpu_hours=0.5, nominal_gpu_hours=6, lent_gpu_hours=2,
                       peak_allocated_gpus=4)),
    (H11, "h100", dict(allocated_gpu_hours=8, telemetry_gpu_hours=6, active_gpu_hours=3,
                       tensor_active_gpu_hours=1.5, tensor_covered_gpu_hours=6,
                       gpu_util_gpu_hours=4.5, gpu_util_covered_gpu_hours=6,
                       busy_not_working_gpu_hours=1, nominal_gpu_hours=6, borrowed_gpu_hours=2,
                       pending_gpu_hours=1, peak_allocated_gpus=9)),
    (H11, "a100", dict(allocated_gpu_hours=1, telemetry_gpu_hours=1, active_gpu_hours=0.5,
                       nominal_gpu_hours=2, peak_allocated_gpus=1)),
    (H12, "h100", dict(allocated_gpu_hours=2, nominal_gpu_hours=6, pending_gpu_hours=3,
                       peak_allocated_gpus=2)),
    (H13, "h100", dict(allocated_gpu_hours=1, telemetry_gpu_hours=1, active_gpu_hours=1,
                       nominal_gpu_hours=1.5, peak_allocated_gpus=3)),
]  # fmt: skip
BLUE = [
    (hour, "h100", dict(allocated_gpu_hours=2, telemetry_gpu_hours=2, active_gpu_hours=0.2,
                        idle_gpu_hours=2, nominal_gpu_hours=2, peak_allocated_gpus=2))
    for hour in (H10, H12)
]  # fmt: skip
FLEET = [(H10, 6.0), (H11, 9.0), (H12, 4.0), (H13, 3.0)]


@dataclass
class Rollups:
    cluster: Cluster
    red: Team
    blue: Team


def _row(cluster: Cluster, scope: str, key: str, hour: datetime, flavor: str,
         **values: Any) -> HourlyRollup:  # fmt: skip
    return HourlyRollup(
        cluster=cluster,
        scope=scope,
        key=key,
        hour=hour,
        flavor=flavor,
        gpu_model=flavor.upper(),
        windows=60,
        **values,
    )


@pytest.fixture
def rollups(db) -> Rollups:
    cluster = Cluster.objects.create(name="c1")
    red = Team.objects.create(name="red")
    blue = Team.objects.create(name="blue")
    rows = [
        _row(cluster, RollupScope.TEAM, team.name, hour, flavor, team=team, **values)
        for team, table in ((red, RED), (blue, BLUE))
        for hour, flavor, values in table
    ]
    rows += [
        _row(
            cluster,
            RollupScope.FLEET,
            "c1",
            hour,
            "",
            capacity_gpu_hours=16,
            allocated_gpu_hours=allocated,
        )  # fmt: skip
        for hour, allocated in FLEET
    ]
    HourlyRollup.objects.bulk_create(rows)
    return Rollups(cluster, red, blue)


@pytest.fixture(scope="module")
def shared_scenario(django_db_setup: None, django_db_blocker: Any) -> Iterator[SimpleNamespace]:
    """The scenario, built once for the tests of a module."""
    from tests.ledger.rollup_scenario import build_scenario

    with kept_for_the_module(django_db_blocker):
        yield build_scenario()


@pytest.fixture
def scenario(shared_scenario: SimpleNamespace, db: None) -> SimpleNamespace:
    """The scenario as built; each test's own writes (its rollups) are rolled back after it."""
    return copy.deepcopy(shared_scenario)
