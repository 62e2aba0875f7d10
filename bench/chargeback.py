"""Chargeback API benchmark on PostgreSQL, with a PromQL anchor on a real Prometheus.

Data (loaded once, reused when present; ``--reload`` rebuilds): 1 cluster, 200 teams, 1,000
ClusterQueues (5 per team, 50 cohorts), 1,000 LocalQueues, 50,000 workloads, and 400 days of
hourly rollups up to 2026-02-01: team and cluster_queue rows for every hour (1.92 M + 9.6 M
rows), workload rows only for the hours each workload lived (1-48 h, spread over the 400 days,
~1.2 M rows). Rows go in with COPY after dropping the table's indexes and constraints, which
are then rebuilt (one sort each instead of 12 M index inserts).

Measured: GET /api/v1/chargeback/ through the Django stack (middleware, DRF, JSON or streamed
CSV fully consumed), p50 / p95 over 20 runs, 30 and 365 days, by team and by workload.

Anchor: GPU-hours per namespace over 30 days with sum_over_time on a real Prometheus
(/usr/bin/prometheus) backfilled with ``promtool tsdb create-blocks-from openmetrics``; the
ratio chargeback / PromQL is printed. Defaults: 1,000 GPUs at a 15-minute sample interval
(``--prom-gpus``, ``--prom-interval``); see bench/RESULTS.md for why not 5,000 at 5 minutes.

    .venv/bin/python bench/chargeback.py [--small] [--database-url postgres://…] [--runs 20]
        [--reload]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpuledger_bench_chargeback"
END = datetime(2026, 2, 1, tzinfo=UTC)
DAYS = 400
HOURS = DAYS * 24
TEAMS = 200
QUEUES = 1000
COHORTS = 50
WORKLOADS = 50_000
ROLLUP_COLUMNS = [
    "cluster_id", "scope", "key", "hour", "flavor", "gpu_model", "team_id", "cluster_queue_id",
    "workload_id", "capacity_gpu_hours", "allocated_gpu_hours", "telemetry_gpu_hours",
    "active_gpu_hours", "idle_gpu_hours", "shared_gpu_hours", "fallback_gpu_hours",
    "tensor_active_gpu_hours", "tensor_covered_gpu_hours", "gpu_util_gpu_hours",
    "gpu_util_covered_gpu_hours", "busy_not_working_gpu_hours", "nominal_gpu_hours",
    "borrowed_gpu_hours", "lent_gpu_hours", "pending_gpu_hours", "peak_allocated_gpus",
    "windows", "updated_at",
]  # fmt: skip


def setup_django(database_url: str) -> None:
    ensure_database(database_url)
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret-" + "x" * 32)
    os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings_test"
    import django

    django.setup()


def ensure_database(database_url: str) -> None:
    import psycopg

    parts = urllib.parse.urlsplit(database_url)
    name = parts.path.lstrip("/")
    admin = urllib.parse.urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def ensure_tables() -> None:
    """migrate (syncdb for apps without migrations), then any model table still missing."""
    from django.apps import apps
    from django.core.management import call_command
    from django.db import connection

    # Contrib apps first: the unmigrated apps' tables point at auth_user.
    for app in ("contenttypes", "auth"):
        call_command("migrate", app, verbosity=0)
    call_command("migrate", run_syncdb=True, verbosity=0)
    existing = set(connection.introspection.table_names())
    with connection.schema_editor() as editor:
        for model in apps.get_models():
            if model._meta.db_table not in existing and model._meta.managed:
                editor.create_model(model)
        # Indexes declared on HourlyRollup but missing (no migration yet) are added here.
        from ledger.models import HourlyRollup

        with connection.cursor() as cursor:
            present = connection.introspection.get_constraints(cursor, HourlyRollup._meta.db_table)
        for index in HourlyRollup._meta.indexes:
            if index.name not in present:
                editor.add_index(HourlyRollup, index)


def load(reload: bool) -> None:
    from ledger.models import HourlyRollup

    if not reload and HourlyRollup.objects.filter(scope="workload").exists():
        print("data present (use --reload to rebuild)")
        return
    started = time.perf_counter()
    cluster, teams, queues, workloads, lifetimes = _objects()
    print(f"objects in {time.perf_counter() - started:.1f}s")
    lines = _rollup_lines(cluster.pk, teams, queues, workloads, lifetimes)
    _copy_rollups(lines)
    print(f"loaded in {time.perf_counter() - started:.1f}s")


def _objects() -> tuple[Any, list[Any], list[Any], list[Any], list[tuple[int, int, int, int]]]:
    """The cluster, teams, cohorts, queues, workloads (with their lifetimes) and rate cards."""
    from django.db import connection

    from fleet.models import Cluster
    from ledger.choices import RateKind
    from ledger.models import HourlyRollup, RateCard
    from quotas.models import ClusterQueue, Cohort, LocalQueue, Team, Workload

    with connection.cursor() as cursor:
        for model in (HourlyRollup, Workload, LocalQueue, ClusterQueue, Cohort, Team, RateCard):
            cursor.execute(f'TRUNCATE "{model._meta.db_table}" CASCADE')
        cursor.execute(f'TRUNCATE "{Cluster._meta.db_table}" CASCADE')
    cluster = Cluster.objects.create(name="bench")
    teams = Team.objects.bulk_create(Team(name=f"team-{i:03d}") for i in range(TEAMS))
    cohorts = Cohort.objects.bulk_create(
        Cohort(cluster=cluster, name=f"cohort-{i:02d}") for i in range(COHORTS)
    )
    queues = ClusterQueue.objects.bulk_create(
        ClusterQueue(
            cluster=cluster,
            name=f"cq-{i:04d}",
            cohort=cohorts[i % COHORTS],
            cohort_name=cohorts[i % COHORTS].name,
            team=teams[i // (QUEUES // TEAMS)],
        )
        for i in range(QUEUES)
    )
    local_queues = LocalQueue.objects.bulk_create(
        LocalQueue(
            cluster=cluster,
            namespace=f"ns-{i:04d}",
            name="lq",
            cluster_queue=queue,
            cluster_queue_name=queue.name,
        )
        for i, queue in enumerate(queues)
    )
    rng = random.Random(42)
    lifetimes = []
    workloads = []
    for i in range(WORKLOADS):
        q = i % QUEUES
        hours = rng.randint(1, 48)
        first = rng.randrange(0, HOURS - hours)
        lifetimes.append((q, first, hours, rng.choice((1, 2, 4, 8))))
        workloads.append(
            Workload(
                cluster=cluster,
                namespace=local_queues[q].namespace,
                name=f"job-{i:05d}",
                queue_name="lq",
                local_queue=local_queues[q],
                cluster_queue=queues[q],
                state="succeeded",
            )
        )
    workloads = Workload.objects.bulk_create(workloads, batch_size=5000)
    first_day, price_change = END - timedelta(days=DAYS), END - timedelta(days=90)
    RateCard.objects.bulk_create(
        [
            RateCard(flavor="h100", price_per_gpu_hour="3.50", effective_from=first_day),
            RateCard(flavor="h100", price_per_gpu_hour="3.00", effective_from=price_change),
            RateCard(gpu_model="NVIDIA A100", price_per_gpu_hour="1.80",
                     effective_from=END - timedelta(days=DAYS)),
            RateCard(price_per_gpu_hour="1.00", effective_from=END - timedelta(days=DAYS)),
            RateCard(kind=RateKind.BORROWING, price_per_gpu_hour="4.00",
                     effective_from=END - timedelta(days=DAYS)),
        ]
    )  # fmt: skip
    return cluster, teams, queues, workloads, lifetimes


def _rollup_lines(
    cluster_id: int,
    teams: list[Any],
    queues: list[Any],
    workloads: list[Any],
    lifetimes: list[tuple[int, int, int, int]],
) -> Iterator[str]:
    """COPY lines of the rollups: teams and queues every hour, workloads over their lifetimes."""
    start = END - timedelta(hours=HOURS)
    hour_text = [(start + timedelta(hours=h)).isoformat() for h in range(HOURS)]
    now = datetime.now(UTC).isoformat()
    flavors = (("h100", "NVIDIA H100"), ("a100", "NVIDIA A100"))

    def figures(allocated: float, nominal: float, borrowed: float) -> str:
        telemetry = allocated * 0.9
        return "\t".join(
            f"{v:g}"
            for v in (
                0, allocated, telemetry, telemetry * 0.55, allocated * 0.1, 0, 0, 0, 0, 0, 0, 0,
                nominal, borrowed, max(nominal - allocated, 0) * 0.5, 0, allocated,
            )
        )  # fmt: skip

    def group_lines(scope: str, key: str, index: int, team_id, queue_id, size: float):
        flavor, model = flavors[index % 2]
        prefix = f"{cluster_id}\t{scope}\t{key}\t"
        middle = f"\t{flavor}\t{model}\t{team_id}\t{queue_id}\t\\N\t"
        busy = figures(size * 1.5, size, size * 0.5)
        quiet = figures(size * 0.5, size, 0.0)
        suffix_busy = f"{middle}{busy}\t60\t{now}\n"
        suffix_quiet = f"{middle}{quiet}\t60\t{now}\n"
        for h in range(HOURS):
            yield prefix + hour_text[h] + (suffix_busy if 8 <= h % 24 < 20 else suffix_quiet)

    def rows():
        for i, team in enumerate(teams):
            yield from group_lines("team", team.name, i, team.pk, "\\N", 5 * (1 + i % 4))
        for i, queue in enumerate(queues):
            team_id = queue.team_id
            yield from group_lines(
                "cluster_queue", queue.name, i // 5, team_id, queue.pk, 1 + i % 4
            )
        for workload, (q, first, hours, gpus) in zip(workloads, lifetimes, strict=True):
            flavor, model = flavors[(q // 5) % 2]
            key = f"{workload.namespace}/{workload.name}"
            tail = (
                f"\t{flavor}\t{model}\t{queues[q].team_id}\t{queues[q].pk}\t{workload.pk}\t"
                f"{figures(gpus, 0, 0)}\t60\t{now}\n"
            )
            for h in range(first, first + hours):
                yield f"{cluster_id}\tworkload\t{key}\t{hour_text[h]}{tail}"

    return rows()


def _copy_rollups(lines: Iterator[str]) -> None:
    """COPY the lines into the rollup table with its indexes and constraints dropped meanwhile."""
    from django.db import connection, transaction

    from ledger.models import HourlyRollup

    table = HourlyRollup._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = %s::regclass AND contype <> 'p'",
            [table],
        )
        constraints = cursor.fetchall()
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s "
            "AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
            [table, table],
        )
        indexes = cursor.fetchall()
        for name, _definition in constraints:
            cursor.execute(f'ALTER TABLE "{table}" DROP CONSTRAINT "{name}"')
        for name, _definition in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        copied = 0
        copy_started = time.perf_counter()
        columns = ", ".join(f'"{c}"' for c in ROLLUP_COLUMNS)
        with cursor.cursor.copy(f'COPY "{table}" ({columns}) FROM STDIN') as copy:
            batch: list[str] = []
            for line in lines:
                batch.append(line)
                if len(batch) >= 50_000:
                    copy.write("".join(batch))
                    copied += len(batch)
                    batch.clear()
            copy.write("".join(batch))
            copied += len(batch)
        print(f"COPY {copied:,} rollup rows in {time.perf_counter() - copy_started:.1f}s")
        rebuild = time.perf_counter()
        for _name, definition in indexes:
            cursor.execute(definition)
        for name, definition in constraints:
            cursor.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{name}" {definition}')
        print(f"indexes and constraints rebuilt in {time.perf_counter() - rebuild:.1f}s")
    with connection.cursor() as cursor:
        cursor.execute(f'VACUUM ANALYZE "{table}"')


def measure(runs: int) -> dict[str, dict[str, float]]:
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    user, _ = User.objects.get_or_create(username="bench-staff", defaults={"is_staff": True})
    client = APIClient()
    client.force_authenticate(user)
    results: dict[str, dict[str, float]] = {}
    for days in (30, 365):
        for group_by in ("team", "workload"):
            for fmt in ("json", "csv"):
                params = {
                    "start": (END - timedelta(days=days)).isoformat(),
                    "end": END.isoformat(),
                    "group_by": group_by,
                    "format": fmt,
                }
                timings = []
                rows = 0
                for _ in range(runs):
                    started = time.perf_counter()
                    response = client.get("/api/v1/chargeback/", params)
                    if fmt == "csv":
                        body = b"".join(response.streaming_content)
                        rows = body.count(b"\r\n") - 1
                    else:
                        rows = len(response.json()["rows"])
                    timings.append(time.perf_counter() - started)
                    assert response.status_code == 200, response.status_code
                timings.sort()
                label = f"{days}d {group_by} {fmt}"
                results[label] = {
                    "p50": statistics.median(timings),
                    "p95": timings[min(len(timings) - 1, round(0.95 * (len(timings) - 1)))],
                    "rows": rows,
                }
                print(f"{label:<20} p50 {results[label]['p50']:.3f}s  "
                      f"p95 {results[label]['p95']:.3f}s  rows {rows}")  # fmt: skip
    return results


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prometheus_anchor(gpus: int, interval: int, runs: int) -> dict[str, float]:
    """Backfill ``gpus`` GPU series for 30 days and time the PromQL GPU-hours per namespace."""
    workdir = Path(tempfile.mkdtemp(prefix="gl-bench-prom-"))
    process = None
    try:
        start = int((END - timedelta(days=30)).timestamp())
        steps = 30 * 86400 // interval
        data = workdir / "data.om"
        written = time.perf_counter()
        with data.open("w") as handle:
            handle.write("# TYPE gpu_allocated gauge\n")
            for gpu in range(gpus):
                labels = f'gpu="{gpu}",Hostname="node-{gpu // 8}",namespace="ns-{gpu % 200:04d}"'
                handle.writelines(
                    f"gpu_allocated{{{labels}}} 1 {start + (i + 1) * interval}\n"
                    for i in range(steps)
                )
            handle.write("# EOF\n")
        samples = gpus * steps
        print(f"openmetrics: {samples:,} samples written in {time.perf_counter() - written:.1f}s")
        backfill = time.perf_counter()
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
             str(data), str(workdir / "tsdb")],
            check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        print(f"promtool backfill in {time.perf_counter() - backfill:.1f}s")
        data.unlink()
        port = free_port()
        process = subprocess.Popen(
            ["prometheus", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", f"--config.file={write_config(workdir)}",
             "--storage.tsdb.retention.time=3650d", "--query.timeout=5m"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as ready:
                    if ready.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        query = f"sum by (namespace) (sum_over_time(gpu_allocated[30d])) * {interval} / 3600"
        url = f"{base}/api/v1/query?" + urllib.parse.urlencode(
            {"query": query, "time": int(END.timestamp())}
        )
        timings = []
        result_count = 0
        for _ in range(runs):
            started = time.perf_counter()
            with urllib.request.urlopen(url, timeout=600) as response:
                body = json.load(response)
            timings.append(time.perf_counter() - started)
            result_count = len(body["data"]["result"])
        timings.sort()
        total = sum(float(item["value"][1]) for item in body["data"]["result"])
        print(f"PromQL {query!r}: {result_count} namespaces, {total:,.0f} GPU-hours "
              f"(expected {gpus * 30 * 24:,})")  # fmt: skip
        return {
            "p50": statistics.median(timings),
            "p95": timings[min(len(timings) - 1, round(0.95 * (len(timings) - 1)))],
            "samples": samples,
            "gpus": gpus,
            "interval": interval,
        }
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


def write_config(workdir: Path) -> Path:
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--reload", action="store_true")
    parser.add_argument("--prom-gpus", type=int, default=1000)
    parser.add_argument("--prom-interval", type=int, default=900, help="seconds between samples")
    parser.add_argument("--skip-prometheus", action="store_true")
    parser.add_argument(
        "--small",
        action="store_true",
        help="the same steps at a scale that takes seconds (tests/bench/test_benches.py runs it)",
    )
    args = parser.parse_args()
    if args.small:
        # The data is kept between runs, so the small one lives in a database of its own.
        if args.database_url == DEFAULT_URL:
            args.database_url += "_small"
        args.runs, args.prom_gpus, args.prom_interval = 3, 16, 3600
        globals().update(TEAMS=2, QUEUES=10, COHORTS=2, WORKLOADS=200)

    setup_django(args.database_url)
    ensure_tables()
    load(args.reload)
    results = measure(args.runs)
    targets = {"30d team json": 1.0, "365d team json": 3.0}
    for label, limit in targets.items():
        verdict = "OK" if results[label]["p95"] <= limit else "OVER"
        print(f"target {label}: p95 {results[label]['p95']:.3f}s ≤ {limit:.0f}s {verdict}")
    if not args.skip_prometheus:
        anchor = prometheus_anchor(args.prom_gpus, args.prom_interval, args.runs)
        ours = results["30d team json"]["p50"]
        print(f"PromQL 30d GPU-hours per namespace: p50 {anchor['p50']:.3f}s "
              f"p95 {anchor['p95']:.3f}s ({anchor['gpus']} GPUs, {anchor['interval']} s interval, "
              f"{anchor['samples']:,} samples)")  # fmt: skip
        print(f"ratio chargeback 30d by team p50 / PromQL p50 = {ours / anchor['p50']:.2f}")


if __name__ == "__main__":
    main()
