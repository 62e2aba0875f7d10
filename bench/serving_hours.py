"""Benchmark: what the serving hour's queries add to a collection window, from a real Prometheus.

    .venv/bin/python bench/serving_hours.py [--small] [--gpus 50000] [--serving-pods 5000]
        [--database NAME] [--work DIR] [--rounds 3]

1. Generates the fleet of bench/collect.py (DCGM + kube-state-metrics, ``--minutes`` of it, 30 s
   scrapes) and one hour of vLLM series for ``--serving-pods`` pods (50 per Deployment, each
   holding one GPU: gauges, counters and the three latency histograms with vLLM's own bucket
   bounds, plus their owners and GPU requests), imports both with promtool and starts Prometheus
   on them, and a fresh PostgreSQL database.
2. Times one collection window end to end (``Collector.run``, rollup left out) and one serving
   hour end to end (``serving.collector.collect_hour``: queries, parse, write), best of
   ``--rounds`` each, as wall time and CPU of this process, its PostgreSQL backend and
   Prometheus.
3. Prints the serving hour's cost over the window's: the target is at most 10 % at 50,000 GPUs
   and 5,000 serving pods. The serving hour runs once an hour, so it is also printed spread over
   the hour's windows (60 at the default 60 s).

The full-scale run (``--gpus 50000 --serving-pods 5000``) writes ~40 M serving samples and needs
a quiet machine; ``--small`` (200 GPUs, 20 serving pods) checks it runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from collect import BASE_DIR, END, Cost, CostMeter, fresh_database, setup_django, write_fleet

PODS_PER_DEPLOYMENT = 50
SCRAPE_SECONDS = 30
# vLLM's bucket bounds (vllm/v1/metrics/loggers.py): the real cardinality of its histograms.
TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
       20.0, 40.0, 80.0)  # fmt: skip
E2E = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
       240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


def _pod(index: int) -> tuple[str, str, str]:
    """(namespace, ReplicaSet, pod) of serving pod ``index``."""
    deployment = index // PODS_PER_DEPLOYMENT
    namespace = f"serve-{deployment % 100:02d}"
    return namespace, f"llm-{deployment:04d}-6d5f", f"llm-{deployment:04d}-6d5f-{index:05d}"


def write_serving(path: Path, pods: int) -> int:
    """One hour up to END of vLLM series for ``pods`` pods, as OpenMetrics; returns samples."""
    from tests.prometheus_server import OpenMetricsWriter

    stamps = [
        (END - timedelta(seconds=SCRAPE_SECONDS * step)).timestamp()
        for step in range(3600 // SCRAPE_SECONDS, -1, -1)
    ]
    labels = [
        (f'namespace="{ns}",pod="{pod}",model_name="llama",engine="0"', ns, rs, pod)
        for ns, rs, pod in (_pod(i) for i in range(pods))
    ]

    def family(out: OpenMetricsWriter, name: str, value: object, extra: str = "") -> None:
        out.family(name, "unknown")
        for text, *_ in labels:
            lines = "".join(
                f"{name}{{{text}{extra}}} {value(step) if callable(value) else value} {ts:.3f}\n"
                for step, ts in enumerate(stamps)
            )
            out.lines(lines, len(stamps))

    with OpenMetricsWriter(path) as out:
        family(out, "vllm:num_requests_running", 12)
        family(out, "vllm:num_requests_waiting", 1)
        family(out, "vllm:kv_cache_usage_perc", 0.5)
        family(out, "vllm:request_success_total", lambda s: 60 * s, ',finished_reason="stop"')
        family(out, "vllm:prompt_tokens_total", lambda s: 30000 * s)
        family(out, "vllm:generation_tokens_total", lambda s: 6000 * s)
        for name, bounds in (
            ("vllm:time_to_first_token_seconds", TTFT),
            ("vllm:inter_token_latency_seconds", ITL),
            ("vllm:e2e_request_latency_seconds", E2E),
        ):
            out.family(f"{name}_bucket", "unknown")
            for text, *_ in labels:
                for rank, bound in enumerate((*bounds, float("inf"))):
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    share = min(1.0, (rank + 1) / len(bounds))
                    out.lines(
                        "".join(
                            f'{name}_bucket{{{text},le="{le}"}} {60 * step * share} {ts:.3f}\n'
                            for step, ts in enumerate(stamps)
                        ),
                        len(stamps),
                    )
        out.family("kube_pod_owner", "unknown")
        for _, ns, rs, pod in labels:
            text = (
                f'namespace="{ns}",pod="{pod}",uid="u-{pod}",owner_kind="ReplicaSet",'
                f'owner_name="{rs}",owner_is_controller="true"'
            )
            out.lines(
                "".join(f"kube_pod_owner{{{text}}} 1 {ts:.3f}\n" for ts in stamps), len(stamps)
            )
        out.family("kube_replicaset_owner", "unknown")
        for ns, rs in sorted({(ns, rs) for _, ns, rs, _ in labels}):
            text = (
                f'namespace="{ns}",replicaset="{rs}",owner_kind="Deployment",owner_name="{rs[:-5]}"'
            )
            out.lines(
                "".join(f"kube_replicaset_owner{{{text}}} 1 {ts:.3f}\n" for ts in stamps),
                len(stamps),
            )
        out.family("kube_pod_container_resource_requests", "unknown")
        for _, ns, _, pod in labels:
            text = (
                f'namespace="{ns}",pod="{pod}",uid="u-{pod}",container="vllm",'
                'resource="nvidia_com_gpu",unit="integer"'
            )
            out.lines(
                "".join(
                    f"kube_pod_container_resource_requests{{{text}}} 1 {ts:.3f}\n" for ts in stamps
                ),
                len(stamps),
            )
        return out.samples


def total_cpu(cost: Cost) -> float:
    return cost.cpu + (cost.backend_cpu or 0.0) + (cost.prometheus_cpu or 0.0)


def describe(cost: Cost) -> str:
    return (
        f"{cost.wall:.2f} s wall; CPU: process {cost.cpu:.2f} s, PostgreSQL "
        f"{cost.backend_cpu or 0.0:.2f} s, Prometheus {cost.prometheus_cpu or 0.0:.2f} s"
    )


def measure(url: str, database_url: str, pid: int, rounds: int) -> tuple[Cost, Cost, int]:
    setup_django(database_url)
    from fleet import constants as c
    from fleet.choices import IngestSource
    from fleet.models import Cluster, CollectionCursor
    from fleet.prometheus import PrometheusClient
    from ledger.collector import Collector
    from serving.collector import collect_hour

    cluster = Cluster.objects.create(name="bench", prometheus_url=url)
    client = PrometheusClient(url, timeout=600)
    meter = CostMeter(pid or None)
    window_end = END - timedelta(minutes=2)

    def window() -> object:
        CollectionCursor.objects.update_or_create(
            cluster=cluster,
            source=IngestSource.DCGM,
            defaults={"last_window_end": window_end - timedelta(minutes=1)},
        )
        collector = Collector(cluster, client=client)
        collector._roll_up = lambda hour, result, **_: None  # type: ignore[method-assign]
        return collector.run(now=window_end + timedelta(seconds=c.COLLECT_DELAY_SECONDS + 1))

    windows = [meter.measure(window)[0] for _ in range(rounds)]
    hours = []
    rows = 0
    for _ in range(rounds):
        cost, result = meter.measure(
            lambda: collect_hour(cluster, END - timedelta(hours=1), client=client)
        )
        hours.append(cost)
        rows = result.rows  # type: ignore[attr-defined]
    return min(windows, key=total_cpu), min(hours, key=total_cpu), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=50_000)
    parser.add_argument("--minutes", type=int, default=15, help="Minutes of the DCGM fleet.")
    parser.add_argument("--serving-pods", type=int, default=5_000)
    parser.add_argument("--database", default="gl_bench_serving", help="Scratch database name.")
    parser.add_argument("--work", type=Path, help="Work directory (kept).")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="200 GPUs, 20 serving pods.")
    args = parser.parse_args()
    if args.small:
        args.gpus, args.minutes, args.serving_pods, args.rounds = 200, 3, 20, 1
    work = args.work or Path(tempfile.mkdtemp(prefix="gl-bench-serving-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"bench/serving_hours.py (code {BASE_DIR}, work dir {work})", flush=True)
    from tests.prometheus_server import create_blocks

    tsdb = work / f"tsdb-{args.gpus}-0"
    marker = work / f"serving-{args.serving_pods}.imported"
    if not tsdb.exists() or not marker.exists():
        # The fleet's blocks, then the serving hour's, into one TSDB.
        started = time.perf_counter()
        om = work / f"fleet-{args.gpus}.om"
        samples = write_fleet(om, args.gpus, args.minutes)
        create_blocks(om, tsdb)
        om = work / f"serving-{args.serving_pods}.om"
        samples += write_serving(om, args.serving_pods)
        create_blocks(om, tsdb)
        om.unlink()
        marker.touch()
        print(
            f"  {args.gpus:,} GPUs x {args.minutes} min and {args.serving_pods:,} serving pods "
            f"x 1 h: {samples:,} samples written and imported in "
            f"{time.perf_counter() - started:.1f} s",
            flush=True,
        )
    from tests.prometheus_server import PrometheusServer

    server = PrometheusServer(tsdb).start()
    try:
        process = getattr(server, "_process", None)
        window, hour, rows = measure(
            server.url,
            fresh_database(args.database),
            process.pid if process is not None else 0,
            args.rounds,
        )
    finally:
        server.cleanup()
    print(f"one window, {args.gpus} GPUs: {describe(window)}")
    print(f"serving hour, {args.serving_pods} pods ({rows} workloads): {describe(hour)}")
    ratio_cpu = total_cpu(hour) / total_cpu(window)
    ratio_wall = hour.wall / window.wall
    print(
        f"serving hour / window: CPU {ratio_cpu:.1%}, wall {ratio_wall:.1%} (target <= 10 %); "
        f"spread over the hour's 60 windows: CPU {ratio_cpu / 60:.2%}, wall {ratio_wall / 60:.2%}"
    )


if __name__ == "__main__":
    main()
