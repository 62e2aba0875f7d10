"""Serving hours from a real Prometheus (promtool backfill), compared with hand-computed figures.

Two data sets share one Prometheus, one sample a minute:

* hour 0 (T0): the recorded /metrics text of each server (tests/fixtures/serving/), one pod
  each, counters climbing from 0 to the recorded value over the hour
  (``tests.serving.recorded``): the figures are the recorded numbers / 3600 and the
  recorded gauges;
* hours 1-3, namespace ``chat``: Deployment ``llama-chat`` (ReplicaSet ``llama-chat-7d9f``) with
  vLLM replicas ``a`` and ``b`` all three hours and ``c`` only for the last 30 minutes of hour 3;
  ``b`` restarts at minute 210 (its counters reset); a training pod that holds a GPU but serves
  nothing; a bare pod ``nan-server`` whose gauges are NaN (its latency histogram is sound).

A sample at minute k describes minute (k-1, k]; the hour H is asked at its end over
(H, H + 1 h], so hour 1 holds minutes 61..120. ``increase()`` over an hour whose first sample
is 60 s after its start extrapolates the counter by 3599.999 / 3540 over 59 increments of one
minute: rate x 3599.999, so the per-second figures are exact to 1e-6.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from fleet.models import Cluster
from serving.collector import collect_due, collect_hour, prune
from serving.models import ServingCollection, ServingHour, ServingWorkload
from serving.tasks import collect_serving_hours
from tests.prometheus_server import (
    OpenMetricsWriter,
    PrometheusServer,
    copy_tsdb,
    create_blocks,
    free_port,
)
from tests.serving.recorded import ramp_value, recorded, series_by_name

pytestmark = pytest.mark.integration

T0 = datetime(2026, 5, 4, 0, 0, tzinfo=UTC)
REL = 1e-5

Series = dict[str, list[tuple[dict[str, str], float, float]]]  # name -> [(labels, value, ts)]

RECORDED_PODS = {
    # pod: (fixture, owner kind, owner name, GPU resource as kube-state-metrics names it)
    "vllm-demo-5c8d-x": ("vllm-0.10.txt", "ReplicaSet", "vllm-demo-5c8d", "nvidia_com_gpu"),
    "nim-llm-0": ("nim-llm.txt", "StatefulSet", "nim-llm", "nvidia_com_gpu"),
    "tgi-lws-0": ("tgi-3.3.txt", "StatefulSet", "tgi-lws", "nvidia_com_gpu"),
    "trtllm-predictor-6f7-q": (
        "triton-trtllm.txt",
        "ReplicaSet",
        "trtllm-predictor-6f7",
        "nvidia_com_mig_3g_40gb",
    ),
}


def ts(minute: int) -> float:
    return (T0 + timedelta(minutes=minute)).timestamp()


def _ksm(series: Series, namespace: str, pod: str, owner: tuple[str, str], minutes: range) -> None:
    for minute in minutes:
        base = {"namespace": namespace, "pod": pod, "uid": f"uid-{pod}"}
        series["kube_pod_owner"].append(
            (
                {
                    **base,
                    "owner_kind": owner[0],
                    "owner_name": owner[1],
                    "owner_is_controller": "true",
                },
                1.0,
                ts(minute),
            )
        )


def _gpu(series: Series, namespace: str, pod: str, resource: str, minutes: range) -> None:
    labels = {
        "namespace": namespace,
        "pod": pod,
        "uid": f"uid-{pod}",
        "container": "server",
        "resource": resource,
        "unit": "integer",
    }
    for minute in minutes:
        series["kube_pod_container_resource_requests"].append((labels, 1.0, ts(minute)))


def recorded_series(series: Series) -> None:
    """Hour 0: each server's recorded text on its own pod in namespace ``recorded``."""
    pods = {("recorded", pod): recorded(fixture) for pod, (fixture, *_) in RECORDED_PODS.items()}
    for name, items in series_by_name(pods).items():
        for labels, sample in items:
            for minute in range(1, 61):
                series[name].append((labels, ramp_value(sample, minute), ts(minute)))
    for pod, (_, kind, owner, resource) in RECORDED_PODS.items():
        _ksm(series, "recorded", pod, (kind, owner), range(1, 61))
        _gpu(series, "recorded", pod, resource, range(1, 61))
    for replicaset, deployment in (
        ("vllm-demo-5c8d", "vllm-demo"),
        ("trtllm-predictor-6f7", "trtllm-predictor"),
    ):
        labels = {
            "namespace": "recorded",
            "replicaset": replicaset,
            "owner_kind": "Deployment",
            "owner_name": deployment,
            "owner_is_controller": "true",
        }
        for minute in range(1, 61):
            series["kube_replicaset_owner"].append((labels, 1.0, ts(minute)))
    # kube-state-metrics with the LWS and KServe pod labels allowlisted.
    for pod, label, value in (
        ("tgi-lws-0", "label_leaderworkerset_sigs_k8s_io_name", "tgi-lws"),
        ("trtllm-predictor-6f7-q", "label_serving_kserve_io_inferenceservice", "trtllm"),
    ):
        labels = {"namespace": "recorded", "pod": pod, "uid": f"uid-{pod}", label: value}
        for minute in range(1, 61):
            series["kube_pod_labels"].append((labels, 1.0, ts(minute)))


# Per replica and hour (1, 2, 3): running, waiting, KV-cache use, requests/s; prompt tokens are
# 250 x requests, output tokens 50 x requests. TTFT: replica b in hour 2 puts half its requests
# in (0.25, 0.5] and half in (0.5, 1]; every other request is in (0.1, 0.25]. E2E: (2, 5].
CHAT = {
    "a": {1: (10, 0, 0.5, 2), 2: (10, 0, 0.5, 2), 3: (10, 0, 0.5, 2)},
    "b": {1: (6, 0, 0.3, 1), 2: (14, 3, 0.9, 3), 3: (14, 3, 0.9, 3)},
    "c": {3: (8, 1, 0.6, 2)},
}
FIRST_MINUTE = {"a": 61, "b": 61, "c": 211}  # c starts at 3:30
RESTART = {"b": 210}  # b restarts right after the sample at minute 210
TTFT_BOUNDS = ("0.1", "0.25", "0.5", "1.0", "+Inf")
E2E_BOUNDS = ("2.0", "5.0", "+Inf")


def _ttft_split(replica: str, hour: int) -> dict[str, float]:
    """Share of a minute's requests per TTFT bucket (by upper bound)."""
    if (replica, hour) == ("b", 2):
        return {"0.5": 0.5, "1.0": 0.5}
    return {"0.25": 1.0}


def chat_series(series: Series) -> None:
    """Hours 1-3: the ``llama-chat`` replicas, a training pod and a NaN server."""
    for replica, hours in CHAT.items():
        pod = f"llama-chat-7d9f-{replica}"
        labels = {"namespace": "chat", "pod": pod, "model_name": "llama", "engine": "0"}
        # Counters start high (the pod ran before hour 1), except c's, which start at 0.
        total = defaultdict(float, {} if replica == "c" else {"base": 1e6})
        minutes = range(FIRST_MINUTE[replica], 241)
        for minute in minutes:
            hour = (minute - 1) // 60
            running, waiting, kv, rate = hours[hour]
            if minute > FIRST_MINUTE[replica]:
                per_minute = rate * 60
                if minute == RESTART.get(replica, 0) + 1:
                    total = defaultdict(float)  # the restarted process counts from 0
                total["requests"] += per_minute
                total["prompt"] += 250 * per_minute
                total["output"] += 50 * per_minute
                split = _ttft_split(replica, hour)
                for bound in TTFT_BOUNDS:
                    upto = sum(
                        share
                        for le, share in split.items()
                        if bound == "+Inf" or float(le) <= float(bound)
                    )
                    total[f"ttft{bound}"] += upto * per_minute
                for bound in E2E_BOUNDS:
                    total[f"e2e{bound}"] += per_minute if bound != "2.0" else 0.0
            base = total["base"]
            at = ts(minute)
            series["vllm:num_requests_running"].append((labels, running, at))
            series["vllm:num_requests_waiting"].append((labels, waiting, at))
            series["vllm:kv_cache_usage_perc"].append((labels, kv, at))
            finished = {**labels, "finished_reason": "stop"}
            series["vllm:request_success_total"].append((finished, base + total["requests"], at))
            series["vllm:prompt_tokens_total"].append((labels, base + total["prompt"], at))
            series["vllm:generation_tokens_total"].append((labels, base + total["output"], at))
            for bound in TTFT_BOUNDS:
                series["vllm:time_to_first_token_seconds_bucket"].append(
                    ({**labels, "le": bound}, base + total[f"ttft{bound}"], at)
                )
            for bound in E2E_BOUNDS:
                series["vllm:e2e_request_latency_seconds_bucket"].append(
                    ({**labels, "le": bound}, base + total[f"e2e{bound}"], at)
                )
        _ksm(series, "chat", pod, ("ReplicaSet", "llama-chat-7d9f"), minutes)
        _gpu(series, "chat", pod, "nvidia_com_gpu", minutes)
    owner = {
        "namespace": "chat",
        "replicaset": "llama-chat-7d9f",
        "owner_kind": "Deployment",
        "owner_name": "llama-chat",
        "owner_is_controller": "true",
    }
    for minute in range(61, 241):
        series["kube_replicaset_owner"].append((owner, 1.0, ts(minute)))
        nan_pod = {"namespace": "chat", "pod": "nan-server", "model_name": "x", "engine": "0"}
        series["vllm:num_requests_running"].append((nan_pod, float("nan"), ts(minute)))
        # Its end-to-end histogram is sound: 60 requests a minute in (2, 5].
        for bound, count in (("2.0", 0.0), ("5.0", 60.0 * minute), ("+Inf", 60.0 * minute)):
            series["vllm:e2e_request_latency_seconds_bucket"].append(
                ({**nan_pod, "le": bound}, count, ts(minute))
            )
    trainer = range(61, 241)
    _ksm(series, "chat", "trainer-0", ("Job", "trainer"), trainer)
    _gpu(series, "chat", "trainer-0", "nvidia_com_gpu", trainer)


def burst_series(series: Series) -> None:
    """Hour 1, namespace ``burst``: Deployment ``burst``'s one pod lives minutes 61..90 only
    (gone at the hour's end), 60 requests a minute, all with TTFT in (0.1, 0.25]."""
    pod = "burst-5f-x"
    labels = {"namespace": "burst", "pod": pod, "model_name": "llama", "engine": "0"}
    minutes = range(61, 91)
    for minute in minutes:
        done = 60.0 * (minute - 61)
        series["vllm:num_requests_running"].append((labels, 5.0, ts(minute)))
        for bound, count in (("0.1", 0.0), ("0.25", done), ("+Inf", done)):
            series["vllm:time_to_first_token_seconds_bucket"].append(
                ({**labels, "le": bound}, count, ts(minute))
            )
        owner = {
            "namespace": "burst",
            "replicaset": "burst-5f",
            "owner_kind": "Deployment",
            "owner_name": "burst",
        }
        series["kube_replicaset_owner"].append((owner, 1.0, ts(minute)))
    _ksm(series, "burst", pod, ("ReplicaSet", "burst-5f"), minutes)


def write_openmetrics(path: Path) -> None:
    series: Series = defaultdict(list)
    recorded_series(series)
    chat_series(series)
    burst_series(series)
    with OpenMetricsWriter(path) as out:
        for name, samples in series.items():
            # One family per sample name ("unknown"): PromQL reads them alike, and promtool
            # wants a counter's samples named <family>_total, which TGI's and Triton's are not.
            out.family(name, "unknown")
            for labels, value, at in samples:
                out.sample(labels, value, at)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    work = tmp_path_factory.mktemp("serving")
    write_openmetrics(work / "serving.om")
    create_blocks(work / "serving.om", work / "pristine")
    server = PrometheusServer(copy_tsdb(work / "pristine", work / "tsdb"))
    yield server.start()
    server.cleanup()


@pytest.fixture
def cluster(db: None, prometheus: PrometheusServer) -> Cluster:
    return Cluster.objects.create(name="prom", prometheus_url=prometheus.url)


def rows(cluster: Cluster, hour: int, namespace: str) -> dict[tuple[str, str], ServingHour]:
    return {
        (row.workload.kind, row.workload.name): row
        for row in ServingHour.objects.filter(
            cluster=cluster, hour=T0 + timedelta(hours=hour), workload__namespace=namespace
        ).select_related("workload")
    }


def test_recorded_server_texts_map_to_the_normalized_figures(cluster):
    collect_hour(cluster, T0)
    stored = rows(cluster, 0, "recorded")
    assert set(stored) == {
        ("Deployment", "vllm-demo"),
        ("StatefulSet", "nim-llm"),
        ("LeaderWorkerSet", "tgi-lws"),
        ("InferenceService", "trtllm"),
    }

    vllm = stored[("Deployment", "vllm-demo")]
    assert vllm.server_kind == "vllm"
    assert (vllm.replicas_seen, vllm.replica_hours, vllm.seconds_with_data) == (1, 1.0, 3600)
    assert vllm.gpu_hours == pytest.approx(1.0)
    # request_success_total: stop 3000 + length 600 over the hour; the 120 aborted are not served.
    assert vllm.requests_per_second == pytest.approx(3600 / 3600, rel=REL)
    assert vllm.prompt_tokens_per_second == pytest.approx(1.8e6 / 3600, rel=REL)
    assert vllm.output_tokens_per_second == pytest.approx(720000 / 3600, rel=REL)
    assert (vllm.mean_running, vllm.mean_waiting) == (pytest.approx(12.0), pytest.approx(2.0))
    # kv_cache_usage_perc wins over the deprecated gpu_cache_usage_perc (both 0.25, not 0.5).
    assert (vllm.kv_cache_mean, vllm.kv_cache_max) == (pytest.approx(0.25), pytest.approx(0.25))
    # TTFT: 1800 in (0.08, 0.1], 1440 in (0.1, 0.25], 360 in (0.25, 0.5] of 3600.
    # p50: rank 1800 reaches le=0.1 exactly: 0.08 + 0.02 x 1800/1800 = 0.1.
    # p95: rank 3420 in (0.25, 0.5]: 0.25 + 0.25 x (3420 - 3240)/360 = 0.375.
    assert vllm.ttft_p50_seconds == pytest.approx(0.1, rel=REL)
    assert vllm.ttft_p95_seconds == pytest.approx(0.375, rel=REL)
    # time_per_output_token (0.10 has no inter_token_latency): 358200 in (0.025, 0.05],
    # 358200 in (0.05, 0.075]: p50 = 0.05; p95 rank 680580: 0.05 + 0.025 x 0.9 = 0.0725.
    assert vllm.itl_p50_seconds == pytest.approx(0.05, rel=REL)
    assert vllm.itl_p95_seconds == pytest.approx(0.0725, rel=REL)
    # e2e: all 3600 in (5, 10]: 5 + 5 x 0.95.
    assert vllm.e2e_p95_seconds == pytest.approx(9.75, rel=REL)

    nim = stored[("StatefulSet", "nim-llm")]
    assert nim.server_kind == "nim"
    assert nim.requests_per_second == pytest.approx(1.0, rel=REL)
    assert nim.kv_cache_mean == pytest.approx(0.25)  # only gpu_cache_usage_perc
    assert (nim.ttft_p95_seconds, nim.itl_p95_seconds) == (
        pytest.approx(0.375, rel=REL),
        pytest.approx(0.0725, rel=REL),
    )

    tgi = stored[("LeaderWorkerSet", "tgi-lws")]
    assert tgi.server_kind == "tgi"
    assert tgi.requests_per_second == pytest.approx(1800 / 3600, rel=REL)
    assert tgi.prompt_tokens_per_second == pytest.approx(910000 / 3600, rel=REL)
    assert tgi.output_tokens_per_second == pytest.approx(360000 / 3600, rel=REL)
    assert (tgi.mean_running, tgi.mean_waiting) == (pytest.approx(8.0), pytest.approx(3.0))
    # TGI has no KV-cache gauge and no time-to-first-token histogram: no telemetry, not 0.
    assert (tgi.kv_cache_mean, tgi.kv_cache_max, tgi.ttft_p50_seconds) == (None, None, None)
    # Duration buckets 1e-4 x 1.5^k: 900 requests at 0.03 s fall in (1.5^14, 1.5^15] x 1e-4,
    # 900 at 0.05 s in (1.5^15, 1.5^16] x 1e-4. p50: rank 900 = the top of the first.
    # p95: rank 1710, 810 of 900 into the second.
    low, mid, high = (1e-4 * 1.5**k for k in (14, 15, 16))
    assert low < 0.03 <= mid < 0.05 <= high
    assert tgi.itl_p50_seconds == pytest.approx(mid, rel=REL)
    assert tgi.itl_p95_seconds == pytest.approx(mid + (high - mid) * 810 / 900, rel=REL)
    # e2e: 1800 at 8 s, in (1.5^27, 1.5^28] x 1e-4: p95 = 0.95 of the way.
    e2e_low, e2e_high = 1e-4 * 1.5**27, 1e-4 * 1.5**28
    assert tgi.e2e_p95_seconds == pytest.approx(e2e_low + (e2e_high - e2e_low) * 0.95, rel=REL)

    triton = stored[("InferenceService", "trtllm")]
    assert triton.server_kind == "triton"
    # Four models of one ensemble each count 7200: requests are the busiest model's.
    assert triton.requests_per_second == pytest.approx(7200 / 3600, rel=REL)
    assert (triton.prompt_tokens_per_second, triton.output_tokens_per_second) == (None, None)
    assert (triton.mean_running, triton.mean_waiting) == (pytest.approx(6.0), pytest.approx(4.0))
    assert triton.kv_cache_mean == pytest.approx(0.4875)
    # MIG 3g.40gb is 3/7 of a GPU.
    assert triton.gpu_hours == pytest.approx(3 / 7)
    # First response in ms: 3600 in (100, 200], 3600 in (200, 500] -> seconds.
    # p50: rank 3600 = top of (0.1, 0.2]; p95: rank 6840: 0.2 + 0.3 x 3240/3600 = 0.47.
    assert triton.ttft_p50_seconds == pytest.approx(0.2, rel=REL)
    assert triton.ttft_p95_seconds == pytest.approx(0.47, rel=REL)
    assert (triton.itl_p95_seconds, triton.e2e_p95_seconds) == (None, None)


def test_hand_computed_hours_of_a_two_replica_deployment(cluster, caplog):
    with caplog.at_level(logging.WARNING, logger="serving.collector"):
        call_command(
            "collect_serving",
            "--cluster",
            cluster.name,
            "--start",
            (T0 + timedelta(hours=1)).isoformat(),
            "--end",
            (T0 + timedelta(hours=4)).isoformat(),
        )
    # The training pod holds a GPU but serves nothing: no row. NaN gauges are skipped (logged).
    names = {name for hour in (1, 2, 3) for _, name in rows(cluster, hour, "chat")}
    assert names == {"llama-chat", "nan-server"}
    assert "nonfinite_value" in caplog.text
    nan_row = rows(cluster, 1, "chat")[("Pod", "nan-server")]
    assert (nan_row.replicas_seen, nan_row.mean_running, nan_row.requests_per_second) == (
        1,
        None,
        None,
    )
    # A bare pod's histogram joins as its own controller (kind Pod): 2 + 3 x 0.95.
    assert nan_row.e2e_p95_seconds == pytest.approx(4.85, rel=REL)

    # A pod gone before the hour's end: half the hour's samples, and its histogram still joins
    # its Deployment (grouped as the pod itself in Prometheus): p95 = 0.1 + 0.15 x 0.95.
    burst = rows(cluster, 1, "burst")[("Deployment", "burst")]
    assert (burst.replica_hours, burst.mean_running) == (0.5, pytest.approx(5 * 0.5))
    assert burst.ttft_p95_seconds == pytest.approx(0.2425, rel=REL)

    first = rows(cluster, 1, "chat")[("Deployment", "llama-chat")]
    assert (first.replicas_seen, first.replica_hours, first.seconds_with_data) == (2, 2.0, 3600)
    assert first.gpu_hours == pytest.approx(2.0)
    assert first.requests_per_second == pytest.approx(2 + 1, rel=REL)  # a 2/s + b 1/s
    assert first.prompt_tokens_per_second == pytest.approx(250 * 3, rel=REL)
    assert first.output_tokens_per_second == pytest.approx(50 * 3, rel=REL)
    assert first.mean_running == pytest.approx(10 + 6)
    assert first.mean_waiting == 0.0  # measured zero, not missing
    assert first.kv_cache_mean == pytest.approx((0.5 + 0.3) / 2)
    assert first.kv_cache_max == pytest.approx(0.5)
    # TTFT: all 10800 requests in (0.1, 0.25]: p50 = 0.1 + 0.15 x 0.5, p95 = 0.1 + 0.15 x 0.95.
    assert first.ttft_p50_seconds == pytest.approx(0.175, rel=REL)
    assert first.ttft_p95_seconds == pytest.approx(0.2425, rel=REL)
    assert first.e2e_p95_seconds == pytest.approx(2 + 3 * 0.95, rel=REL)
    assert (first.itl_p50_seconds, first.itl_p95_seconds) == (None, None)  # not exposed

    second = rows(cluster, 2, "chat")[("Deployment", "llama-chat")]
    assert second.requests_per_second == pytest.approx(2 + 3, rel=REL)
    assert (second.mean_running, second.mean_waiting) == (pytest.approx(24), pytest.approx(3))
    assert (second.kv_cache_mean, second.kv_cache_max) == (pytest.approx(0.7), pytest.approx(0.9))
    # TTFT: a 7200 in (0.1, 0.25]; b 5400 in (0.25, 0.5] and 5400 in (0.5, 1]; 18000 in all.
    # p50: rank 9000 in (0.25, 0.5]: 0.25 + 0.25 x (9000 - 7200)/5400 = 0.3333.
    # p95: rank 17100 in (0.5, 1]: 0.5 + 0.5 x (17100 - 12600)/5400 = 0.9167.
    assert second.ttft_p50_seconds == pytest.approx(0.25 + 0.25 * 1800 / 5400, rel=REL)
    assert second.ttft_p95_seconds == pytest.approx(0.5 + 0.5 * 4500 / 5400, rel=REL)

    third = rows(cluster, 3, "chat")[("Deployment", "llama-chat")]
    # c was there for 30 of 60 samples: coverage 0.5.
    assert (third.replicas_seen, third.replica_hours) == (3, pytest.approx(2.5))
    assert third.gpu_hours == pytest.approx(1 + 1 + 0.5)
    # a 2/s x 3600 = 7200; b 3/s through its restart = 10800 (increase() adds the value before
    # the reset); c counts from 0 at minute 211: 29 minutes x 120 = 3480 (its first minute,
    # before the first scrape, is not seen).
    assert third.requests_per_second == pytest.approx((7200 + 10800 + 3480) / 3600, rel=REL)
    assert third.prompt_tokens_per_second == pytest.approx(250 * 21480 / 3600, rel=REL)
    # Running: 10 + 14 + 8 x 0.5 = 28; waiting: 0 + 3 + 1 x 0.5 = 3.5.
    assert (third.mean_running, third.mean_waiting) == (pytest.approx(28), pytest.approx(3.5))
    # KV-cache: replica-time mean (0.5 x 1 + 0.9 x 1 + 0.6 x 0.5) / 2.5 = 0.68.
    assert third.kv_cache_mean == pytest.approx(0.68)
    assert third.ttft_p50_seconds == pytest.approx(0.175, rel=REL)

    # Idempotent: collecting the hours again replaces them.
    before = {
        (row.workload_id, row.hour, row.requests_per_second)
        for row in ServingHour.objects.filter(cluster=cluster)
    }
    for hour in (1, 2, 3):
        collect_hour(cluster, T0 + timedelta(hours=hour))
    after = {
        (row.workload_id, row.hour, row.requests_per_second)
        for row in ServingHour.objects.filter(cluster=cluster)
    }
    assert after == before
    assert ServingWorkload.objects.filter(cluster=cluster, namespace="chat").count() == 2
    assert ServingCollection.objects.filter(cluster=cluster, status="success").count() == 3


def test_due_hours_are_collected_once_each_oldest_first(cluster, settings):
    settings.GPULEDGER_CATCHUP_HOURS = 3  # the newest due hour and the two before it
    # 60 s after hour 3 ends its last scrapes may still be on the way: not due yet.
    early = collect_due(cluster, now=T0 + timedelta(hours=4, seconds=60))
    assert [result.hour for result in early.hours] == [T0 + timedelta(hours=h) for h in (0, 1, 2)]
    # Hour 0: the 4 servers; then llama-chat and the NaN pod, and burst in hour 1.
    assert [result.rows for result in early.hours] == [4, 3, 2]

    later = collect_due(cluster, now=T0 + timedelta(hours=4, minutes=5))
    assert [(result.hour, result.rows) for result in later.hours] == [(T0 + timedelta(hours=3), 2)]
    assert collect_due(cluster, now=T0 + timedelta(hours=4, minutes=10)).hours == []
    assert ServingHour.objects.filter(cluster=cluster).count() == 4 + 3 + 2 + 2


def test_an_unreachable_prometheus_leaves_a_failed_collection_and_no_rows(db, settings):
    settings.GPULEDGER_CATCHUP_HOURS = 2
    # Nothing listens on this loopback port: every query fails to connect.
    down = Cluster.objects.create(name="down", prometheus_url=f"http://127.0.0.1:{free_port()}")

    results = collect_serving_hours()

    assert [(r["cluster"], "cannot connect" in str(r.get("error"))) for r in results] == [
        ("down", True)
    ]
    failed = ServingCollection.objects.get(cluster=down)
    assert failed.status == "failed" and "cannot connect" in failed.error
    assert not ServingHour.objects.filter(cluster=down).exists()


def test_hours_past_the_rollup_retention_are_pruned(cluster, settings):
    collect_hour(cluster, T0)
    collect_hour(cluster, T0 + timedelta(hours=1))
    settings.GPULEDGER_ROLLUP_RETENTION_DAYS = 1
    # A day and an hour after T0 + 1 h: hour 0 is past the retention, hour 1 is not.
    deleted = prune(cluster, T0 + timedelta(days=1, hours=1, minutes=30))

    assert deleted == 4 + 1  # hour 0: four servers' rows and its collection
    assert set(ServingHour.objects.filter(cluster=cluster).values_list("hour", flat=True)) == {
        T0 + timedelta(hours=1)
    }
    assert ServingCollection.objects.filter(cluster=cluster).count() == 1


def test_the_command_refuses_half_a_range_and_unknown_clusters(cluster):
    with pytest.raises(CommandError, match="--start and --end go together"):
        call_command("collect_serving", "--cluster", cluster.name, "--start", T0.isoformat())
    with pytest.raises(CommandError, match="not an ISO 8601"):
        call_command(
            "collect_serving", "--cluster", cluster.name, "--start", "yesterday", "--end", "now"
        )
    with pytest.raises(CommandError, match="no cluster named 'nope'"):
        call_command("collect_serving", "--cluster", "nope")
    assert not ServingCollection.objects.exists()
