"""Benchmark: bytes of database growth per GPU-window of the usage store, and a day dropped.

Usage (PostgreSQL; the database is dropped and created again, it only holds benchmark data):
    .venv/bin/python bench/storage.py              # 5,000 GPUs x 1 day (7.2 M GPU-windows)
    .venv/bin/python bench/storage.py --small      # 200 GPUs x 60 windows, in seconds
    .venv/bin/python bench/storage.py --drop-gpus 50000   # and time dropping a 50,000-GPU day

Windows are written the way ``ledger.store.write_window`` writes usage (``write_wide_rows``:
holdings looked up or created, their last window moved, facts by binary COPY into the day's
partition, one window row), one transaction a window, with a fleet where 70 % of GPUs are held
by pods that end and are replaced every few hours (new holdings), 1 GPU in 50 time-sliced
between two pods, and every DCGM figure present. The figures are the table, index and TOAST
sizes after the writes (no VACUUM FULL), divided by the GPU-windows written.

Then ``ledger.rollup.prune_usage`` drops the day: its wall time is printed. ``--drop-gpus``
also fills one more day straight in SQL (``INSERT … SELECT`` of generate_series, rows of the
same width) for that many GPUs and times dropping it.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DATABASE_URL = "postgres://postgres@127.0.0.1:5432/gpuledger_storage_bench"
DAY = datetime(2026, 6, 15, tzinfo=UTC)
HELD = 0.7
SHARED_EVERY = 50
# A pod lives this many windows on average before another takes its GPU.
POD_LIFETIME = 240


def fresh_database(url: str) -> str:
    """Drop and create the database ``url`` names (on its server), so growth starts from zero."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if not name:
        raise SystemExit(f"--database-url {url!r} names no database")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return url


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("SECRET_KEY", "bench-storage-" + "x" * 40)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


class Fleet:
    """GPUs, which pod holds each, and their figures, window after window."""

    def __init__(self, gpus: int, seed: int = 5) -> None:
        self.rng = random.Random(seed)
        self.gpus = gpus
        self.pods: list[list[str]] = [self._pods(index, 0) for index in range(gpus)]
        self.generation = [0] * gpus

    def _pods(self, index: int, generation: int) -> list[str]:
        if self.rng.random() >= HELD:
            return [""]
        pod = f"job-{index // 8:05d}-{generation}-{index % 8}"
        if index % SHARED_EVERY == 0:
            return [pod, f"{pod}-b"]
        return [pod]

    def window(self) -> tuple[list[tuple], list[tuple]]:
        """One window's ``HOLDING_COLUMNS`` values (before the window length) and figures."""
        rng = self.rng
        identities, figures = [], []
        for index in range(self.gpus):
            if rng.random() < 1 / POD_LIFETIME:
                self.generation[index] += 1
                self.pods[index] = self._pods(index, self.generation[index])
            pods = self.pods[index]
            host = f"gpu-node-{index // 8:05d}"
            key = f"{host}/GPU-{index:08x}-0000-0000-0000-000000000000/"
            share = 1.0 / len(pods)
            for position, pod in enumerate(pods):
                namespace = f"team-{index % 40:02d}" if pod else ""
                identities.append(
                    (
                        index + 1,
                        key,
                        namespace,
                        pod,
                        "main" if pod else "",
                        host,
                        "h100-80gb",
                        "NVIDIA H100 80GB HBM3",
                        (index // 8) + 1 if pod else None,
                        (index % 40) + 1 if pod else None,
                        (index % 40) + 1 if pod else None,
                        (index % 20) + 1 if pod else None,
                        bool(pod),
                        share,
                        1.0 if position == 0 else 0.0,
                        len(pods) > 1,
                    )
                )
                sm = round(rng.random(), 6)
                figures.append(
                    (
                        sm,
                        sm,
                        round(rng.random() * sm, 6),
                        round(rng.random(), 6),
                        round(min(1.0, sm * 1.1), 6),
                        float(rng.randrange(0, 101)),
                        float(rng.randrange(1000, 81000)),
                        "sm_active",
                        4,
                        4,
                    )
                )
        return identities, figures


def sizes() -> dict[str, int]:
    """Bytes per relation of the usage store: heap and TOAST per table, each index."""
    from django.db import connection

    result: dict[str, int] = {}
    with connection.cursor() as cursor:
        for table in ("ledger_usagefact", "ledger_usageholding", "ledger_usagewindow"):
            cursor.execute(
                "SELECT COALESCE(SUM(pg_relation_size(relid)), 0), "
                "COALESCE(SUM(pg_total_relation_size(relid) - pg_relation_size(relid) "
                "- pg_indexes_size(relid)), 0) FROM ("
                "  SELECT relid FROM pg_partition_tree(%s) WHERE isleaf"
                "  UNION SELECT %s::regclass WHERE NOT EXISTS "
                "    (SELECT FROM pg_partitioned_table WHERE partrelid = %s::regclass)"
                ") leaves",
                [table, table, table],
            )
            heap, toast = cursor.fetchone()
            result[f"{table} (heap)"] = int(heap)
            result[f"{table} (TOAST)"] = int(toast)
            cursor.execute(
                "SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid) "
                "FROM pg_index i WHERE i.indrelid IN "
                "(SELECT relid FROM pg_partition_tree(%s) WHERE isleaf UNION SELECT %s::regclass)",
                [table, table],
            )
            for name, size in cursor.fetchall():
                # Partitions' indexes are named after their partition: sum them per kind.
                kind = "pkey" if name.endswith("_pkey") else name
                if table == "ledger_usagefact":
                    kind = "holding" if "holding" in name else "window (BRIN)"
                label = f"{table} index {kind}"
                result[label] = result.get(label, 0) + int(size)
    return result


def fill_day_in_sql(day: datetime, gpus: int) -> int:
    """One day of facts for ``gpus`` GPUs straight in SQL, for the drop timing."""
    from django.db import connection

    from ledger import partitions

    partitions.ensure_days([day.date()])
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_usagefact (holding_id, window_end, activity, sm_active, "
            "pipe_tensor_active, dram_active, gr_engine_active, gpu_util, fb_used_mib, source, "
            "samples, expected_samples) "
            "SELECT g, %s::timestamptz + w * interval '1 minute', random(), NULL, random(), "
            "random(), random(), 50, 40000, 3, 4, 4 "
            "FROM generate_series(1, 1440) w, generate_series(1, %s) g",
            [day, gpus],
        )
        return cursor.rowcount


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", action="store_true", help="200 GPUs x 60 windows.")
    parser.add_argument("--gpus", type=int, default=5000)
    parser.add_argument("--windows", type=int, default=1440)
    parser.add_argument("--drop-gpus", type=int, default=0, help="Also drop a day of this many.")
    parser.add_argument(
        "--database-url",
        default=DATABASE_URL,
        help="Dropped and created anew (default %(default)s).",
    )
    args = parser.parse_args()
    gpus, windows = (200, 60) if args.small else (args.gpus, args.windows)
    if gpus < 1 or windows < 1:
        parser.error("--gpus and --windows must be positive")
    setup_django(fresh_database(args.database_url))
    from django.db import connection, transaction

    from fleet.models import Cluster
    from ledger.models import UsageWindow
    from ledger.models.usage import write_wide_rows
    from ledger.rollup import prune_usage

    cluster = Cluster.objects.create(name="bench")
    fleet = Fleet(gpus)
    before = sizes()
    written = 0
    started = time.perf_counter()
    for minute in range(1, windows + 1):
        # Windows ending at 00:00 to 23:59: all in the day's partition.
        end = DAY + timedelta(minutes=minute - 1)
        start = end - timedelta(minutes=1)
        identities, figures = fleet.window()
        with transaction.atomic():
            write_wide_rows(cluster.pk, start, end, [(*i, 60.0) for i in identities], figures)
        written += len(identities)
        if minute % 120 == 0:
            rate = minute / (time.perf_counter() - started)
            print(f"  {minute} windows, {rate:.1f} windows/s", file=sys.stderr)
    elapsed = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    after = sizes()
    print(f"{gpus} GPUs x {windows} windows: {written:,} GPU-windows in {elapsed:.0f} s")
    print(f"{'relation':58} {'bytes':>14} {'B/GPU-window':>13}")
    total = 0
    for name in after:
        grown = after[name] - before.get(name, 0)
        total += grown
        print(f"{name:58} {grown:14,} {grown / written:13.1f}")
    print(f"{'total':58} {total:14,} {total / written:13.1f}")
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM ledger_usageholding")
        print(f"holdings: {cursor.fetchone()[0]:,}; windows: {UsageWindow.objects.count():,}")

    drop = time.perf_counter()
    removed = prune_usage(DAY + timedelta(days=1))
    print(f"prune_usage dropped the day ({removed:,} rows) in {time.perf_counter() - drop:.3f} s")
    if args.drop_gpus:
        other = DAY + timedelta(days=1)
        filled = time.perf_counter()
        with transaction.atomic():
            rows = fill_day_in_sql(other, args.drop_gpus)
        print(
            f"filled a day of {args.drop_gpus:,} GPUs ({rows:,} rows) in "
            f"{time.perf_counter() - filled:.0f} s"
        )
        with connection.cursor() as cursor:
            cursor.execute("CHECKPOINT")
            cursor.execute(
                "SELECT pg_total_relation_size(%s)", [f"ledger_usagefact_p{other:%Y%m%d}"]
            )
            print(f"  its partition: {cursor.fetchone()[0] / 2**30:.2f} GiB")
        drop = time.perf_counter()
        prune_usage(other + timedelta(days=1))
        print(f"prune_usage dropped it in {time.perf_counter() - drop:.3f} s")


if __name__ == "__main__":
    main()
