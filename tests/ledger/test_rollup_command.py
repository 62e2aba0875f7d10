"""``manage.py rollup``: rebuild a range, verify it against the usage rows, repair what differs.

The hours are the hand-worked ones of tests/ledger/rollup_scenario.py (MIG, time-slicing, no
telemetry, fallback activity, queue samples): the check's own sums must agree with the rollup on
all of them.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from fleet.models import Cluster
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.rollup import prune_usage
from tests.ledger.rollup_scenario import H0, H1

pytestmark = pytest.mark.django_db

RANGE = {"start": H0.isoformat(), "end": (H1 + timedelta(hours=1)).isoformat()}


def rollup(*args: str, **options: object) -> str:
    out = StringIO()
    call_command("rollup", *args, stdout=out, **{**RANGE, **options})
    return out.getvalue()


def rows() -> list[tuple]:
    return sorted(
        HourlyRollup.objects.values_list(
            "scope", "key", "hour", "flavor", "gpu_model", "allocated_gpu_hours", "windows"
        )
    )


def test_it_rebuilds_a_range_idempotently(scenario):
    out = rollup()
    assert "test: 2 hours rolled up" in out
    first = rows()
    assert {row[2] for row in first} == {H0, H1}
    assert "test: 2 hours rolled up" in rollup(cluster="test")
    assert rows() == first


def test_verify_agrees_with_every_hour_it_rolled_up(scenario):
    rollup()
    out = rollup(verify=True)
    assert "test: 2 hours checked, 2 agree, 0 differ, 0 not verifiable" in out


def test_verify_finds_a_tampered_row_and_exits_non_zero_and_repair_fixes_it(scenario):
    rollup()
    fleet = HourlyRollup.objects.filter(scope=RollupScope.FLEET, hour=H0, flavor="h100").get()
    fleet.allocated_gpu_hours += 1
    fleet.save()
    HourlyRollup.objects.filter(scope=RollupScope.NAMESPACE, key="ns-b", hour=H0).update(
        idle_gpu_hours=0
    )

    out = StringIO()
    with pytest.raises(CommandError, match="1 hour differ.*--repair"):
        call_command("rollup", verify=True, stdout=out, **RANGE)
    report = out.getvalue()
    assert f"{H0.isoformat()}: fleet test: allocated_gpu_hours is" in report
    assert f"{H0.isoformat()}: namespace ns-b: idle_gpu_hours is 0.000000 in the rollup" in report
    assert "1 agree, 1 differ" in report

    repaired = rollup(verify=True, repair=True)
    assert "test: 1 hour rolled up again, 0 still differ" in repaired
    assert "2 agree, 0 differ" in rollup(verify=True)


def test_verify_reports_an_hour_with_usage_and_no_rollup(scenario):
    rollup()
    HourlyRollup.objects.filter(hour=H1).delete()
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("rollup", verify=True, stdout=out, **RANGE)
    assert f"{H1.isoformat()}: no rollup rows, though the hour has usage rows" in out.getvalue()
    # --repair alone checks too
    assert "1 hour rolled up again, 0 still differ" in rollup(repair=True)


@pytest.mark.skipif(
    connection.vendor == "postgresql",
    reason="PostgreSQL drops whole days of usage: tests/ledger/test_partitions.py",
)
def test_an_hour_whose_usage_was_pruned_is_not_verifiable_and_is_kept(scenario):
    rollup()
    prune_usage(H1)
    HourlyRollup.objects.filter(hour=H0, scope=RollupScope.FLEET).update(allocated_gpu_hours=0)
    kept = rows()

    out = rollup(verify=True, repair=True)
    assert f"{H0.isoformat()}: not verifiable: usage rows pruned" in out
    assert "1 agree, 0 differ, 1 not verifiable" in out
    assert "kept as it is" in rollup() and rows() == kept


def test_the_cluster_must_be_named_when_there_are_several(scenario):
    Cluster.objects.create(name="other")
    with pytest.raises(CommandError, match=r"several clusters \(other, test\).*--cluster"):
        rollup()
    with pytest.raises(CommandError, match="no cluster named 'nope'"):
        rollup(cluster="nope")
    assert "test: 2 hours rolled up" in rollup(cluster="test")


def test_it_rejects_times_without_an_offset_and_empty_ranges(scenario):
    with pytest.raises(CommandError, match="UTC offset"):
        rollup(start="2025-03-10T12:00:00")
    with pytest.raises(CommandError, match="before --end"):
        rollup(start=RANGE["end"], end=RANGE["start"])
