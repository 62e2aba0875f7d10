"""Hours before the install from Kueue's metrics, in a real Prometheus (promtool backfill).

The scenario, all on 2026-06-01 UTC, one sample a minute from 00:00 to 04:00:

* 01:20 ClusterQueue team-a admits 4 workloads that waited 30, 50, 100 and 700 s (LocalQueue
  team-a/team-a-queue the same);
* 02:20 team-a admits 2 that waited 10 and 20 s; one team-a workload is evicted by preemption
  (team-b preempting, InCohortReclamation) and one for PodsReadyTimeout;
* ClusterQueue ``broken`` exports NaN; one series has no ``cluster_queue`` label.

Expected values are computed by hand below with Prometheus's bucket interpolation. ``increase()``
extrapolates every series of a window by the same factor, so the quantiles (ratios of bucket
counts) and the mean (sum / count) are exact, and the counts round to the events.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command

from fleet.models import Cluster
from quotas.models import ClusterQueue, Team
from servicelevels.figures import levels
from servicelevels.metrics import bucket_quantile
from servicelevels.models import AdmissionRecord, QueueMetricsHour
from tests.prometheus_server import (
    OpenMetricsWriter,
    PrometheusServer,
    copy_tsdb,
    create_blocks,
)

T0 = datetime(2026, 6, 1, 0, 0, tzinfo=UTC)
END = T0 + timedelta(hours=4)
BOUNDS = [2.0**n for n in range(14)]  # 1 s .. 8192 s, then +Inf
EVENTS = {  # minute -> (waits admitted in team-a, evictions by reason)
    80: ([30.0, 50.0, 100.0, 700.0], {}),
    140: ([10.0, 20.0], {"Preempted": 1, "PodsReadyTimeout": 1}),
}


def hour(n: int) -> datetime:
    return T0 + timedelta(hours=n)


def write_scenario(path: Path) -> None:
    minutes = range(0, 4 * 60 + 1)
    waits_by_minute: list[list[float]] = []
    evicted: dict[str, list[int]] = {"Preempted": [], "PodsReadyTimeout": []}
    seen: list[float] = []
    counts = {"Preempted": 0, "PodsReadyTimeout": 0}
    for minute in minutes:
        if minute in EVENTS:
            waits, evictions = EVENTS[minute]
            seen = seen + waits
            for reason, n in evictions.items():
                counts[reason] += n
        waits_by_minute.append(list(seen))
        for reason in evicted:
            evicted[reason].append(counts[reason])

    def ts(minute: int) -> float:
        return (T0 + timedelta(minutes=minute)).timestamp()

    cq = {"cluster_queue": "team-a"}
    lq = {"namespace": "team-a", "name": "team-a-queue"}
    with OpenMetricsWriter(path) as out:
        out.family("kueue_admitted_workloads_total")
        for minute in minutes:
            out.sample(cq, len(waits_by_minute[minute]), ts(minute))
            out.sample({"cluster_queue": "broken"}, float("nan"), ts(minute))
            out.sample({"replica_role": "leader"}, 5.0 + minute, ts(minute))  # no queue label
        for metric, labels in (
            ("kueue_admission_wait_time_seconds", cq),
            ("kueue_local_queue_admission_wait_time_seconds", lq),
        ):
            out.family(f"{metric}_bucket")
            for minute in minutes:
                waits = waits_by_minute[minute]
                for bound in BOUNDS:
                    le = {**labels, "le": repr(bound)}
                    out.sample(le, sum(1 for w in waits if w <= bound), ts(minute))
                out.sample({**labels, "le": "+Inf"}, len(waits), ts(minute))
            out.family(f"{metric}_sum")
            for minute in minutes:
                out.sample(labels, sum(waits_by_minute[minute]), ts(minute))
            out.family(f"{metric}_count")
            for minute in minutes:
                out.sample(labels, len(waits_by_minute[minute]), ts(minute))
        out.family("kueue_evicted_workloads_total")
        for minute in minutes:
            for reason, values in evicted.items():
                labels = {**cq, "reason": reason, "underlying_cause": ""}
                out.sample(labels, values[minute], ts(minute))
        out.family("kueue_preempted_workloads_total")
        for minute in minutes:
            labels = {"preempting_cluster_queue": "team-b", "reason": "InCohortReclamation"}
            out.sample(labels, evicted["Preempted"][minute], ts(minute))
            follower = {**labels, "preempting_cluster_queue": "team-b", "replica_role": "follower"}
            out.sample(follower, 100.0 * evicted["Preempted"][minute], ts(minute))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    work = tmp_path_factory.mktemp("kueue-metrics")
    write_scenario(work / "kueue.om")
    create_blocks(work / "kueue.om", work / "pristine")
    server = PrometheusServer(copy_tsdb(work / "pristine", work / "tsdb"))
    yield server.start()
    server.cleanup()


@pytest.fixture
def prom_cluster(db: None, prometheus: PrometheusServer) -> Cluster:
    cluster = Cluster.objects.create(name="prom", prometheus_url=prometheus.url)
    team = Team.objects.create(name="alpha")
    ClusterQueue.objects.create(cluster=cluster, name="team-a", cohort_name="research", team=team)
    return cluster


def fill(cluster: Cluster, *extra: str) -> None:
    call_command(
        "fill_queue_metrics",
        "--cluster",
        cluster.name,
        "--start",
        T0.isoformat(),
        "--end",
        END.isoformat(),
        *extra,
    )


def test_the_interpolation_is_prometheus_s():
    # Hour 01: waits 30, 50, 100, 700 s -> cumulative counts at le 32: 1, 64: 2, 128: 3, 1024: 4.
    buckets = {"16.0": 0, "32.0": 1, "64.0": 2, "128.0": 3, "512.0": 3, "1024.0": 4, "+Inf": 4}
    assert bucket_quantile(0.5, buckets) == 64.0  # rank 2 in (32, 64]: 32 + 32 * 1/1
    assert bucket_quantile(0.9, buckets) == pytest.approx(819.2)  # rank 3.6: 512 + 512 * 0.6
    assert bucket_quantile(0.95, buckets) == pytest.approx(921.6)  # rank 3.8: 512 + 512 * 0.8
    assert bucket_quantile(0.5, {"1.0": 0, "+Inf": 0}) is None
    assert bucket_quantile(0.5, {"1.0": 0, "+Inf": 2}) == 1.0  # in +Inf: the highest bound
    assert bucket_quantile(0.5, {"1.0": 2}) is None  # no +Inf bucket: not a histogram


def test_hours_from_kueue_metrics_match_the_hand_computed_waits(prom_cluster, caplog):
    with caplog.at_level(logging.INFO, logger="servicelevels.metrics"):
        fill(prom_cluster)
    stored = {
        (h.scope, h.name, h.hour): h for h in QueueMetricsHour.objects.filter(cluster=prom_cluster)
    }
    first = stored[("cluster_queue", "team-a", hour(1))]
    assert first.admissions == 4
    # histogram_quantile in Prometheus, over the hour's increase of the buckets.
    assert first.wait_seconds_p50 == pytest.approx(64.0)
    assert first.wait_seconds_p90 == pytest.approx(819.2)
    assert first.wait_seconds_p95 == pytest.approx(921.6)
    assert first.wait_seconds_mean == pytest.approx(880.0 / 4)
    assert first.evictions == {}
    second = stored[("cluster_queue", "team-a", hour(2))]
    assert second.admissions == 2
    assert second.wait_seconds_p50 == pytest.approx(16.0)  # rank 1 in (8, 16]: the bound
    assert second.evictions == {"PodsReadyTimeout": 1, "Preempted": 1}
    # Follower replicas are left out: one preemption, not 101.
    assert stored[("cluster_queue", "team-b", hour(2))].preemptions_made == {
        "InCohortReclamation": 1
    }
    local = stored[("local_queue", "team-a/team-a-queue", hour(1))]
    assert (local.admissions, local.wait_seconds_p50) == (4, pytest.approx(64.0))
    assert stored[("cluster_queue", "team-a", hour(0))].wait_seconds_p50 is None  # NaN: skipped
    assert not any(name == "broken" for _, name, _ in stored)
    assert "no_queue_label" in caplog.text and "not_a_number" in caplog.text

    # Idempotent: a second fill writes the same hours, and --resume has nothing left to read.
    before = sorted((k, h.admissions, h.wait_seconds_p95) for k, h in stored.items())
    fill(prom_cluster)
    fill(prom_cluster, "--resume")
    again = QueueMetricsHour.objects.filter(cluster=prom_cluster)
    assert (
        sorted(((h.scope, h.name, h.hour), h.admissions, h.wait_seconds_p95) for h in again)
        == before
    )


def test_levels_use_the_metrics_before_the_first_record(prom_cluster):
    fill(prom_cluster)
    # The first record of the cluster was queued at 03:00: earlier periods come from the metrics.
    AdmissionRecord.objects.create(
        cluster=prom_cluster,
        workload_uid="w1",
        namespace="team-a",
        workload_name="w1",
        cluster_queue_name="team-a",
        queued_at=hour(3),
        admitted_at=hour(3) + timedelta(seconds=90),
    )
    rows = levels(T0, END, step="hour")
    team_a = [row for row in rows if row.group == "team-a"]
    assert [row.source for row in team_a] == ["metrics", "metrics", "metrics", "records"]
    one = team_a[1]
    assert (one.admissions, one.wait_seconds_p50, one.wait_seconds_mean) == (4, 64.0, 220.0)
    assert (one.wait_seconds_max, one.pending_at_end, one.running_delay_seconds_p50) == (
        None,
        None,
        None,
    )
    two = team_a[2]
    assert (two.preemptions, two.evictions["PodsReadyTimeout"]) == (1, 1)
    assert team_a[3].wait_seconds_p50 == 90.0

    # Two hours together: the summed buckets, 10, 20, 30, 50, 100, 700 s: counts at le 16: 1,
    # 32: 3, 64: 4, 128: 5, 1024: 6. p50 = rank 3 -> 32; p95 = rank 5.7 -> 512 + 512 * 0.7.
    (both,) = [r for r in levels(hour(1), hour(3)) if r.group == "team-a"]
    assert both.source == "metrics" and both.admissions == 6
    assert both.wait_seconds_p50 == pytest.approx(32.0)
    assert both.wait_seconds_p95 == pytest.approx(870.4)
    assert both.wait_seconds_mean == pytest.approx(910.0 / 6)

    by_team = [r for r in levels(hour(1), hour(3), group_by="team") if r.group == "alpha"]
    assert [(r.source, r.admissions) for r in by_team] == [("metrics", 6)]
    by_lq = levels(hour(1), hour(2), group_by="local_queue")
    assert [(r.group, r.admissions) for r in by_lq] == [("team-a/team-a-queue", 4)]
    # Team visibility: a user of no team sees no metrics rows of alpha's queue.
    assert [r for r in levels(hour(1), hour(3), teams=[]) if r.source == "metrics"] == []


def test_the_task_fills_the_range_and_resumes_after_the_newest_hour(prom_cluster):
    from servicelevels.tasks import fill_queue_metrics

    written = fill_queue_metrics(prom_cluster.pk, T0.isoformat(), END.isoformat())
    assert written == QueueMetricsHour.objects.filter(cluster=prom_cluster).count() > 0
    assert fill_queue_metrics(prom_cluster.pk, T0.isoformat(), END.isoformat()) == 0
    assert fill_queue_metrics(prom_cluster.pk, "not a time", END.isoformat()) == 0
