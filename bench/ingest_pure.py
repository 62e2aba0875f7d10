"""Benchmark: one 50,000-GPU DCGM window, parsed (fleet.ingest) and written (ledger.store).

Usage (DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/gpuledger_bench):
    .venv/bin/python bench/ingest_pure.py [--small] [--keep] [--windows 3]

The database is dropped and re-created (it only holds benchmark data); pass --keep to reuse it.
Prints seconds and rows/s for parse (JSON answers -> WindowBatch) and for write (one
transaction), writes of the next windows (steady state: every GPU and pod seen again; --windows),
and a plain COPY of the same usage rows into a scratch copy of the usage table: the floor.
Each step reports wall time, this process's CPU time and, when the server runs on this machine,
the CPU time of the PostgreSQL backend serving the connection (on a loaded machine wall time
mostly measures the queue for a core; the two CPU times are what the code costs).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpuledger_bench")
# Production settings (DEBUG off); a throwaway key, long enough for their check.
os.environ.setdefault("SECRET_KEY", "bench-ingest-not-a-secret-" + "x" * 32)

METRICS = ("sm_active", "pipe_tensor_active", "dram_active", "gr_engine_active", "fb_used")
HOSTS = 6250
GPUS_PER_HOST = 8
# One host in 20 is an A100 split by MIG: 2 GPUs x (3g + 2g + 1g + 1g) = 8 series, like the others.
MIG_EVERY = 20
MIG_LAYOUT = (("3g.40gb", "2"), ("2g.20gb", "3"), ("1g.10gb", "9"), ("1g.10gb", "10"))
HELD = 0.7


def backend_cpu(connection) -> float | None:
    """CPU seconds the PostgreSQL backend of ``connection`` has used, None when not local."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # Fields 14 and 15 of /proc/<pid>/stat (utime, stime), counted after the command name.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_delta(before: float | None, after: float | None) -> str:
    return "n/a" if before is None or after is None else f"{after - before:.2f} s"


def prepare_database(url: str, keep: bool) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and not keep:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            exists = None
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def fleet(seed: int = 1) -> tuple[list[dict], list[dict], list[dict]]:
    """Series labels (with pod labels on ~70 %), GPU requests and kube_pod_labels items."""
    rng = random.Random(seed)
    series, requests, pod_labels = [], [], []
    for h in range(HOSTS):
        host = f"gpu-node-{h:05d}"
        mig = h % MIG_EVERY == 0
        slots = []
        if mig:
            for g in range(2):
                for profile, gi in MIG_LAYOUT:
                    slots.append((g, profile, gi))
        else:
            slots = [(g, "", "") for g in range(GPUS_PER_HOST)]
        # Whole GPUs go to pods in pairs (2-GPU pods), MIG instances one per pod.
        step = 1 if mig else 2
        for first in range(0, len(slots), step):
            held = rng.random() < HELD
            namespace = f"team-{rng.randrange(40):02d}"
            pod = f"job-{h:05d}-{first}-{rng.randrange(10**6):06x}"
            uid = f"{h:08x}-{first:04x}-4000-8000-{rng.randrange(16**12):012x}"
            for g, profile, gi in slots[first : first + step]:
                uuid = f"GPU-{h:08x}-{g:04x}-4e0a-9c61-{h * 8 + g:012x}"
                labels = {
                    "DCGM_FI_DRIVER_VERSION": "580.95.05",
                    "Hostname": host,
                    "UUID": uuid,
                    "container": "nvidia-dcgm-exporter",
                    "device": f"nvidia{g}",
                    "endpoint": "gpu-metrics",
                    "gpu": str(g),
                    "instance": f"10.{h // 250}.{h % 250}.17:9400",
                    "job": "nvidia-dcgm-exporter",
                    "modelName": "NVIDIA A100-SXM4-80GB" if mig else "NVIDIA H100 80GB HBM3",
                    "namespace": "gpu-operator",
                    "pci_bus_id": f"00000000:{0x1B + g * 8:02X}:00.0",
                    "pod": f"nvidia-dcgm-exporter-{h:05x}",
                    "service": "nvidia-dcgm-exporter",
                }
                if profile:
                    labels.update(GPU_I_PROFILE=profile, GPU_I_ID=gi)
                if held:
                    labels.update(
                        exported_container="main", exported_namespace=namespace, exported_pod=pod
                    )
                series.append(labels)
            if held:
                resource = (
                    "nvidia_com_mig_" + slots[first][1].replace(".", "_")
                    if mig
                    else "nvidia_com_gpu"
                )
                requests.append(
                    {
                        "namespace": namespace,
                        "pod": pod,
                        "uid": uid,
                        "container": "main",
                        "node": host,
                        "resource": resource,
                        "_count": str(step),
                    }
                )
                pod_labels.append(
                    {
                        "namespace": namespace,
                        "pod": pod,
                        "uid": uid,
                        "label_kueue_x_k8s_io_cluster_queue_name": f"{namespace}-cq",
                        "label_kueue_x_k8s_io_local_queue_name": "default",
                    }
                )
    return series, requests, pod_labels


def answer(items: list[tuple[dict, str]], ts: float) -> bytes:
    return json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": m, "value": [ts, v]} for m, v in items],
            },
        }
    ).encode()


def answers(series, requests, pod_labels, end: datetime, seed: int) -> dict[str, bytes]:
    rng = random.Random(seed)
    ts = end.timestamp()
    out = {}
    for key in METRICS:
        if key == "fb_used":
            values = [str(rng.randrange(80000)) for _ in series]
        else:
            values = [f"{rng.random():.6f}" for _ in series]
        out[key] = answer(list(zip(series, values, strict=True)), ts)
    out["requests"] = answer(
        [({k: v for k, v in r.items() if k != "_count"}, r["_count"]) for r in requests], ts
    )
    out["pod_labels"] = answer([(labels, "1") for labels in pod_labels], ts)
    return out


def parse(payloads: dict[str, bytes], window):
    from fleet.ingest import WindowInput, build_window, parse_query_response

    return build_window(
        WindowInput(
            window=window,
            dcgm_avg={key: parse_query_response(payloads[key], expect="vector") for key in METRICS},
            gpu_requests=parse_query_response(payloads["requests"], expect="vector"),
            pod_labels=parse_query_response(payloads["pod_labels"], expect="vector"),
        )
    )


def migrate(call_command) -> None:
    """migrate, or, while the project apps have no migration files yet, create every table the
    way pytest's --no-migrations does (syncdb for all apps, so foreign keys to auth resolve)."""
    from django.apps import apps
    from django.conf import settings
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    if not {app for app, _ in loader.disk_migrations} >= {"fleet", "quotas"}:
        settings.MIGRATION_MODULES = {app.label: None for app in apps.get_app_configs()}
    call_command("migrate", run_syncdb=True, verbosity=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="reuse the database")
    parser.add_argument(
        "--windows", type=int, default=3, help="windows to write: 1 all new, then seen again"
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help="the same steps at a scale that takes seconds (tests/bench/test_benches.py runs it)",
    )
    args = parser.parse_args()
    if args.small:
        args.windows = 2
        globals().update(HOSTS=50)
    url = os.environ["DATABASE_URL"]
    if not url.startswith("postgres"):
        sys.exit("DATABASE_URL must point at PostgreSQL")
    prepare_database(url, args.keep)

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from core.timewindows import Window
    from fleet.models import Cluster
    from ledger.models import GpuUsage
    from ledger.store import USAGE_COLUMNS, copy_rows, write_window

    migrate(call_command)
    cluster, _ = Cluster.objects.get_or_create(name="bench")
    end = datetime(2026, 6, 15, 10, 0, tzinfo=UTC)
    windows = [
        Window(end + timedelta(minutes=n - 1), end + timedelta(minutes=n))
        for n in range(max(args.windows, 1))
    ]

    series, requests, pod_labels = fleet()
    print(
        f"fleet: {len(series):,} GPU series x {len(METRICS)} metrics, "
        f"{len(requests):,} pods ({sum(1 for s in series if 'exported_pod' in s) / len(series):.0%}"
        f" of series held), {HOSTS:,} hosts"
    )
    runs = []
    for n, window in enumerate(windows):
        payloads = answers(series, requests, pod_labels, window.end, seed=n)
        size = sum(len(p) for p in payloads.values())
        load = os.getloadavg()[0]
        started, cpu0 = time.perf_counter(), time.process_time()
        batch = parse(payloads, window)
        parsed, cpu1 = time.perf_counter(), time.process_time()
        pg1 = backend_cpu(connection)
        result = write_window(cluster, batch)
        pg2 = backend_cpu(connection)
        written, cpu2 = time.perf_counter(), time.process_time()
        runs.append((written - parsed, cpu2 - cpu1, pg1, pg2))
        records = batch.stats.records_read
        label = "first window (all new)" if n == 0 else f"window {n + 1} (all seen again)"
        print(f"\n{label}: {size / 1e6:.0f} MB of JSON, {records:,} records, load {load:.1f}")
        print(
            f"  parse {parsed - started:6.2f} s  {records / (parsed - started):>9,.0f} records/s"
            f"  -> {len(batch.usage):,} usage rows, {len(batch.gpus):,} GPUs,"
            f" {len(batch.allocations):,} allocations, {batch.stats.skipped} skipped"
        )
        print(
            f"  write {written - parsed:6.2f} s"
            f"  {len(batch.usage) / (written - parsed):>9,.0f} usage rows/s  ({result})"
        )
        print(f"  total {written - started:6.2f} s")
        # What the wall time would shrink towards on an idle machine: this process's CPU plus
        # the PostgreSQL backend's.
        print(
            f"  CPU: parse {cpu1 - cpu0:.2f} s, write {cpu2 - cpu1:.2f} s"
            f" + PostgreSQL backend {_cpu_delta(pg1, pg2)}"
        )

    # The floor: COPY the same usage rows into a scratch copy of the usage table.
    rows = list(
        GpuUsage.objects.filter(cluster=cluster, window_end=windows[-1].end).values_list(
            *USAGE_COLUMNS
        )
    )
    now = timezone.now()
    rows = [(*row[:-1], now) for row in rows]
    # A regular (logged) table with the same indexes, like the real one; a temporary table
    # would skip the WAL and flatter the floor.
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS usage_scratch")
        cursor.execute("CREATE TABLE usage_scratch (LIKE fleet_gpuusage INCLUDING ALL)")
    with transaction.atomic():
        pg1 = backend_cpu(connection)
        started, cpu0 = time.perf_counter(), time.process_time()
        copy_rows("usage_scratch", USAGE_COLUMNS, rows)
        copied, copy_cpu = time.perf_counter() - started, time.process_time() - cpu0
        pg2 = backend_cpu(connection)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE usage_scratch")
    print(
        f"\nCOPY floor: {len(rows):,} rows in {copied:.2f} s ({len(rows) / copied:,.0f} rows/s);"
        f" CPU {copy_cpu:.2f} s + PostgreSQL backend {_cpu_delta(pg1, pg2)}"
    )
    copy_total = None if pg1 is None or pg2 is None else copy_cpu + pg2 - pg1
    for n, (write_s, write_cpu, w1, w2) in enumerate(runs):
        line = f"  window {n + 1}: write / COPY = {write_s / copied:.1f}x wall"
        if copy_total and w1 is not None and w2 is not None:
            line += f", {(write_cpu + w2 - w1) / copy_total:.1f}x CPU (process + backend)"
        print(line)


if __name__ == "__main__":
    main()
