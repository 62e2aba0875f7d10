"""Collection against a real Prometheus backfilled with a generated fleet (see conftest.py)."""

from __future__ import annotations

from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Count

from fleet import constants as c
from fleet.choices import ActivitySource, IngestSource, IngestStatus
from fleet.models import Cluster, CollectionCursor, IngestRun
from fleet.prometheus import PrometheusClient, PrometheusError
from ledger.choices import RollupScope
from ledger.collector import ClaimLostError, Collector
from ledger.models import GpuUsage, HourlyRollup
from tests.fleet.conftest import (
    LATE_POD_START,
    NAN_AT,
    T0,
    WINDOW_SECONDS,
    Figures,
    ground_truth,
    start_server,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

TOLERANCE = 0.005
# A run at this moment collects every window up to T0 + 2h (windows close 30 s late).
AFTER_DATA = T0 + timedelta(hours=2, seconds=c.COLLECT_DELAY_SECONDS + 1)


@pytest.fixture(autouse=True)
def _collection_settings(settings):
    settings.GPULEDGER_COLLECT_SECONDS = WINDOW_SECONDS
    settings.GPULEDGER_CATCHUP_HOURS = 24
    settings.GPULEDGER_IDLE_THRESHOLD = 0.01


def make_cluster(name: str, url: str, cursor_at: datetime | None = T0) -> Cluster:
    cluster = Cluster.objects.create(name=name, prometheus_url=url)
    if cursor_at is not None:
        CollectionCursor.objects.create(
            cluster=cluster, source=IngestSource.DCGM, last_window_end=cursor_at
        )
    return cluster


def at(minutes: float) -> datetime:
    """A run moment that collects windows up to T0 + ``minutes``."""
    return T0 + timedelta(minutes=minutes, seconds=c.COLLECT_DELAY_SECONDS + 1)


def rolled_up(cluster: Cluster, scope: str, key: str, hour: datetime) -> Figures:
    figures = Figures()
    for row in HourlyRollup.objects.filter(cluster=cluster, scope=scope, key=key, hour=hour):
        figures.capacity += row.capacity_gpu_hours
        figures.allocated += row.allocated_gpu_hours
        figures.telemetry += row.telemetry_gpu_hours
        figures.active += row.active_gpu_hours
        figures.idle += row.idle_gpu_hours
    return figures


def assert_figures(actual: Figures, expected: Figures, what: str, capacity: bool = True) -> None:
    def close(a: float, e: float) -> bool:
        return a == pytest.approx(e, rel=TOLERANCE, abs=1e-9)

    names = ["allocated", "telemetry", "active", "idle"] + (["capacity"] if capacity else [])
    wrong = {
        name: (getattr(actual, name), getattr(expected, name))
        for name in names
        if not close(getattr(actual, name), getattr(expected, name))
    }
    assert not wrong, f"{what}: (actual, expected) {wrong}"
    if expected.telemetry:
        assert close(actual.utilization, expected.utilization), what


def usage_snapshot(cluster: Cluster) -> list[tuple]:
    return sorted(
        GpuUsage.objects.filter(cluster=cluster).values_list(
            "window_end", "gpu_key", "namespace", "pod", "gpus", "activity", "allocated"
        )
    )


def rollup_snapshot(cluster: Cluster) -> list[tuple]:
    return sorted(
        HourlyRollup.objects.filter(cluster=cluster).values_list(
            "scope",
            "key",
            "hour",
            "flavor",
            "gpu_model",
            "allocated_gpu_hours",
            "active_gpu_hours",
            "capacity_gpu_hours",
        )
    )


# --- figures against ground truth ------------------------------------------------------------


def test_catch_up_rolls_up_hours_matching_ground_truth_with_exported_labels(
    alpha_fleet, alpha_prometheus
):
    # given a cursor at T0 and two hours of data
    cluster = make_cluster("alpha", alpha_prometheus.url)
    # when one run catches up
    result = Collector(cluster).run(now=AFTER_DATA)
    # then every window was collected, in order, once
    assert result.windows == 120
    ends = list(
        IngestRun.objects.filter(cluster=cluster)
        .order_by("pk")
        .values_list("window_end", flat=True)
    )
    assert ends == [T0 + timedelta(minutes=m) for m in range(1, 121)]
    assert CollectionCursor.objects.get(cluster=cluster).last_window_end == T0 + timedelta(hours=2)
    for hour in (T0, T0 + timedelta(hours=1)):
        truth = ground_truth(alpha_fleet.scenario, hour)
        fleet = rolled_up(cluster, RollupScope.FLEET, "alpha", hour)
        assert_figures(fleet, truth.fleet, f"fleet {hour}")
        for namespace, expected in truth.namespaces.items():
            actual = rolled_up(cluster, RollupScope.NAMESPACE, namespace, hour)
            assert_figures(actual, expected, f"{namespace} {hour}", capacity=False)
        for node, expected in truth.nodes.items():
            assert_figures(rolled_up(cluster, RollupScope.NODE, node, hour), expected, node)
    # the pod that starts at T0 + 90 min makes the two hours differ
    first, second = (
        ground_truth(alpha_fleet.scenario, h).fleet for h in (T0, T0 + timedelta(hours=1))
    )
    assert second.allocated > first.allocated


def test_catch_up_matches_ground_truth_with_plain_labels_and_lowercase_hostname(
    beta_fleet, beta_prometheus
):
    cluster = make_cluster("beta", beta_prometheus.url)
    Collector(cluster).run(now=AFTER_DATA)
    for hour in (T0, T0 + timedelta(hours=1)):
        truth = ground_truth(beta_fleet.scenario, hour)
        assert_figures(rolled_up(cluster, RollupScope.FLEET, "beta", hour), truth.fleet, "beta")
        for namespace, expected in truth.namespaces.items():
            actual = rolled_up(cluster, RollupScope.NAMESPACE, namespace, hour)
            assert_figures(actual, expected, namespace, capacity=False)
    assert GpuUsage.objects.filter(cluster=cluster, pod="train-x").exists()
    assert not GpuUsage.objects.filter(cluster=cluster, namespace="gpu-operator").exists()


def test_per_window_rows_follow_the_correctness_rules(alpha_prometheus):
    cluster = make_cluster("alpha", alpha_prometheus.url, cursor_at=T0 + timedelta(minutes=29))
    Collector(cluster).run(now=at(32))
    window = GpuUsage.objects.filter(cluster=cluster, window_end=T0 + timedelta(minutes=31))
    # time-sliced GPU: two pods, half a GPU each, flagged shared, capacity counted once
    shared = list(window.filter(pod__in=["share-0", "share-1"]))
    assert [row.gpus for row in shared] == [0.5, 0.5]
    assert all(row.shared for row in shared)
    assert sum(row.capacity_gpus for row in shared) == 1.0
    # no SM_ACTIVE series: GR_ENGINE_ACTIVE with the source recorded
    gr = window.get(pod="grjob-0")
    assert gr.activity_source == ActivitySource.GR_ENGINE_ACTIVE
    assert gr.sm_active is None and gr.activity == gr.gr_engine_active
    # MIG instances count by slices
    assert window.get(pod="mig-big-0").gpus == pytest.approx(3 / 7)
    assert window.get(pod="mig-small-0").gpus == pytest.approx(1 / 7)
    # allocated without DCGM series: no telemetry, never idle
    lost = window.get(pod="lost-0")
    assert lost.allocated and lost.gpus == 2 and lost.activity is None and lost.gpu_key == ""
    assert not window.idle().filter(pod="lost-0").exists()
    # the pending pod (node="") holds nothing; the exporter pod is no workload
    assert not window.filter(pod__in=["pending-0", "nvidia-dcgm-exporter-h100-a"]).exists()
    # the NaN sample: that GPU-window has no telemetry, and the run says it skipped a sample
    nan_end = T0 + timedelta(minutes=31)
    assert NAN_AT <= nan_end and NAN_AT > nan_end - timedelta(seconds=WINDOW_SECONDS)
    nan_row = window.get(pod="nanjob-0")
    assert nan_row.allocated and nan_row.activity is None
    run = IngestRun.objects.get(cluster=cluster, window_end=nan_end)
    assert run.status == IngestStatus.PARTIAL
    assert run.nonfinite_skipped >= 1
    assert IngestRun.objects.get(cluster=cluster, window_end=T0 + timedelta(minutes=30)).status == (
        IngestStatus.SUCCESS
    )


def test_first_run_without_cursor_collects_only_the_last_complete_window(alpha_prometheus):
    cluster = make_cluster("alpha", alpha_prometheus.url, cursor_at=None)
    result = Collector(cluster).run(now=at(45))
    assert result.windows == 1
    assert list(IngestRun.objects.filter(cluster=cluster).values_list("window_end", flat=True)) == [
        T0 + timedelta(minutes=45)
    ]
    assert CollectionCursor.objects.get(cluster=cluster).last_window_end == T0 + timedelta(
        minutes=45
    )


def test_catch_up_is_bounded_by_the_catch_up_setting(alpha_prometheus, settings):
    settings.GPULEDGER_CATCHUP_HOURS = 1
    cluster = make_cluster("alpha", alpha_prometheus.url, cursor_at=T0)
    result = Collector(cluster).run(now=AFTER_DATA)
    assert result.windows == 60
    first = IngestRun.objects.filter(cluster=cluster).order_by("window_end").first()
    assert first.window_end == T0 + timedelta(hours=1, minutes=1)


# --- idempotence, chunking, claims -----------------------------------------------------------


def test_rerunning_windows_in_small_range_chunks_changes_nothing(alpha_prometheus, monkeypatch):
    cluster = make_cluster("alpha", alpha_prometheus.url, cursor_at=T0 + timedelta(minutes=80))
    Collector(cluster).run(now=at(100))
    usage, rollups = usage_snapshot(cluster), rollup_snapshot(cluster)
    assert len({row[0] for row in usage}) == 20
    # when the same windows are collected again, through range queries of 3 windows each
    monkeypatch.setattr(c, "RANGE_POINTS_PER_QUERY", 3 * 40)
    CollectionCursor.objects.filter(cluster=cluster).update(
        last_window_end=T0 + timedelta(minutes=80)
    )
    result = Collector(cluster).run(now=at(100))
    # then the rows are the same, with no duplicates
    assert result.windows == 20
    assert usage_snapshot(cluster) == usage
    assert rollup_snapshot(cluster) == rollups
    duplicates = (
        GpuUsage.objects.filter(cluster=cluster)
        .values("window_end", "gpu_key", "namespace", "pod")
        .annotate(n=Count("holding"))
        .filter(n__gt=1)
    )
    assert not duplicates.exists()
    # the late pod shows up from its first window on
    assert not GpuUsage.objects.filter(cluster=cluster, pod="late-0", window_end=LATE_POD_START)
    assert GpuUsage.objects.filter(
        cluster=cluster, pod="late-0", window_end=LATE_POD_START + timedelta(minutes=1)
    ).exists()


def test_a_claimed_cursor_is_not_collected_twice_and_an_expired_claim_is_taken_over(
    alpha_prometheus,
):
    cluster = make_cluster("alpha", alpha_prometheus.url, cursor_at=T0 + timedelta(minutes=10))
    first, second = Collector(cluster, worker="a"), Collector(cluster, worker="b")
    # given worker a holds the claim
    assert first.claim()
    # when worker b runs on the same windows, it collects nothing
    result = second.run(now=at(12))
    assert not result.claimed and result.windows == 0
    assert not IngestRun.objects.filter(cluster=cluster).exists()
    # when a's lease has expired, b takes over and collects
    CollectionCursor.objects.filter(cluster=cluster).update(
        claimed_until=datetime(2000, 1, 1, tzinfo=T0.tzinfo)
    )
    assert second.run(now=at(12)).windows == 2
    # and a, whose claim is gone, cannot advance the cursor
    with pytest.raises(ClaimLostError):
        first._advance(Collector(cluster)._pending_windows(T0, _window(13))[0], False)
    assert IngestRun.objects.filter(cluster=cluster).count() == 2
    cursor = CollectionCursor.objects.get(cluster=cluster)
    assert cursor.claimed_by == "" and cursor.last_window_end == T0 + timedelta(minutes=12)


def _window(minutes: int):
    from core.timewindows import Window

    end = T0 + timedelta(minutes=minutes)
    return Window(end - timedelta(seconds=WINDOW_SECONDS), end)


# --- outage -------------------------------------------------------------------------------------


def test_after_an_outage_the_next_run_fills_every_missed_window_in_order(alpha_fleet, tmp_path):
    server = start_server(alpha_fleet, tmp_path)
    try:
        cluster = make_cluster("alpha", server.url, cursor_at=T0)
        assert Collector(cluster).run(now=at(10)).windows == 10
        # Prometheus goes away for three beat ticks
        server.stop()
        for minute in (11, 12, 13):
            with pytest.raises(PrometheusError) as failure:
                Collector(cluster).run(now=at(minute))
            assert not failure.value.permanent
        failed = IngestRun.objects.filter(cluster=cluster, status=IngestStatus.FAILED)
        assert failed.count() == 3
        assert all("cannot connect" in run.error for run in failed)
        cursor = CollectionCursor.objects.get(cluster=cluster)
        assert cursor.last_window_end == T0 + timedelta(minutes=10) and cursor.claimed_by == ""
        # it comes back; the next run fills every missed window, oldest first
        server.start()
        result = Collector(cluster).run(now=at(20))
    finally:
        server.cleanup()
    assert result.windows == 10
    ok = IngestRun.objects.filter(cluster=cluster).exclude(status=IngestStatus.FAILED)
    ends = list(ok.order_by("pk").values_list("window_end", flat=True))
    assert ends == [T0 + timedelta(minutes=m) for m in range(1, 21)]
    per_window = (
        GpuUsage.objects.filter(cluster=cluster).values("window_end").annotate(n=Count("holding"))
    )
    assert len(per_window) == 20 and len({row["n"] for row in per_window}) == 1
    assert HourlyRollup.objects.filter(cluster=cluster, scope=RollupScope.FLEET, hour=T0).exists()


# --- backfill command ---------------------------------------------------------------------------


def test_backfill_command_resumes_after_an_interruption(alpha_prometheus, monkeypatch):
    cluster = make_cluster("alpha", alpha_prometheus.url, cursor_at=None)
    start, end = T0.isoformat(), (T0 + timedelta(minutes=30)).isoformat()
    real_write = Collector._write
    calls = {"n": 0}

    def interrupt_after_twelve(self, *args, **kwargs):
        if calls["n"] == 12:
            raise KeyboardInterrupt
        calls["n"] += 1
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Collector, "_write", interrupt_after_twelve)
    with pytest.raises(CommandError, match="resume"):
        call_command("collect_metrics", cluster="alpha", start=start, end=end, no_progress=True)
    assert IngestRun.objects.succeeded().filter(cluster=cluster).count() == 12
    monkeypatch.setattr(Collector, "_write", real_write)
    out = StringIO()
    call_command(
        "collect_metrics", cluster="alpha", start=start, end=end, no_progress=True, stdout=out
    )
    assert "18 windows collected, 12 already done" in out.getvalue()
    ends = (
        IngestRun.objects.succeeded().filter(cluster=cluster).values_list("window_end", flat=True)
    )
    assert sorted(ends) == [T0 + timedelta(minutes=m) for m in range(1, 31)]
    # a fresh cursor follows the contiguous backfill
    assert CollectionCursor.objects.get(cluster=cluster).last_window_end == T0 + timedelta(
        minutes=30
    )


def test_backfill_command_rejects_naive_datetimes(alpha_prometheus):
    make_cluster("alpha", alpha_prometheus.url)
    with pytest.raises(CommandError, match="UTC offset"):
        call_command(
            "collect_metrics", cluster="alpha", start="2026-01-05T00:00:00", end="2026-01-05T01:00Z"
        )


def test_collect_command_creates_the_cluster_from_a_prometheus_url(alpha_prometheus):
    with pytest.raises(CommandError, match="no cluster"):
        call_command("collect_metrics", cluster="fresh")
    out = StringIO()
    call_command(
        "collect_metrics",
        cluster="fresh",
        prometheus_url=alpha_prometheus.url,
        start=(T0 + timedelta(minutes=5)).isoformat(),
        end=(T0 + timedelta(minutes=7)).isoformat(),
        no_progress=True,
        stdout=out,
    )
    cluster = Cluster.objects.get(name="fresh")
    assert cluster.prometheus_url == alpha_prometheus.url
    assert "2 windows collected" in out.getvalue()


# --- the client against the real server --------------------------------------------------------


def test_real_prometheus_answers_a_bad_query_with_a_permanent_error(alpha_prometheus):
    client = PrometheusClient(alpha_prometheus.url, timeout=5)
    with pytest.raises(PrometheusError) as failure:
        client.query("sum by (", T0)
    assert failure.value.permanent and failure.value.status == 400
    rows = client.query_range("DCGM_FI_DEV_GPU_UTIL", T0, T0 + timedelta(minutes=2), 60)
    assert rows and all(len(item["values"]) == 3 for item in rows)


# --- tasks --------------------------------------------------------------------------------------


def test_collect_metrics_all_collects_only_enabled_clusters_with_a_url(
    alpha_prometheus, monkeypatch
):
    from config.celery import app
    from ledger.tasks import collect_metrics_all

    enabled = make_cluster("alpha", alpha_prometheus.url, cursor_at=None)
    disabled = Cluster.objects.create(
        name="off", prometheus_url=alpha_prometheus.url, collect_enabled=False
    )
    no_url = Cluster.objects.create(name="nourl")
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        assert collect_metrics_all() == [enabled.pk]
    finally:
        app.conf.task_always_eager = eager
    assert IngestRun.objects.filter(cluster=enabled).count() == 1
    assert not IngestRun.objects.filter(cluster__in=[disabled, no_url]).exists()


def test_collect_metrics_returns_permanent_errors_without_retrying(monkeypatch):
    from ledger.tasks import collect_metrics

    cluster = Cluster.objects.create(
        name="badauth",
        prometheus_url="http://127.0.0.1:9",
        prometheus_auth="bearer",
        prometheus_secret_env="GL_MISSING_TOKEN",
    )
    monkeypatch.delenv("GL_MISSING_TOKEN", raising=False)
    answer = collect_metrics.apply(args=[cluster.pk]).get()
    assert answer["permanent"] is True
    run = IngestRun.objects.get(cluster=cluster)
    assert run.status == IngestStatus.FAILED and "GL_MISSING_TOKEN" in run.error


def test_prune_usage_drops_run_records_older_than_the_usage_retention(settings):
    from django.utils import timezone

    from ledger.tasks import prune_usage

    settings.GPULEDGER_USAGE_RETENTION_DAYS = 14
    now = timezone.now()
    old = IngestRun.objects.create(source=IngestSource.DCGM, started_at=now - timedelta(days=15))
    new = IngestRun.objects.create(source=IngestSource.DCGM, started_at=now - timedelta(days=13))
    assert prune_usage()["ingest_runs"] == 1
    assert list(IngestRun.objects.values_list("pk", flat=True)) == [new.pk]
    assert not IngestRun.objects.filter(pk=old.pk).exists()


def test_the_command_collects_the_cluster_the_environment_describes(alpha_prometheus, settings):
    # given: a single-cluster install described by PROMETHEUS_URL alone, no cluster row yet
    settings.PROMETHEUS_URL = alpha_prometheus.url
    settings.KUBECONFIG = ""
    settings.GPULEDGER_CLUSTER_NAME = "onprem"
    out = StringIO()

    # when: the documented backfill command runs without --cluster
    call_command(
        "collect_metrics",
        start=(T0 + timedelta(minutes=5)).isoformat(),
        end=(T0 + timedelta(minutes=7)).isoformat(),
        no_progress=True,
        stdout=out,
    )

    # then: it used (and created) the environment's cluster, as the Celery tasks do
    assert Cluster.objects.get().name == "onprem"
    assert "onprem: 2 windows collected" in out.getvalue()


def test_the_command_needs_a_cluster_name_when_there_are_several(alpha_prometheus, settings):
    settings.PROMETHEUS_URL = ""
    settings.KUBECONFIG = ""
    make_cluster("alpha", alpha_prometheus.url)
    make_cluster("beta", alpha_prometheus.url)

    expected = r"several clusters \(alpha, beta\); name one with --cluster"
    with pytest.raises(CommandError, match=expected):
        call_command("collect_metrics", no_progress=True)


def test_the_command_says_what_to_set_when_there_is_no_cluster(db, settings):
    settings.PROMETHEUS_URL = ""
    settings.KUBECONFIG = ""

    with pytest.raises(CommandError, match="set PROMETHEUS_URL and/or KUBECONFIG"):
        call_command("collect_metrics", no_progress=True)
