"""One range, one number: the chargeback, OpenCost (team rollups and workload rollups) and the
read layer give the same GPU-hours per team, with or without an hour in progress.

Scenario (tests/api/conftest.py), 22:00 to 02:00: alpha holds 4 GPUs and beta 2 every hour. At
01:30 the 01:00 hour is in progress and not counted: alpha 3 × 4 = 12, beta 3 × 2 = 6 GPU-hours.
At 02:00 it has ended: 16 and 8.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from tests.api.conftest import END, START

WINDOW = {"start": "2026-01-31T22:00:00Z", "end": "2026-02-01T02:00:00Z"}
PAIR = "2026-01-31T22:00:00Z,2026-02-01T02:00:00Z"


def per_team(staff_client, now: datetime) -> dict[str, dict[str, float]]:
    with time_machine.travel(now, tick=False):
        charge = staff_client.get("/api/v1/chargeback/", {**WINDOW, "group_by": "team"}).json()
        teams = staff_client.get("/api/v1/allocation", {"window": PAIR, "aggregate": "team"})
        pairs = staff_client.get(
            "/api/v1/allocation", {"window": PAIR, "aggregate": "cluster,team"}
        )
        layer = (
            HourlyRollup.objects.for_scope(RollupScope.TEAM)
            .covering(START, END)
            .figures(group_by=("key",))
        )
    return {
        "chargeback": {row["group"]: row["allocated_gpu_hours"] for row in charge["rows"]},
        "opencost": {k: v["gpuHours"] for k, v in teams.json()["data"][0].items()},
        "opencost by workload": {
            k.removeprefix("test/"): v["gpuHours"] for k, v in pairs.json()["data"][0].items()
        },
        "read layer": {key: f.allocated_gpu_hours for key, f in layer.items()},
    }


@pytest.mark.parametrize(
    ("now", "alpha", "beta"),
    [
        (datetime(2026, 2, 1, 1, 30, tzinfo=UTC), 12, 6),  # 01:00 in progress
        (datetime(2026, 2, 1, 2, 0, tzinfo=UTC), 16, 8),  # 01:00 ended
    ],
)
def test_chargeback_opencost_and_the_read_layer_agree_per_team(
    staff_client, scenario, now, alpha, beta
):
    found = per_team(staff_client, now)

    for source, teams in found.items():
        assert teams.get("alpha") == pytest.approx(alpha), source
        assert teams.get("beta") == pytest.approx(beta), source
        # gamma (no usage) is padded with zeros by the chargeback and its OpenCost view only.
        assert teams.get("gamma", 0) == 0, source
