"""An install from before the compact usage layout: its rows move, resumably, and every figure
stays (ledger.store.legacy, migration ledger.0007, manage.py move_usage)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count, Sum

from ledger.models import GpuUsage, HourlyRollup, UsageHolding
from ledger.range_figures import FIGURES
from ledger.rollup import roll_up_range
from ledger.store import legacy

BEFORE = [("ledger", "0005_rollup_team_busy_index")]
END = "2026-06-15T12:00:00Z"


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    legacy.forget()


def _latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _wide_rows() -> list[tuple]:
    """Every usage row, by window and identity, with every figure."""
    fields = [f.attname for f in GpuUsage._meta.concrete_fields if f.attname != "holding_id"]
    fields.remove("created_at")
    return sorted(
        (tuple(row) for row in GpuUsage.objects.order_by().values_list(*fields)), key=repr
    )


def _rollups() -> dict[tuple, tuple]:
    return {
        (r.cluster_id, r.scope, r.key, r.hour, r.flavor, r.gpu_model): tuple(
            getattr(r, name) for name in FIGURES
        )
        for r in HourlyRollup.objects.all()
    }


def _roll_up_the_usage_hours() -> None:
    """Every hour that has usage rows (in either table), rolled up again from what is stored."""
    with connection.cursor() as cursor:
        table = "ledger_gpuusage_legacy" if legacy.remaining() else "fleet_gpuusage"
        cursor.execute(
            f"SELECT cluster_id, MIN(window_end), MAX(window_end) FROM {table} GROUP BY cluster_id"
        )
        spans = cursor.fetchall()
    assert spans
    for cluster_id, first, last in spans:
        roll_up_range(cluster_id, _aware(first) - timedelta(microseconds=1), _aware(last))


def _aware(value) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _simulated(days: str) -> Iterator[None]:
    call_command("simulate", "--days", days, "--end", END, stdout=StringIO(), stderr=StringIO())
    yield
    _migrate(_latest())
    # The flush after a transactional test empties the models' tables only: rows a test left in
    # the wide table would be moved by the next test that migrates, naming a flushed cluster.
    if legacy.exists():
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {legacy.LEGACY_TABLE}")


@pytest.fixture
def a_day_of_the_demo() -> Iterator[None]:
    yield from _simulated("1")


@pytest.mark.django_db(transaction=True)
def test_a_day_of_the_demo_moves_in_batches_with_every_figure_kept(a_day_of_the_demo, monkeypatch):
    """Also: while an hour's rows are left to move, rolling it up again keeps its rollup (the
    state right after the migration, every row left to move, checked on the same day)."""
    rows, rollups = _wide_rows(), _rollups()
    assert len(rows) > 10_000 and rollups
    # Given the install before the compact layout (the rows back in the wide table)
    _migrate(BEFORE)
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM fleet_gpuusage")
        assert cursor.fetchone()[0] == len(rows)

    # When it migrates with more rows than the migration moves by itself
    monkeypatch.setattr(legacy, "MIGRATION_ROW_LIMIT", 1000)
    _migrate(_latest())
    assert legacy.remaining() == len(rows)  # more than the limit: the migration moved none
    assert GpuUsage.objects.count() == 0
    # an hour whose rows are left to move is not rolled up again (from the rows not yet moved)
    _roll_up_the_usage_hours()
    assert _rollups() == rollups

    # and the move is stopped after a few batches, then run again to the end
    batches = legacy.move_batches(batch_rows=3000)
    stopped = [next(batches) for _ in range(3)]
    batches.close()
    moved_first = sum(batch.rows for batch in stopped)
    assert moved_first == GpuUsage.objects.count()
    assert 0 < GpuUsage.objects.count() <= 9000
    out = StringIO()
    call_command("move_usage", "--batch-rows", "5000", stdout=out, stderr=StringIO())

    # Then every row is there with the same values, the rollups (what chargeback and pages read)
    # were not touched, and rolled up again from the moved rows they give the same figures: to
    # the last bit but one, as sums of the same floats read in another order may differ there
    # (as they did in the wide table after a VACUUM moved its rows)
    assert f"Moved {len(rows) - moved_first} rows" in out.getvalue()
    assert legacy.remaining() == 0
    assert _wide_rows() == rows
    holdings = UsageHolding.objects.aggregate(n=Count("id"))["n"]
    assert holdings * 20 < len(rows)  # what repeats is stored once per holding
    assert _rollups() == rollups
    _roll_up_the_usage_hours()
    again = _rollups()
    assert again.keys() == rollups.keys()
    for key, figures in rollups.items():
        assert again[key] == pytest.approx(figures, rel=1e-12, abs=1e-12), key
    assert HourlyRollup.objects.aggregate(a=Sum("allocated_gpu_hours"))["a"] > 0
