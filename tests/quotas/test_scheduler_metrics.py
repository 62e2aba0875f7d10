"""Quota history of Volcano and KAI clusters from their schedulers' own metrics
(``quotas.constants.VOLCANO_QUERIES`` / ``KAI_QUERIES``, docs/prometheus.md), on a real
Prometheus loaded with the fixtures' ``metrics.sample.prom`` (tests/fixtures/volcano, kai).

Each source's Prometheus holds three stretches of history:

* 11:00-12:00 (the fixtures' "now" is 12:00): the scheduler's queue gauges as the fixture file
  gives them, one scrape a minute. Backfilled windows of it must give the README's queue figures,
  and the live sync's figures of the same moment (the fixtures through the API server).
* 14:00-14:10: the same gauges with one queue's quota NaN and one series without ``queue_name``:
  skipped and counted in the windows' IngestRun.
* 09:00-10:45: kube-state-metrics and DCGM series of the README's deleted pods (tokenizer-bench,
  Running 09:00:05-10:30, gone at 10:45), with no owner series: only the PodGroup annotation
  (``kube_pod_annotations``) joins them to their Workload.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import requests

from fleet.choices import IngestSource, QuotaSource
from fleet.models import Cluster, IngestRun
from ledger.choices import RollupScope
from ledger.collector import Collector
from ledger.deep import DeepBackfill
from ledger.models import GpuUsage, HourlyRollup
from quotas.choices import SampleSource
from quotas.constants import KAI_QUERIES, SOURCE_FLAVOR
from quotas.ingest import QueueSampleRow
from quotas.ingest.metrics import build_metric_samples
from quotas.models import ClusterQueueSample, Workload
from quotas.sources.common import FLAVOR
from quotas.store import synced_cohorts, write_metric_samples
from quotas.sync import sync_cluster
from tests.fixtures_checks.test_scheduler_figures import readme_table
from tests.prometheus_server import PrometheusServer, copy_tsdb, import_each, write_families
from tests.scheduler_fixtures import load_scheduler_fixtures

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GPU = "nvidia.com/gpu"
NOW = datetime(2026, 8, 22, 12, tzinfo=UTC)
BAD = NOW + timedelta(hours=2, minutes=10)
WINDOW = 60
TOLERANCE = 0.005
VOLCANO_QUEUES = readme_table("volcano", "queue")
KAI_QUEUES = readme_table("kai", "queue")
# The README's Queue status counts (pending/inqueue/running/completed): pending wait, running are
# admitted; every other queue 0/0/0/0.
VOLCANO_COUNTS = {"team-v1": (0, 2), "team-v2": (1, 1), "prod": (0, 1)}
# The README's deleted pods: (namespace, pod, uid, PodGroup annotation label, PodGroup, GPUs).
DELETED = {
    "volcano": [
        (
            "team-v1",
            f"tokenizer-bench-worker-{n}",
            uid,
            "annotation_scheduling_k8s_io_group_name",
            "tokenizer-bench-ab9433b0-d3b3-54f6-bf9c-2b16d58d7500",
            4,
        )
        for n, uid in enumerate(
            ("3a7ac328-0d9f-5368-8f81-dd2dfa74698d", "f47cb919-2ee1-5e68-992d-5997cba3943c")
        )
    ],
    "kai": [
        (
            "kai-team-a",
            "tokenizer-bench-q8w3z",
            "541cddd6-a631-5db0-b44e-856c4af1b844",
            "annotation_pod_group_name",
            "pg-tokenizer-bench-328ba463-d033-562c-96de-6542f127fcb7",
            4,
        )
    ],
}
STARTED = datetime(2026, 8, 22, 9, 0, 5, tzinfo=UTC)
ENDED = datetime(2026, 8, 22, 10, 30, tzinfo=UTC)
DELETED_AT = datetime(2026, 8, 22, 10, 45, tzinfo=UTC)
NODE = "gpu-node-h100-06"


def exposition(source: str) -> list[tuple[str, dict[str, str], float]]:
    """(metric, labels, value) of the fixture's ``metrics.sample.prom``."""
    found = []
    for line in (FIXTURES / source / "metrics.sample.prom").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        matched = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
        assert matched, line
        found.append(
            (matched[1], dict(re.findall(r'(\w+)="([^"]*)"', matched[2])), float(matched[3]))
        )
    return found


def minutes(start: datetime, end: datetime, offset: float = 0.0) -> Iterator[float]:
    at = start.timestamp() + offset
    while at <= end.timestamp():
        yield at
        at += 60


def spoiled(source: str) -> list[tuple[str, dict[str, str], float]]:
    """The fixture's gauges with one queue's quota NaN and one series without its queue."""
    bad_queue, quota = {
        "volcano": ("team-v1", "volcano_queue_deserved_scalar_resources"),
        "kai": ("kai-team-a", "kai_queue_deserved_gpus"),
    }[source]
    found = [
        (
            metric,
            labels,
            float("nan") if (metric, labels.get("queue_name")) == (quota, bad_queue) else v,
        )
        for metric, labels, v in exposition(source)
    ]
    unnamed = {"resource": GPU} if source == "volcano" else {}
    found.append((quota, unnamed, 4000.0 if source == "volcano" else 4.0))
    return found


def write_history(source: str, path: Path) -> None:
    families: dict[str, list[tuple[dict[str, str], float, float]]] = defaultdict(list)
    for metric, labels, value in exposition(source):
        for at in minutes(NOW - timedelta(hours=1), NOW):
            families[metric].append((labels, value, at))
    for metric, labels, value in spoiled(source):
        for at in minutes(BAD - timedelta(minutes=10), BAD):
            families[metric].append((labels, value, at))
    # The deleted pods, scraped 30 s into each minute until they are gone.
    for namespace, pod, pod_uid, annotation, group, gpus in DELETED[source]:
        ident = {"namespace": namespace, "pod": pod, "uid": pod_uid}
        first = 4 * DELETED[source].index((namespace, pod, pod_uid, annotation, group, gpus))
        for at in minutes(STARTED.replace(second=0), DELETED_AT, 30):
            running = STARTED.timestamp() <= at < ENDED.timestamp()
            families["kube_pod_info"].append(({**ident, "node": NODE}, 1, at))
            families["kube_pod_annotations"].append(({**ident, annotation: group}, 1, at))
            # kube-state-metrics writes every phase, 1 for the pod's own.
            for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
                now = phase == ("Running" if running else "Succeeded")
                families["kube_pod_status_phase"].append(({**ident, "phase": phase}, now, at))
            families["kube_pod_container_resource_requests"].append(
                (
                    {**ident, "container": "main", "resource": "nvidia_com_gpu", "unit": "integer"},
                    gpus,
                    at,
                )
            )
            for index in range(first, first + gpus):
                labels = {
                    "Hostname": NODE,
                    "UUID": f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'{NODE}/{index}')}",
                    "gpu": str(index),
                    "modelName": "NVIDIA H100 80GB HBM3",
                }
                if running:
                    labels |= {
                        "exported_namespace": namespace,
                        "exported_pod": pod,
                        "exported_container": "main",
                    }
                families["DCGM_FI_PROF_SM_ACTIVE"].append((labels, 0.5 if running else 0.0, at))
    write_families(path, families)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return import_each(tmp_path_factory, ("volcano", "kai"), write_history)


@pytest.fixture(scope="module")
def servers(
    pristine: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, PrometheusServer]]:
    """One Prometheus per source, on copies (Prometheus compacts imported blocks in place)."""
    started: dict[str, PrometheusServer] = {}
    try:
        for source, blocks in pristine.items():
            copy = copy_tsdb(blocks, tmp_path_factory.mktemp(f"{source}-tsdb") / "tsdb")
            started[source] = PrometheusServer(copy).start()
        yield started
    finally:
        for server in started.values():
            server.stop()


API_VERSIONS = {
    "volcano": {"volcano_versions": ("v1beta1",)},
    "kai": {"kai_versions": ("v2", "v2alpha2")},
}


def synced(source: str, name: str, make_kube_api: Any, prometheus: PrometheusServer) -> Cluster:
    """A cluster synced from the source's fixtures (the live figures of "now"), reading
    ``prometheus``; Volcano's source is left to detection, KAI's is set."""
    api = make_kube_api(load=False, kueue_versions=(), **API_VERSIONS[source])
    load_scheduler_fixtures(api, source)
    quota_source = QuotaSource.KAI if source == "kai" else QuotaSource.DETECT
    cluster = Cluster.objects.create(
        name=name, prometheus_url=prometheus.url, quota_source=quota_source
    )
    run = sync_cluster(cluster.pk)
    assert run.status == "success", run.error
    return Cluster.objects.get(pk=cluster.pk)


def samples(cluster: Cluster, source: str, at: datetime | None = None) -> dict[str, Any]:
    """The cluster's GPU samples of one source (metrics: of the window ending ``at``)."""
    found = ClusterQueueSample.objects.filter(
        cluster_queue__cluster=cluster, resource=GPU, source=source
    )
    if at is not None:
        found = found.filter(sampled_at=at)
    by_queue: dict[str, Any] = {}
    for sample in found.select_related("cluster_queue"):
        assert sample.flavor_name == FLAVOR
        by_queue[sample.cluster_queue.name] = sample
    return by_queue


def close(got: Decimal | int | None, want: Decimal | int | float | None, what: str) -> None:
    if want is None:
        assert got is None, what
        return
    assert got is not None, what
    assert float(got) == pytest.approx(float(want), rel=TOLERANCE, abs=1e-9), what


def test_the_flavor_the_queries_name_is_the_sources_flavor() -> None:
    assert SOURCE_FLAVOR == FLAVOR


# --- Volcano ----------------------------------------------------------------------------------


def test_backfilled_volcano_windows_give_the_readme_and_live_queue_figures(
    servers, make_kube_api, db
) -> None:
    cluster = synced("volcano", "vc", make_kube_api, servers["volcano"])
    live = samples(cluster, SampleSource.API)
    leaves = sorted(n for n in VOLCANO_QUEUES if n not in ("root", "research"))
    assert sorted(live) == leaves

    # when: the last ten windows before "now" are backfilled from Prometheus
    Collector(cluster, window_seconds=WINDOW).backfill(NOW - timedelta(minutes=10), NOW)

    got = samples(cluster, SampleSource.METRICS, NOW)
    # Parent queues (root, research) are Cohorts: no ClusterQueue samples for them.
    assert sorted(got) == leaves
    for name in leaves:
        readme, sample, now = VOLCANO_QUEUES[name], got[name], live[name]
        # the README's figures (the gauges are milli-GPUs: 16000 -> 16)
        close(sample.nominal, Decimal(readme["nominal"]), f"{name} nominal")
        close(sample.borrowing_limit, Decimal(readme["borrowing limit"]), f"{name} limit")
        close(sample.total, Decimal(readme["in use"]), f"{name} in use")
        close(sample.reserved, Decimal(readme["in use"]), f"{name} reserved")
        close(sample.borrowed, Decimal(readme["borrowed"]), f"{name} borrowed")
        waiting, admitted = VOLCANO_COUNTS.get(name, (0, 0))
        assert (sample.pending_workloads, sample.admitted_workloads) == (waiting, admitted), name
        # the live sync's figures of the same moment
        for figure in ("nominal", "borrowing_limit", "total", "reserved", "borrowed", "lent"):
            close(getattr(sample, figure), getattr(now, figure), f"{name} {figure} vs live")
        assert (sample.pending_workloads, sample.admitted_workloads) == (
            now.pending_workloads,
            now.admitted_workloads,
        ), name
        # Volcano exports no pending GPUs: unknown, not 0 (the live sync has them).
        assert sample.pending_demand is None, name
    # team-v1 borrows 8 within research (own quota 0): team-v2 and team-v3 lend them.
    assert got["team-v2"].lent + got["team-v3"].lent == 8
    # Every window of the ten has its samples, and no series was skipped.
    assert ClusterQueueSample.objects.filter(
        cluster_queue__cluster=cluster, source=SampleSource.METRICS
    ).count() == 10 * len(leaves)
    runs = IngestRun.objects.filter(cluster=cluster, source=IngestSource.DCGM)
    assert runs.count() == 10 and all(run.skipped == 0 for run in runs)


def test_a_deep_backfilled_volcano_hour_gives_the_same_samples(servers, make_kube_api, db) -> None:
    cluster = synced("volcano", "vc-deep", make_kube_api, servers["volcano"])
    live = samples(cluster, SampleSource.API)

    DeepBackfill(cluster, window_seconds=WINDOW, workers=1).run(NOW - timedelta(hours=1), NOW)

    got = samples(cluster, SampleSource.METRICS, NOW)
    assert sorted(got) == sorted(live)
    for name, sample in got.items():
        for figure in ("nominal", "borrowing_limit", "total", "borrowed", "lent"):
            close(getattr(sample, figure), getattr(live[name], figure), f"{name} {figure}")
        assert sample.pending_workloads == live[name].pending_workloads, name
        assert sample.admitted_workloads == live[name].admitted_workloads, name
    assert ClusterQueueSample.objects.filter(
        cluster_queue__cluster=cluster, source=SampleSource.METRICS
    ).count() == 60 * len(live)


def test_a_deleted_volcano_pods_usage_lands_on_its_pod_groups_workload(
    servers, make_kube_api, db
) -> None:
    cluster = synced("volcano", "vc-gone", make_kube_api, servers["volcano"])
    workload = Workload.objects.get(cluster=cluster, namespace="team-v1", name="tokenizer-bench")
    # The pods are gone from the API server: only kube-state-metrics history knows them.
    assert not GpuUsage.objects.filter(cluster=cluster).exists()

    Collector(cluster, window_seconds=WINDOW).backfill(STARTED.replace(second=0), DELETED_AT)

    rows = GpuUsage.objects.filter(cluster=cluster, namespace="team-v1")
    # 2 pods x 4 GPUs over the 90 windows of 09:00-10:30 they ran in.
    assert rows.count() == 2 * 4 * 90
    assert set(rows.values_list("pod", flat=True)) == {p[1] for p in DELETED["volcano"]}
    assert set(rows.values_list("workload_id", flat=True)) == {workload.pk}
    assert set(rows.values_list("cluster_queue__name", flat=True)) == {"team-v1"}


def test_a_deep_backfill_charges_the_deleted_volcano_pods_to_their_workload(
    servers, make_kube_api, db
) -> None:
    cluster = synced("volcano", "vc-gone-deep", make_kube_api, servers["volcano"])
    workload = Workload.objects.get(cluster=cluster, namespace="team-v1", name="tokenizer-bench")

    DeepBackfill(cluster, window_seconds=WINDOW, workers=1).run(
        STARTED.replace(minute=0, second=0), STARTED.replace(hour=11, minute=0, second=0)
    )

    rows = HourlyRollup.objects.filter(cluster=cluster, scope=RollupScope.WORKLOAD)
    by_hour: dict[int, float] = defaultdict(float)
    for hour, key, workload_id, gpu_hours in rows.values_list(
        "hour", "key", "workload_id", "allocated_gpu_hours"
    ):
        if gpu_hours:
            assert (key, workload_id) == ("team-v1/tokenizer-bench", workload.pk)
            by_hour[hour.hour] += gpu_hours
    # 8 GPUs from 09:00 to 10:30 (the first scrape is 25 s after the pods started).
    assert by_hour == {9: pytest.approx(8.0), 10: pytest.approx(4.0)}


def test_bad_volcano_series_are_skipped_and_counted(servers, make_kube_api, db) -> None:
    cluster = synced("volcano", "vc-bad", make_kube_api, servers["volcano"])

    Collector(cluster, window_seconds=WINDOW).backfill(BAD - timedelta(minutes=2), BAD)

    got = samples(cluster, SampleSource.METRICS, BAD)
    # team-v1's quota is NaN: no sample without a quota; the others are as the README says.
    assert sorted(got) == ["default", "prod", "team-v2", "team-v3"]
    close(got["team-v2"].total, Decimal(VOLCANO_QUEUES["team-v2"]["in use"]), "team-v2")
    run = IngestRun.objects.get(cluster=cluster, window_end=BAD)
    # NaN nominal and NaN borrowing limit (capacity - NaN) of team-v1; the unnamed series.
    assert run.skip_reasons == {"kueue_nan": 2, "kueue_missing_labels": 1}
    assert run.skipped == 3


# --- KAI --------------------------------------------------------------------------------------


def test_backfilled_kai_windows_give_the_readme_and_live_queue_figures(
    servers, make_kube_api, db
) -> None:
    cluster = synced("kai", "kai", make_kube_api, servers["kai"])
    live = samples(cluster, SampleSource.API)
    leaves = sorted(n for n in KAI_QUEUES if not n.startswith("dept-"))
    assert sorted(live) == leaves

    Collector(cluster, window_seconds=WINDOW).backfill(NOW - timedelta(minutes=3), NOW)

    got = samples(cluster, SampleSource.METRICS, NOW)
    assert sorted(got) == leaves
    for name in leaves:
        readme, sample, now = KAI_QUEUES[name], got[name], live[name]
        # whole GPUs, not milli
        close(sample.nominal, Decimal(readme["nominal"]), f"{name} nominal")
        close(sample.total, Decimal(readme["allocated"]), f"{name} allocated")
        close(sample.borrowed, Decimal(readme["borrowed"]), f"{name} borrowed")
        for figure in ("nominal", "total", "reserved", "borrowed", "lent"):
            close(getattr(sample, figure), getattr(now, figure), f"{name} {figure} vs live")
        # KAI exports no limit, pending GPUs or workload counts: unknown, not invented.
        assert sample.borrowing_limit is None, name
        assert (sample.pending_demand, sample.pending_workloads) == (None, None), name
        assert sample.admitted_workloads is None, name
    # kai-team-a borrows 8 within dept-research: kai-team-b and kai-team-c lend them.
    assert got["kai-team-b"].lent + got["kai-team-c"].lent == 8


def test_an_unlimited_kai_quota_is_what_the_queue_holds(servers) -> None:
    server = servers["kai"]
    # dept-research's quota as -1 is not in the fixture: ask the same PromQL with -1 substituted.
    promql = KAI_QUERIES["kai_nominal"].replace(
        "max by (queue_name) (kai_queue_deserved_gpus)",
        "(max by (queue_name) (kai_queue_deserved_gpus) * 0 - 1)",
    )
    answer = requests.get(
        f"{server.url}/api/v1/query", params={"query": promql, "time": NOW.timestamp()}, timeout=5
    ).json()["data"]["result"]
    found = {item["metric"]["cluster_queue"]: float(item["value"][1]) for item in answer}
    assert found == {name: float(q["allocated"]) for name, q in KAI_QUEUES.items()}


def test_unknown_figures_are_stored_unknown_and_rewritten_never(servers, make_kube_api, db) -> None:
    cluster = synced("kai", "kai-again", make_kube_api, servers["kai"])
    queues = synced_cohorts(cluster, "kai")
    assert queues is not None
    row = QueueSampleRow(
        cluster_queue_name="kai-team-c",
        flavor_name=FLAVOR,
        resource=GPU,
        total=Decimal(0),
        reserved=Decimal(0),
        borrowed=Decimal(0),
        lent=Decimal(8),
        nominal=Decimal(8),
        borrowing_limit=None,
        lending_limit=None,
        pending_demand=None,
        pending_workloads=None,
        admitted_workloads=None,
    )

    assert write_metric_samples(cluster, [row], NOW, WINDOW) == 1
    assert write_metric_samples(cluster, [row], NOW, WINDOW) == 0

    stored = samples(cluster, SampleSource.METRICS, NOW)["kai-team-c"]
    assert (stored.pending_demand, stored.pending_workloads, stored.admitted_workloads) == (
        None,
        None,
        None,
    )
    assert queues["kai-team-c"] == "dept-research"


def test_a_deep_backfilled_kai_hour_gives_the_same_samples(servers, make_kube_api, db) -> None:
    cluster = synced("kai", "kai-deep", make_kube_api, servers["kai"])
    live = samples(cluster, SampleSource.API)

    DeepBackfill(cluster, window_seconds=WINDOW, workers=1).run(NOW - timedelta(hours=1), NOW)

    got = samples(cluster, SampleSource.METRICS, NOW)
    assert sorted(got) == sorted(live)
    for name, sample in got.items():
        for figure in ("nominal", "total", "borrowed", "lent"):
            close(getattr(sample, figure), getattr(live[name], figure), f"{name} {figure}")
        close(sample.total, Decimal(KAI_QUEUES[name]["allocated"]), f"{name} allocated")


def test_a_deleted_kai_pods_usage_lands_on_its_pod_groups_workload(
    servers, make_kube_api, db
) -> None:
    cluster = synced("kai", "kai-gone", make_kube_api, servers["kai"])
    workload = Workload.objects.get(cluster=cluster, namespace="kai-team-a", name="tokenizer-bench")

    Collector(cluster, window_seconds=WINDOW).backfill(STARTED.replace(second=0), DELETED_AT)

    rows = GpuUsage.objects.filter(cluster=cluster, namespace="kai-team-a")
    assert rows.count() == 4 * 90
    assert set(rows.values_list("workload_id", flat=True)) == {workload.pk}


def test_bad_kai_series_are_skipped_and_counted(servers, make_kube_api, db) -> None:
    cluster = synced("kai", "kai-bad", make_kube_api, servers["kai"])

    Collector(cluster, window_seconds=WINDOW).backfill(BAD - timedelta(minutes=2), BAD)

    got = samples(cluster, SampleSource.METRICS, BAD)
    assert sorted(got) == ["kai-serving", "kai-team-b", "kai-team-c"]
    run = IngestRun.objects.get(cluster=cluster, window_end=BAD)
    assert run.skip_reasons == {"kueue_nan": 1, "kueue_missing_labels": 1}


def test_malformed_answers_are_skipped_and_counted() -> None:
    # What a Prometheus-compatible server could answer badly, read as the routed answers are.
    labels = {"cluster_queue": "team-v1", "flavor": FLAVOR}
    made = build_metric_samples(
        {
            "nominal": [
                {"metric": {"flavor": FLAVOR}, "value": [0, "8"]},
                {"metric": labels, "value": [0, "sixteen"]},
                {"metric": labels, "value": [0]},
                "nonsense",
            ],
            "usage": [{"no": "metric"}],
        },
        queues={"team-v1": "research"},
    )
    assert made.samples == []
    assert made.stats.skip_reasons == {
        "kueue_missing_labels": 1,
        "kueue_malformed_value": 2,
        "kueue_malformed_item": 2,
    }
