"""The pure side of serving hours: PromQL built per server, answers to figures per workload."""

from __future__ import annotations

import pytest

from serving import queries as q
from serving.ingest import build_hour, resolve_workloads


def item(value: object, **labels: str) -> dict:
    return {"metric": labels, "value": [1_700_000_000.0, value]}


def pod(name: str, value: object, server: str = "vllm", namespace: str = "ns") -> dict:
    return item(value, namespace=namespace, pod=name, server=server)


def test_each_figure_is_one_query_over_every_server():
    queries = q.hour_queries()

    assert set(queries) == {
        "presence",
        "requests",
        "prompt_tokens",
        "output_tokens",
        "running",
        "waiting",
        "kv_mean",
        "kv_max",
        "ttft",
        "itl",
        "e2e",
        "gpus",
        "owners",
        "replicaset_owners",
        "pod_labels",
    }
    running = queries["running"]
    for name in ("vllm:num_requests_running", "num_requests_running", "tgi_batch_current_size"):
        assert f"{name}[3599999ms]" in running
    assert 'request_type="active"' in running
    for kind in ("vllm", "nim", "tgi", "triton"):
        assert f'"server", "{kind}"' in queries["presence"]


def test_an_older_name_counts_only_for_pods_without_the_newer_one():
    kv = q.hour_queries()["kv_mean"]
    new = "avg by (namespace, pod) (avg_over_time(vllm:kv_cache_usage_perc[3599999ms]))"
    old = "avg by (namespace, pod) (avg_over_time(vllm:gpu_cache_usage_perc[3599999ms]))"
    assert f"({new} or ({old} unless on (namespace, pod) ({new})))" in kv
    itl = q.hour_queries()["itl"]
    assert "unless on (namespace, pod) (sum by (namespace, pod, le) (increase(" in itl
    # Histograms come summed per pod controller, a pod without one as its own ("Pod").
    assert itl.startswith("sum by (namespace, owner_kind, owner_name, server, le) (")
    assert "group_left (owner_kind, owner_name) (topk by (namespace, pod) (1, " in itl
    assert '"owner_kind", "Pod", "", ""' in itl


def test_workload_resolution_prefers_kserve_then_lws_then_deployment_then_controller():
    answers = {
        q.POD_LABELS: [
            item(1, namespace="ns", pod="p1", label_serving_kserve_io_inferenceservice="isvc"),
            item(1, namespace="ns", pod="p2", label_leaderworkerset_sigs_k8s_io_name="lws"),
        ],
        q.OWNERS: [
            item(1, namespace="ns", pod="p1", owner_kind="ReplicaSet", owner_name="isvc-rs"),
            item(1, namespace="ns", pod="p2", owner_kind="StatefulSet", owner_name="lws-0"),
            item(1, namespace="ns", pod="p3", owner_kind="ReplicaSet", owner_name="web-7d"),
            item(1, namespace="ns", pod="p4", owner_kind="StatefulSet", owner_name="db"),
            item(1, namespace="ns", pod="p5", owner_kind="ReplicaSet", owner_name="orphan-rs"),
            item(1, namespace="ns", pod="p6", owner_kind="<none>", owner_name="<none>"),
        ],
        q.REPLICASET_OWNERS: [
            item(1, namespace="ns", replicaset="web-7d", owner_kind="Deployment", owner_name="web"),
        ],
    }
    pods = [("ns", f"p{n}") for n in range(1, 8)]

    resolved, by_controller = resolve_workloads(answers, pods, build_hour({})[1])

    assert resolved == {
        ("ns", "p1"): ("ns", "InferenceService", "isvc"),
        ("ns", "p2"): ("ns", "LeaderWorkerSet", "lws"),
        ("ns", "p3"): ("ns", "Deployment", "web"),
        ("ns", "p4"): ("ns", "StatefulSet", "db"),
        ("ns", "p5"): ("ns", "ReplicaSet", "orphan-rs"),
        ("ns", "p6"): ("ns", "Pod", "p6"),
        ("ns", "p7"): ("ns", "Pod", "p7"),
    }
    # Histograms come summed per controller: each controller maps to its pods' workload.
    assert by_controller[("ns", "ReplicaSet", "web-7d")] == ("ns", "Deployment", "web")
    assert by_controller[("ns", "StatefulSet", "lws-0")] == ("ns", "LeaderWorkerSet", "lws")
    assert by_controller[("ns", "Pod", "p7")] == ("ns", "Pod", "p7")
    # A pod gone before the hour's end comes grouped as itself.
    assert by_controller[("ns", "Pod", "p3")] == ("ns", "Deployment", "web")


def test_missing_figures_are_none_and_measured_zeros_stay_zero():
    answers = {
        q.PRESENCE: [pod("a", "120"), pod("b", "60")],
        "running": [pod("a", "4"), pod("b", "2")],
        "waiting": [pod("a", "0"), pod("b", "0")],
        "requests": [pod("a", "7200")],
    }

    figures, stats = build_hour(answers)

    row = figures[("ns", "Pod", "a")]
    # a has the most samples (120): coverage 1; b has 60: coverage 0.5.
    assert (row.replicas_seen, row.replica_hours, row.seconds_with_data) == (1, 1.0, 3600)
    assert row.requests_per_second == pytest.approx(2.0)
    assert (row.mean_running, row.mean_waiting) == (4.0, 0.0)
    assert (row.prompt_tokens_per_second, row.kv_cache_mean, row.gpu_hours) == (None, None, None)
    assert (row.ttft_p50_seconds, row.itl_p95_seconds, row.e2e_p95_seconds) == (None, None, None)
    other = figures[("ns", "Pod", "b")]
    assert (other.replica_hours, other.seconds_with_data) == (0.5, 1800)
    assert other.mean_running == pytest.approx(2 * 0.5)
    assert other.requests_per_second is None
    assert stats.skipped == 0


def test_bad_answers_are_skipped_and_counted_never_raised():
    answers = {
        q.PRESENCE: [
            pod("a", "60"),
            pod("nan", "NaN"),
            item("60", namespace="ns"),  # no pod label
            "not an item",
            {"metric": {"namespace": "ns", "pod": "x", "server": "vllm"}, "value": []},
            pod("unknown-server", "60", server="sglang"),
        ],
        "running": [pod("a", "+Inf")],
        "requests": {"not": "a list"},
        "ttft": [
            item("5", namespace="ns", owner_kind="Pod", owner_name="a", server="vllm", le="fast")
        ],
        q.GPUS: [item("1", namespace="ns", pod="a", resource="amd_com_gpu")],
    }

    figures, stats = build_hour(answers)

    assert list(figures) == [("ns", "Pod", "a")]
    assert figures[("ns", "Pod", "a")].mean_running is None
    assert stats.skip_reasons == {
        "nonfinite_value": 2,
        "missing_pod_labels": 1,
        "malformed_item": 1,
        "malformed_value": 1,
        "malformed_answer": 1,
        "malformed_le": 1,
        "unknown_gpu_resource": 1,
    }


def test_no_presence_means_no_rows():
    figures, _ = build_hour({"running": [pod("a", "3")], q.PRESENCE: [pod("a", "0")]})

    assert figures == {}


def test_a_workload_percentile_is_over_its_replicas_summed_buckets():
    # A LeaderWorkerSet's leader StatefulSet "lws" (pod a) and worker StatefulSet "lws-0"
    # (pod b): Prometheus sums the buckets per controller, the workload sums the controllers.
    # a: 90 requests at <= 0.1 s; b: 10 requests in (0.1, 1]. Together 100:
    # p50 at rank 50 in (0, 0.1]: 0.1 x 50/90; p95 at rank 95 in (0.1, 1]: 0.1 + 0.9 x 5/10.
    # (b alone would say p50 = 0.55: averaging replicas' percentiles would be wrong.)
    def buckets(controller: str, counts: tuple[float, float, float]) -> list[dict]:
        return [
            item(
                str(count),
                namespace="ns",
                owner_kind="StatefulSet",
                owner_name=controller,
                server="vllm",
                le=le,
            )
            for le, count in zip(("0.1", "1.0", "+Inf"), counts, strict=True)
        ]

    lws = {"label_leaderworkerset_sigs_k8s_io_name": "lws"}
    answers = {
        q.PRESENCE: [pod("a", "60"), pod("b", "60")],
        q.POD_LABELS: [item(1, namespace="ns", pod=p, **lws) for p in "ab"],
        q.OWNERS: [
            item(1, namespace="ns", pod="a", owner_kind="StatefulSet", owner_name="lws"),
            item(1, namespace="ns", pod="b", owner_kind="StatefulSet", owner_name="lws-0"),
        ],
        "ttft": buckets("lws", (90, 90, 90)) + buckets("lws-0", (0, 10, 10)),
    }

    row = build_hour(answers)[0][("ns", "LeaderWorkerSet", "lws")]

    assert row.replicas_seen == 2
    assert row.ttft_p50_seconds == pytest.approx(0.1 * 50 / 90)
    assert row.ttft_p95_seconds == pytest.approx(0.1 + 0.9 * 5 / 10)


def test_beat_runs_the_collection_task_within_its_interval():
    from config.settings import CELERY_BEAT_SCHEDULE
    from serving.tasks import collect_serving_hours

    entry = CELERY_BEAT_SCHEDULE["collect-serving-hours"]

    assert entry["task"] == collect_serving_hours.name
    assert entry["options"]["expires"] <= entry["schedule"]
