"""The figure registry (ledger/figures.py): each per-row rule says the same thing as a ``Q``, as
SQL and as a Python test, and the figures "now" count the rows the hourly rollups count."""

from __future__ import annotations

import random

import pytest
from django.db import connection
from django.db.models import Sum

from dashboard.queries.busy import busy_gpus_now
from dashboard.queries.overview import fleet_now
from ledger.choices import RollupScope
from ledger.figures import FIGURES, row_value, sum_sql, thresholds
from ledger.models import GpuUsage, HourlyRollup
from ledger.now import figures_now, latest_windows
from ledger.rollup import roll_up_hour
from tests.ledger.rollup_scenario import H0, MINUTE, W, usage_row

COLUMNS = (
    "allocated",
    "gpus",
    "capacity_gpus",
    "activity",
    "activity_source",
    "sm_active",
    "shared",
    "pipe_tensor_active",
    "gpu_util",
)


def _random_rows(cluster, rng: random.Random, end) -> list[GpuUsage]:
    rows = []
    for n in range(120):
        reading = rng.choice(["sm", "gr", None])
        value = rng.choice([0.0, 0.005, 0.01, 0.05, 0.19, 0.2, 0.5, 1.0])
        rows.append(
            usage_row(
                cluster,
                end,
                f"gpu-{n}",
                allocated=rng.random() < 0.8,
                gpus=rng.choice([1.0, 0.5, 3 / 7]),
                capacity_gpus=rng.choice([0.0, 1.0]),
                shared=rng.random() < 0.2,
                pipe_tensor_active=rng.choice([None, 0.3]),
                gpu_util=rng.choice([None, 0.0, 49.9, 50.0, 90.0]),
                **({reading: value} if reading else {}),
            )
        )
    return rows


@pytest.mark.django_db
def test_every_rule_selects_the_same_rows_as_q_as_sql_and_in_python(cluster):
    end = H0 + MINUTE
    GpuUsage.objects.bulk_create(_random_rows(cluster, random.Random(22), end))
    limits = thresholds()
    read = list(GpuUsage.objects.filter(cluster=cluster).values(*COLUMNS))
    table = GpuUsage._meta.db_table
    for figure in FIGURES:
        by_python = sum(row_value(figure, row, limits) for row in read)
        by_q = (
            GpuUsage.objects.filter(cluster=cluster)
            .filter(figure.rows.q(limits))
            .aggregate(total=Sum(figure.summed.expression()))["total"]
            or 0.0
        )
        assert by_q == pytest.approx(by_python, abs=1e-9), figure.name
        if connection.vendor == "postgresql":
            sql, params = sum_sql(figure, limits)
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT {sql} FROM {table} WHERE cluster_id = %s", [*params, cluster.pk]
                )
                by_sql = cursor.fetchone()[0] or 0.0
            assert by_sql == pytest.approx(by_python, abs=1e-9), figure.name
        assert by_python > 0, f"{figure.name}: the random rows must exercise the rule"


@pytest.mark.django_db
def test_busy_now_counts_the_rows_the_busy_gpu_hours_count(cluster):
    """A GR_ENGINE-only GPU with GPU_UTIL high and activity low is not "busy but not working"
    (only SM_ACTIVE decides it), now as over the hour."""
    ends = [H0 + MINUTE * n for n in range(1, 61)]
    rows = []
    for end in ends:
        rows += [
            # SM_ACTIVE 0.1 with GPU_UTIL 90: busy but not working.
            usage_row(cluster, end, "sm", sm=0.1, gpu_util=90.0, namespace="a", pod="a-0"),
            # GR_ENGINE_ACTIVE 0.1 with GPU_UTIL 90: no SM_ACTIVE, so never busy-not-working.
            usage_row(cluster, end, "gr", gr=0.1, gpu_util=90.0, namespace="b", pod="b-0"),
            # Working.
            usage_row(cluster, end, "ok", sm=0.8, gpu_util=95.0, namespace="c", pod="c-0"),
        ]
    GpuUsage.objects.bulk_create(rows)
    roll_up_hour(cluster.pk, H0)

    windows = latest_windows()
    assert windows == {cluster.pk: ends[-1]}
    busy_hours = HourlyRollup.objects.filter(scope=RollupScope.FLEET).aggregate(
        b=Sum("busy_not_working_gpu_hours")
    )["b"]
    assert busy_hours == pytest.approx(60 * W)  # one GPU, by hand
    # Now: one window of the same rows, so GPUs now = GPU-hours ÷ hours.
    assert fleet_now(windows).busy == pytest.approx(busy_hours / (60 * W))
    assert figures_now(windows)[0]["busy_not_working"] == pytest.approx(1.0)
    listed, total = busy_gpus_now(windows, None)
    assert total == pytest.approx(1.0)
    assert [row["pod"] for row in listed] == ["a-0"]
