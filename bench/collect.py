"""Benchmark: one collection window of a 50,000-GPU cluster from a real Prometheus into PostgreSQL.

    .venv/bin/python bench/collect.py [--gpus 50000] [--minutes 15] [--backfill-gpus 5000]
        [--queues 1000] [--database NAME] [--no-backfill]

1. Generates an OpenMetrics backfill (DCGM exporter series with exported_* pod labels, 6 fields,
   30 s scrape interval, plus kube-state-metrics for the pods) and imports it with promtool.
2. Starts Prometheus on it (loopback, temp dir) and a fresh PostgreSQL database.
3. In a fresh child process (so peak RSS is the collection's alone): times the same queries as a
   collection window fetched raw, undecoded (the floor: Prometheus alone), then one window end to
   end through ``Collector.run`` (queries + parse + build + write), reported without and with the
   hourly rollup.
   With ``--queues N`` (default 1,000) the history also holds Kueue's ClusterQueue gauges of N
   queues, and the window is re-run with and without the Kueue queries (best of three each).
4. Backfills N minutes of a 5,000-GPU cluster window by window and extrapolates to 24 h.

Targets (issue 3): <= 10 s and <= 1 GB peak RSS per window at 50,000 GPUs, within 3x the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

PG_ADMIN = "postgres://postgres@127.0.0.1:5432/postgres"
SCRAPE_SECONDS = 30
# A fixed, hour-aligned past moment: the data ends here; queries name their time explicitly.
END = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
FIELDS = (
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
)


def write_fleet(path: Path, gpus: int, minutes: int, seed: int = 7, queues: int = 0) -> int:
    """Nodes of 8 GPUs; 8 of every 10 nodes run one 8-GPU pod; ``queues`` ClusterQueues of
    Kueue metrics (2 flavors each, in 50 cohorts); returns samples written."""
    from tests.prometheus_server import OpenMetricsWriter

    rng = random.Random(seed)
    start = END.timestamp() - minutes * 60
    times = [start + 11 + SCRAPE_SECONDS * i for i in range(minutes * 60 // SCRAPE_SECONDS)]
    stamps = [f" {t:.3f}\n" for t in times]
    nodes = gpus // 8
    with OpenMetricsWriter(path) as out:
        for field in FIELDS:
            out.family(field)
            for node in range(nodes):
                held = node % 10 < 8
                host = f"gpu-node-{node:05d}"
                address = f"10.{node // 250}.{node % 250}.9:9400"
                exporter = (
                    f'container="nvidia-dcgm-exporter",instance="{address}",'
                    f'job="nvidia-dcgm-exporter",namespace="gpu-operator",pod="dcgm-{node:05d}"'
                )
                workload = (
                    f',exported_container="main",exported_namespace="team-{node % 50:02d}",'
                    f'exported_pod="job-{node:05d}-0"'
                    if held
                    else ""
                )
                chunks = []
                for gpu in range(8):
                    prefix = (
                        f'{field}{{gpu="{gpu}",UUID="GPU-{node:05d}-{gpu}",modelName="NVIDIA H100 '
                        f'80GB HBM3",Hostname="{host}",{exporter}{workload}}} '
                    )
                    base = rng.random() if held else 0.0
                    scale = 100.0 if field.endswith("UTIL") else 80000.0 if "FB" in field else 1.0
                    for stamp in stamps:
                        value = min(1.0, max(0.0, base + rng.uniform(-0.1, 0.1))) * scale
                        chunks.append(f"{prefix}{value:.4f}{stamp}")
                out.lines("".join(chunks), len(chunks))
        pods = [node for node in range(nodes) if node % 10 < 8]
        target = ',instance="10.255.0.9:8080",job="kube-state-metrics"'

        def pod_labels(node: int) -> str:
            return f'namespace="team-{node % 50:02d}",pod="job-{node:05d}-0",uid="u{node:05d}"'

        families = {
            "kube_pod_info": lambda n: [(f',node="gpu-node-{n:05d}"', 1)],
            "kube_pod_status_phase": lambda n: [
                (f',phase="{p}"', 1 if p == "Running" else 0)
                for p in ("Pending", "Running", "Succeeded", "Failed", "Unknown")
            ],
            "kube_pod_container_resource_requests": lambda n: [
                (f',container="main",node="gpu-node-{n:05d}",resource="nvidia_com_gpu"', 8),
                (f',container="main",node="gpu-node-{n:05d}",resource="cpu"', 32),
            ],
            "kube_pod_labels": lambda n: [
                (
                    f',label_kueue_x_k8s_io_cluster_queue_name="cq-{n % 50:02d}",'
                    f'label_kueue_x_k8s_io_local_queue_name="lq-{n % 50:02d}"',
                    1,
                )
            ],
        }
        for family, series in families.items():
            out.family(family)
            chunks = []
            for node in pods:
                for extra, value in series(node):
                    prefix = f"{family}{{{pod_labels(node)}{extra}{target}}} {value}"
                    chunks.extend(f"{prefix}{stamp}" for stamp in stamps)
            out.lines("".join(chunks), len(chunks))
        write_kueue(out, queues, stamps)
        return out.samples


KUEUE_TARGET = ',instance="10.255.0.10:8443",job="kueue-controller-manager",replica_role="leader"'


def write_kueue(out: object, queues: int, stamps: list[str]) -> None:
    """Kueue's ClusterQueue gauges (``metrics.enableClusterQueueResources``) for ``queues``
    queues, two GPU flavors each, as Kueue v0.19 labels them."""
    per_flavor = {
        "kueue_cluster_queue_nominal_quota": lambda q: 16,
        "kueue_cluster_queue_borrowing_limit": lambda q: "+Inf",
        "kueue_cluster_queue_lending_limit": lambda q: 8,
        "kueue_cluster_queue_resource_usage": lambda q: 8 + q % 16,
        "kueue_cluster_queue_resource_reservation": lambda q: 8 + q % 16,
    }
    for family, value in per_flavor.items():
        out.family(family)  # type: ignore[attr-defined]
        chunks = []
        for q in range(queues):
            for flavor in ("h100", "a100"):
                prefix = (
                    f'{family}{{cohort="cohort-{q % 50:02d}",cluster_queue="cq-{q:04d}",'
                    f'flavor="{flavor}",resource="nvidia.com/gpu"{KUEUE_TARGET}}} {value(q)}'
                )
                chunks.extend(f"{prefix}{stamp}" for stamp in stamps)
        out.lines("".join(chunks), len(chunks))  # type: ignore[attr-defined]
    per_queue = {
        "kueue_cluster_queue_resource_pending": (',resource="nvidia.com/gpu"', 4),
        "kueue_admitted_active_workloads": ("", 3),
        "kueue_cluster_queue_info": (',parent_cohort="cohort-X",root_cohort="cohort-X"', 1),
    }
    for family, (extra, value) in per_queue.items():
        out.family(family)  # type: ignore[attr-defined]
        chunks = []
        for q in range(queues):
            labels = f'cluster_queue="cq-{q:04d}"{extra.replace("X", f"{q % 50:02d}")}'
            prefix = f"{family}{{{labels}{KUEUE_TARGET}}} {value}"
            chunks.extend(f"{prefix}{stamp}" for stamp in stamps)
        out.lines("".join(chunks), len(chunks))  # type: ignore[attr-defined]
    out.family("kueue_pending_workloads")  # type: ignore[attr-defined]
    chunks = []
    for q in range(queues):
        for status in ("active", "inadmissible"):
            prefix = (
                f'kueue_pending_workloads{{cluster_queue="cq-{q:04d}",status="{status}"'
                f"{KUEUE_TARGET}}} 1"
            )
            chunks.extend(f"{prefix}{stamp}" for stamp in stamps)
    out.lines("".join(chunks), len(chunks))  # type: ignore[attr-defined]


def prepare_prometheus(work: Path, gpus: int, minutes: int, queues: int = 0):
    from tests.prometheus_server import PrometheusServer, create_blocks

    tsdb = work / f"tsdb-{gpus}-{queues}"
    if tsdb.exists():
        # --work of an earlier run: the same generated fleet, already imported.
        print(f"  {gpus:,} GPUs: reusing {tsdb}", flush=True)
        return PrometheusServer(tsdb).start()
    om = work / f"fleet-{gpus}.om"
    started = time.perf_counter()
    samples = write_fleet(om, gpus, minutes, queues=queues)
    generated = time.perf_counter() - started
    started = time.perf_counter()
    create_blocks(om, tsdb)
    imported = time.perf_counter() - started
    om.unlink()
    print(
        f"  {gpus:,} GPUs x {minutes} min: {samples:,} samples generated in {generated:.1f} s, "
        f"imported by promtool in {imported:.1f} s",
        flush=True,
    )
    return PrometheusServer(tsdb).start()


def fresh_database(name: str) -> str:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgres://postgres@127.0.0.1:5432/{name}"


def setup_django(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.apps import apps
    from django.conf import settings
    from django.core.management import call_command

    # Tables straight from the models, as the test suite does (--no-migrations).
    settings.MIGRATION_MODULES = {config.label: None for config in apps.get_app_configs()}
    call_command("migrate", run_syncdb=True, verbosity=0)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_window(url: str, database_url: str, queues: int = 0) -> dict:
    """Child process: floor, then one window end to end, then the rollup."""
    setup_django(database_url)
    from fleet import constants as c
    from fleet.choices import IngestSource
    from fleet.models import Cluster, CollectionCursor
    from fleet.prometheus import PrometheusClient
    from ledger.collector import KUEUE, Collector, window_queries
    from ledger.models import GpuUsage
    from ledger.rollup import roll_up_hour
    from quotas.models import ClusterQueue

    cluster = Cluster.objects.create(name="bench", prometheus_url=url)
    # The ClusterQueues an earlier sync listed: Kueue's samples are written for known queues.
    ClusterQueue.objects.bulk_create(
        [ClusterQueue(cluster=cluster, name=f"cq-{q:04d}") for q in range(queues)],
        batch_size=1000,
    )
    window_end = END - timedelta(minutes=2)
    client = PrometheusClient(url, timeout=120)
    queries = window_queries("auto", 60)
    kueue_queries = {name: q for name, q in queries.items() if name.startswith(KUEUE)}
    params = {"time": f"{window_end.timestamp():.3f}"}

    def raw(promql: str) -> int:
        return len(client.fetch_raw("/api/v1/query", {"query": promql, **params}))

    floors, sizes = [], 0
    for _ in range(3):
        started = time.perf_counter()
        with ThreadPoolExecutor(c.QUERY_CONCURRENCY) as pool:
            sizes = sum(pool.map(raw, queries.values()))
        floors.append(time.perf_counter() - started)
    started = time.perf_counter()
    for promql in queries.values():
        raw(promql)
    floor_sequential = time.perf_counter() - started

    kueue_floor = []
    for _ in range(3):
        started = time.perf_counter()
        with ThreadPoolExecutor(c.QUERY_CONCURRENCY) as pool:
            list(pool.map(raw, kueue_queries.values()))
        kueue_floor.append(time.perf_counter() - started)

    def window_run(with_kueue: bool) -> tuple[float, int]:
        CollectionCursor.objects.update_or_create(
            cluster=cluster,
            source=IngestSource.DCGM,
            defaults={"last_window_end": window_end - timedelta(minutes=1)},
        )
        collector = Collector(cluster, client=client)
        if not with_kueue:
            collector.queries = {
                n: q for n, q in collector.queries.items() if n not in kueue_queries
            }
        # Rollups timed on their own: patch them out of the window run.
        collector._roll_up = lambda hour, result, **_: None  # type: ignore[method-assign]
        started = time.perf_counter()
        result = collector.run(now=window_end + timedelta(seconds=c.COLLECT_DELAY_SECONDS + 1))
        return time.perf_counter() - started, result.windows

    results = []
    for attempt in range(2):
        seconds, windows = window_run(with_kueue=True)
        results.append((seconds, windows, attempt))
    # Re-runs (rows replaced) alternately with and without Kueue's queries, best of three each.
    with_kueue, without_kueue = [], []
    for _ in range(3):
        without_kueue.append(window_run(with_kueue=False)[0])
        with_kueue.append(window_run(with_kueue=True)[0])
    from quotas.models import ClusterQueueSample

    kueue_samples = ClusterQueueSample.objects.filter(sampled_at=window_end).count()
    rows = GpuUsage.objects.filter(cluster=cluster, window_end=window_end).count()
    started = time.perf_counter()
    roll_up_hour(cluster.pk, window_end - timedelta(minutes=1))
    rollup_seconds = time.perf_counter() - started
    return {
        "floor_seconds": min(floors),
        "floor_sequential_seconds": floor_sequential,
        "answer_mib": sizes / 2**20,
        "window_seconds_first": results[0][0],
        "window_seconds_rerun": results[1][0],
        "windows": results[0][1],
        "usage_rows": rows,
        "rollup_seconds": rollup_seconds,
        "peak_rss_mib": peak_rss_mib(),
        "kueue_queries": len(kueue_queries),
        "kueue_floor_seconds": min(kueue_floor),
        "window_with_kueue_seconds": min(with_kueue),
        "window_without_kueue_seconds": min(without_kueue),
        "kueue_samples": kueue_samples,
    }


def measure_backfill(url: str, database_url: str, minutes: int) -> dict:
    setup_django(database_url)
    from fleet.models import Cluster
    from ledger.collector import Collector

    cluster = Cluster.objects.create(name="backfill", prometheus_url=url)
    start = END - timedelta(minutes=minutes)
    started = time.perf_counter()
    result = Collector(cluster).backfill(start, END, now=END + timedelta(minutes=5))
    elapsed = time.perf_counter() - started
    return {
        "windows": result.windows,
        "seconds": elapsed,
        "hours_rolled_up": len(result.hours_rolled_up),
        "peak_rss_mib": peak_rss_mib(),
    }


def child(kind: str, *args: str) -> dict:
    output = subprocess.run(
        [sys.executable, __file__, "--child", kind, *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=BASE_DIR,
    )
    if output.returncode != 0:
        raise SystemExit(f"child {kind} failed:\n{output.stderr[-4000:]}")
    return json.loads(output.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=50_000)
    parser.add_argument("--minutes", type=int, default=15)
    parser.add_argument("--backfill-gpus", type=int, default=5_000)
    parser.add_argument("--backfill-minutes", type=int, default=60)
    parser.add_argument(
        "--queues", type=int, default=1000, help="ClusterQueues of Kueue metrics (0: none)."
    )
    parser.add_argument("--database", default="gl_bench_collect", help="Scratch database name.")
    parser.add_argument("--no-backfill", action="store_true", help="Only the one-window part.")
    parser.add_argument("--work", type=Path, help="Work directory; reuses imported TSDBs in it.")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "window":
            print(json.dumps(measure_window(rest[0], rest[1], int(rest[2]))))
        else:
            print(json.dumps(measure_backfill(rest[0], rest[1], int(rest[2]))))
        return

    work = args.work or Path(tempfile.mkdtemp(prefix="gl-bench-collect-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"bench/collect.py (work dir {work})")
    server = prepare_prometheus(work, args.gpus, args.minutes, args.queues)
    try:
        window = child("window", server.url, fresh_database(args.database), str(args.queues))
    finally:
        server.cleanup()
    ratio = window["window_seconds_first"] / window["floor_seconds"]
    print(
        f"  one window, {args.gpus:,} GPUs: {window['window_seconds_first']:.2f} s first run, "
        f"{window['window_seconds_rerun']:.2f} s re-run (replace), {window['usage_rows']:,} usage "
        f"rows, peak RSS {window['peak_rss_mib']:.0f} MiB"
    )
    print(
        f"  floor (Prometheus alone, same {10} queries, raw bytes, "
        f"{window['answer_mib']:.1f} MiB): {window['floor_seconds']:.2f} s concurrent, "
        f"{window['floor_sequential_seconds']:.2f} s sequential; ratio {ratio:.2f}x"
    )
    print(f"  hourly rollup of that hour: {window['rollup_seconds']:.2f} s")
    if args.queues:
        extra = window["window_with_kueue_seconds"] / window["window_without_kueue_seconds"] - 1
        print(
            f"  Kueue metrics of {args.queues:,} ClusterQueues ({window['kueue_queries']} queries, "
            f"{window['kueue_samples']:,} samples written): window re-run "
            f"{window['window_with_kueue_seconds']:.2f} s with them, "
            f"{window['window_without_kueue_seconds']:.2f} s without (best of 3 each): "
            f"{extra:+.1%}; the Kueue queries alone {window['kueue_floor_seconds']:.2f} s"
        )
    if args.no_backfill:
        return

    server = prepare_prometheus(work, args.backfill_gpus, args.backfill_minutes + 5)
    try:
        backfill = child(
            "backfill",
            server.url,
            fresh_database(args.database),
            str(args.backfill_minutes),
        )
    finally:
        server.cleanup()
    per_window = backfill["seconds"] / max(backfill["windows"], 1)
    print(
        f"  backfill {args.backfill_gpus:,} GPUs: {backfill['windows']} windows in "
        f"{backfill['seconds']:.1f} s ({per_window:.2f} s/window, rollups included), peak RSS "
        f"{backfill['peak_rss_mib']:.0f} MiB; 24 h = 1,440 windows extrapolated: "
        f"{per_window * 1440 / 60:.1f} min"
    )


if __name__ == "__main__":
    main()
