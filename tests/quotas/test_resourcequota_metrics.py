"""Quota history of a ResourceQuota cluster from kube-state-metrics' ``kube_resourcequota``
(``quotas.constants.RESOURCEQUOTA_QUERIES``, docs/prometheus.md), on a real Prometheus loaded
with the fixture's ``kube-state-metrics.sample.prom`` (tests/fixtures/resourcequota).

The history, one scrape a minute, as the fixture README tells it:

* 08:00-12:00 (the fixtures' "now" is 12:00): every quota series of the fixture file, except
  that nlp's GPU quota was 10 in use from 08:00:10 to 11:00:00 (bert-eval's pod, gone since),
  then 8.
* vision's CPU and memory quota (``compute-quota``) has no GPU line: no queue, no sample.

Expected figures, by hand from the README: vision nominal 16, in use 16; nlp 8 and 8 (10 before
11:00); speech 4 and 0; borrowed and lent always 0.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fleet.models import Cluster
from ledger.collector import Collector
from ledger.deep import DeepBackfill
from quotas.choices import SampleSource
from quotas.constants import RESOURCEQUOTA_QUERIES
from quotas.models import ClusterQueueSample
from quotas.sync import sync_cluster
from tests.prometheus_server import PrometheusServer, copy_tsdb, create_blocks, write_families
from tests.scheduler_fixtures import load_scheduler_fixtures

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "resourcequota"
GPU = "nvidia.com/gpu"
NOW = datetime(2026, 8, 22, 12, tzinfo=UTC)
START = datetime(2026, 8, 22, 8, tzinfo=UTC)
BERT_EVAL_GONE = datetime(2026, 8, 22, 11, tzinfo=UTC)
WINDOW = 60
# namespace -> (nominal, in use now)
README = {"vision": (16, 16), "nlp": (8, 8), "speech": (4, 0)}


def quota_series() -> list[tuple[dict[str, str], float]]:
    """(labels, value) of the fixture's ``kube_resourcequota`` lines."""
    found = []
    for line in (FIXTURE / "kube-state-metrics.sample.prom").read_text().splitlines():
        matched = re.fullmatch(r"kube_resourcequota\{(.*)\} (\S+)", line)
        if matched:
            found.append((dict(re.findall(r'(\w+)="([^"]*)"', matched[1])), float(matched[2])))
    return found


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    work = tmp_path_factory.mktemp("rq-history")
    samples: list[tuple[dict[str, str], float, float]] = []
    at = START.timestamp()
    while at <= NOW.timestamp():
        for labels, value in quota_series():
            nlp_gpu_used = (labels["namespace"], labels["resource"], labels["type"]) == (
                "nlp",
                "requests.nvidia.com/gpu",
                "used",
            )
            if nlp_gpu_used and at < BERT_EVAL_GONE.timestamp():
                value = 10.0
            samples.append((labels, value, at))
        at += 60
    write_families(work / "history.om", {"kube_resourcequota": samples})
    create_blocks(work / "history.om", work / "pristine")
    server = PrometheusServer(copy_tsdb(work / "pristine", work / "tsdb")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster(prometheus: PrometheusServer, make_kube_api: Any, db: None) -> Cluster:
    """The cluster synced from the fixtures (the live figures of "now"), source detected."""
    api = make_kube_api(load=False, kueue_versions=(), serve_resource_quotas=True)
    load_scheduler_fixtures(api, "resourcequota")
    found = Cluster.objects.create(name="gpu-plain", prometheus_url=prometheus.url)
    run = sync_cluster(found.pk)
    assert run.status == "success", run.error
    return Cluster.objects.get(pk=found.pk)


def samples(cluster: Cluster, source: str, at: datetime | None = None) -> dict[str, Any]:
    found = ClusterQueueSample.objects.filter(
        cluster_queue__cluster=cluster, resource=GPU, source=source
    )
    if at is not None:
        found = found.filter(sampled_at=at)
    return {s.cluster_queue.name: s for s in found.select_related("cluster_queue")}


def test_the_queries_read_only_gpu_quota_lines() -> None:
    for promql in RESOURCEQUOTA_QUERIES.values():
        assert 'resource="requests.nvidia.com/gpu"' in promql


def test_backfilled_windows_give_the_readme_and_the_live_figures(cluster: Cluster) -> None:
    live = samples(cluster, SampleSource.API)
    assert sorted(live) == sorted(README)

    Collector(cluster, window_seconds=WINDOW).backfill(NOW - timedelta(minutes=5), NOW)

    got = samples(cluster, SampleSource.METRICS, NOW)
    assert sorted(got) == sorted(README)
    for name, (nominal, in_use) in README.items():
        sample = got[name]
        assert sample.nominal == Decimal(nominal), name
        assert sample.total == Decimal(in_use), name
        assert (sample.borrowing_limit, sample.lending_limit) == (0, 0), name
        assert (sample.borrowed, sample.lent) == (0, 0), name
        for figure in ("nominal", "borrowing_limit", "lending_limit", "total", "borrowed", "lent"):
            assert getattr(sample, figure) == getattr(live[name], figure), (name, figure)
        # kube-state-metrics counts no pods per quota: unknown, not 0.
        assert sample.pending_workloads is None and sample.pending_demand is None, name


def test_a_window_before_the_deleted_pod_left_shows_its_gpus_in_use(cluster: Cluster) -> None:
    at = datetime(2026, 8, 22, 10, tzinfo=UTC)

    Collector(cluster, window_seconds=WINDOW).backfill(at - timedelta(minutes=2), at)

    got = samples(cluster, SampleSource.METRICS, at)
    assert got["nlp"].total == 10 and got["nlp"].nominal == 8
    # Above its hard limit for the quota is not borrowing: a ResourceQuota lends nothing.
    assert got["nlp"].borrowed == 0 and got["vision"].total == 16


def test_a_deep_backfilled_hour_gives_the_same_samples(cluster: Cluster) -> None:
    live = samples(cluster, SampleSource.API)

    DeepBackfill(cluster, window_seconds=WINDOW, workers=1).run(NOW - timedelta(hours=1), NOW)

    got = samples(cluster, SampleSource.METRICS, NOW)
    assert sorted(got) == sorted(live)
    for name, sample in got.items():
        for figure in ("nominal", "total", "borrowed", "lent"):
            assert getattr(sample, figure) == getattr(live[name], figure), (name, figure)
    counts: dict[str, int] = defaultdict(int)
    for sample in ClusterQueueSample.objects.filter(
        cluster_queue__cluster=cluster, source=SampleSource.METRICS
    ).select_related("cluster_queue"):
        counts[sample.cluster_queue.name] += 1
    assert counts == {name: 60 for name in README}
