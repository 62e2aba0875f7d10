"""The history of tests/ledger/test_history.py (a real Prometheus with DCGM, kube-state-metrics
and Kueue's quota metrics; a pod known only through ``kube_pod_info{created_by_*}``; a
preempted and re-admitted workload; a workload that only waited), backfilled once more when
it is older than the usage retention: ``collect_metrics --start --end`` then takes the deep
path, and every group of every hour must have the figures of the window-by-window backfill
(which test_history.py shows equal to live collection) and of the scenario itself.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command

from ledger.models import GpuUsage, RollupHour
from tests.ledger.test_history import (  # noqa: F401  (the module's Prometheus and API server)
    NOW,
    START,
    TOLERANCE,
    WINDOW_SECONDS,
    backfill,
    deep_backfill,
    history_tsdb,
    iso,
    kube,
    prometheus,
    rollup_figures,
    truth,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_backfill_equals_deep_backfill_and_the_scenario(prometheus, kube, settings):  # noqa: F811
    backfill(prometheus, kube, settings)
    said = deep_backfill(prometheus, kube, settings)

    assert "4 hours deep-backfilled" in said, said
    # No per-window rows: every hour is a rollup, marked as such.
    assert not GpuUsage.objects.filter(cluster__name="deep").exists()
    hours = RollupHour.objects.filter(cluster__name="deep")
    assert sorted(hours.values_list("hour", "usage_pruned")) == [
        (START + timedelta(hours=index), True) for index in range(4)
    ]
    windows, deep = rollup_figures("hist"), rollup_figures("deep")
    assert sorted(set(windows) - set(deep)) == []
    assert sorted(set(deep) - set(windows)) == []
    for identity, figures in windows.items():
        for figure, value in figures.items():
            got = deep[identity][figure]
            assert got == pytest.approx(value, rel=TOLERANCE, abs=1e-6), (identity, figure)
    # And the scenario's own figures, hour by hour, for queues, cohorts, namespaces, workloads.
    for index in range(4):
        hour = START + timedelta(hours=index)
        for (scope, key), figures in truth(index * 60, (index + 1) * 60).items():
            got = deep.get((scope, key, hour), {})
            for figure, value in figures.items():
                assert got.get(figure, 0.0) == pytest.approx(value, rel=TOLERANCE, abs=1e-6), (
                    scope,
                    key,
                    hour,
                    figure,
                )


def test_a_second_run_resumes_with_nothing_left_to_do(prometheus, kube, settings):  # noqa: F811
    deep_backfill(prometheus, kube, settings)
    before = rollup_figures("deep")
    with time_machine.travel(NOW + timedelta(days=2), tick=True):
        out = StringIO()
        call_command(
            "collect_metrics", cluster="deep", start=iso(START), end=iso(NOW), no_progress=True,
            stdout=out,
        )  # fmt: skip
    assert "0 hours deep-backfilled" in out.getvalue()
    assert "4 already done" in out.getvalue()
    assert rollup_figures("deep") == before
