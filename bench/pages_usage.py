"""Benchmark: server time of the pages that read per-window usage rows, on the partitioned store.

    .venv/bin/python bench/pages_usage.py [--gpus 5000] [--days 7] [--small] [--reset]
                                          [--database-url URL] [--requests 20] [--only LABEL]

PostgreSQL (default postgres://postgres@127.0.0.1:5432/gpuledger_bench_usage, created when
missing) holds one cluster of ``--gpus`` GPUs (8 a node; 8 nodes in 10 held whole by one running
workload) with ``--days`` days of 60 s collection windows of every GPU in the daily-partitioned
usage store (``UsageHolding`` + ``UsageFact``), their hourly rollups (the real
``roll_up_range``), and one hoarding episode of 6 hours and one of 2 days on a held node's
workload. The first window goes through the real writer (``write_wide``: the holdings and one
window of facts); every later window copies that window's facts inside PostgreSQL with new
random figures, a day at a time into its partition, so 50 M rows take minutes rather than hours;
then the complete days are ordered as beat's ``order-usage-partitions`` orders them in production.
The data is kept (``--reset`` rebuilds it). ``--small``: 80 GPUs, 1 day, 3 requests a URL.

Measured (the Django test client, logged in as staff, one warm-up request, then ``--requests``;
p50 / p95 wall time of ``Client.get``), with no Prometheus URL so the charts read the stored
windows: the GPU page and its activity and memory charts, the node page and chart, the workload
page and its activity charts, the two episode pages and their evidence charts, over 24 hours and
7 days ("whole": the whole stored range at the default ``--days``). Requests run at the data's
"now" (``bench/pages.py``).
Target: p95 <= 300 ms.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR / "bench"))

import pages as base  # noqa: E402  (bench/pages.py: the environment, database and fleet helpers)

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpuledger_bench_usage"
TARGET_P95_MS = base.TARGET_P95_MS


def configure_fleet(gpus: int) -> None:
    """Scale bench/pages.py's fleet generators to ``gpus`` GPUs (a workload per held node)."""
    base.NODES = max(1, gpus // base.GPUS_PER_NODE)
    base.TEAMS = 10
    base.CLUSTER_QUEUES = 20
    base.COHORTS = 5
    base.WORKLOADS = base.NODES * 2


def copy_windows(cluster_id: int, first_end: datetime, end: datetime) -> int:
    """Every window after ``first_end`` up to ``end``: the first window's facts with new random
    figures, one INSERT per day (its partition), and their ``UsageWindow`` rows."""
    from django.db import connection

    from ledger import partitions
    from ledger.models import UsageFact, UsageHolding, UsageWindow

    facts = UsageFact._meta.db_table
    windows = UsageWindow._meta.db_table
    holdings = UsageHolding._meta.db_table
    written = 0
    day_start = first_end
    while day_start < end:
        day_stop = min(
            end,
            datetime.combine(day_start.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC),
        )
        partitions.ensure_for([day_start + timedelta(minutes=1), day_stop])
        with connection.cursor() as cursor:
            # Windows ending in (day_start, day_stop]; activity stays null where the first
            # window had none (GPUs without telemetry stay without).
            cursor.execute(
                f"""
                INSERT INTO {facts} (holding_id, window_end, activity, pipe_tensor_active,
                    gpu_util, sm_active, dram_active, gr_engine_active, fb_used_mib, source,
                    samples, expected_samples)
                SELECT f.holding_id, w,
                    CASE WHEN f.activity IS NULL THEN NULL ELSE round(random()::numeric, 3) END,
                    CASE WHEN f.activity IS NULL THEN NULL ELSE random() / 2 END,
                    CASE WHEN f.activity IS NULL THEN NULL
                        ELSE round((random() * 100)::numeric, 1) END,
                    f.sm_active, random()::real, f.gr_engine_active, f.fb_used_mib, f.source,
                    f.samples, f.expected_samples
                FROM {facts} f
                CROSS JOIN generate_series(%s::timestamptz + interval '1 minute', %s::timestamptz,
                    interval '1 minute') AS w
                WHERE f.window_end = %s
                ORDER BY w
                """,  # noqa: S608
                [day_start, day_stop, first_end],
            )
            written += cursor.rowcount
            cursor.execute(
                f"""
                INSERT INTO {windows} (cluster_id, window_start, window_end, rows, written_at)
                SELECT %s, w - interval '1 minute', w, %s, now()
                FROM generate_series(%s::timestamptz + interval '1 minute', %s::timestamptz,
                    interval '1 minute') AS w
                """,  # noqa: S608
                [cluster_id, base.NODES * base.GPUS_PER_NODE, day_start, day_stop],
            )
        print(f"  windows to {day_stop:%Y-%m-%d %H:%M}: {written:,} facts", flush=True)
        day_start = day_stop
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {holdings} SET last_window_end = %s", [end])  # noqa: S608
    return written


def generate(end: datetime, days: int) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from fleet.models import Cluster, Gpu
    from ledger.models.usage import write_wide
    from ledger.partition_order import order_complete_days
    from ledger.rollup import roll_up_range

    rng = random.Random(7)
    started = time.perf_counter()
    first_end = end - timedelta(days=days) + timedelta(minutes=1)

    def step(label: str) -> None:
        print(f"  {label} ({time.perf_counter() - started:.0f} s)", flush=True)

    with transaction.atomic():
        cluster = Cluster.objects.create(name="bench", display_name="Bench cluster")
        _teams, _cohorts, queues = base.generate_queues(cluster.pk)
        nodes = base.generate_nodes(cluster.pk)
        workloads = base.generate_workloads(cluster.pk, queues, rng)
        holders = base.node_holders(nodes, workloads)
        gpus = list(Gpu.objects.order_by("pk").values_list("pk", "host", "uuid", "node__flavor"))
        base.USAGE_WINDOWS = 1
        write_wide(base.usage_rows(cluster.pk, first_end, gpus, holders, rng))
        get_user_model().objects.create_user("bench-staff", password="bench", is_staff=True)
    step(f"{len(nodes):,} nodes, {len(gpus):,} GPUs, the first window")
    with transaction.atomic():
        facts = copy_windows(cluster.pk, first_end, end)
    step(f"{facts:,} more facts")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    step("VACUUM ANALYZE")
    rolled = roll_up_range(cluster.pk, first_end - timedelta(minutes=1), end)
    step(f"{rolled:,} rollup rows")
    make_episodes(cluster.pk, end)
    # What beat's order-usage-partitions does in production once a day has settled: the complete
    # days in (hour, holding) order; the day in progress (and the day before it, in a day's first
    # 3 hours) still in arrival order.
    ordered = order_complete_days(end)
    step(f"{len(ordered)} complete days ordered as beat orders them")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    step("VACUUM ANALYZE")


def make_episodes(cluster_id: int, end: datetime) -> None:
    """Two idle-workload episodes on the first held node's workload: 6 hours, and 2 days."""
    from alerts.choices import Rule
    from alerts.models import Episode
    from ledger.models import GpuUsage

    held = (
        GpuUsage.objects.filter(cluster_id=cluster_id, window_end=end, workload__isnull=False)
        .order_by("gpu_id")
        .values("workload_id", "team_id", "cluster_queue_id", "gpu_key")
        .first()
    )
    if held is None:
        return
    keys = list(
        GpuUsage.objects.filter(
            cluster_id=cluster_id, window_end=end, workload_id=held["workload_id"]
        ).values_list("gpu_key", flat=True)
    )
    for hours in (6, 48):
        started = end - timedelta(hours=hours + 2)
        Episode.objects.create(
            rule=Rule.IDLE_WORKLOAD,
            cluster_id=cluster_id,
            team_id=held["team_id"],
            cluster_queue_id=held["cluster_queue_id"],
            workload_id=held["workload_id"],
            gpus=float(len(keys)),
            subject_key=f"bench-{hours}h",
            started_at=started,
            fired_at=started + timedelta(minutes=30),
            resolved_at=started + timedelta(hours=hours),
            evaluated_until=started + timedelta(hours=hours),
            idle_gpu_hours=hours * len(keys) * 0.9,
            held_gpu_hours=hours * len(keys),
            evidence={"gpus": {key: {} for key in keys}, "idle_threshold": 0.01},
            summary="bench episode",
        )


def urls() -> list[tuple[str, str]]:
    from alerts.models import Episode
    from fleet.models import Gpu
    from ledger.models import GpuUsage

    end = GpuUsage.objects.order_by("-window_end").values_list("window_end", flat=True).first()
    # A GPU held by a running workload now, on the 12th held node or the last one there is.
    held = list(
        GpuUsage.objects.filter(window_end=end, workload__isnull=False, gpu__isnull=False)
        .order_by("gpu_id")
        .values_list("gpu_id", "workload_id")[: base.GPUS_PER_NODE * 12]
    )
    gpu_id, workload_id = held[-1]
    gpu = Gpu.objects.get(pk=gpu_id)
    whole = "range=7d"  # the whole stored range at the default --days
    result = [
        ("gpu 24h", f"/fleet/gpus/{gpu.pk}/"),
        ("gpu whole", f"/fleet/gpus/{gpu.pk}/?{whole}"),
        ("chart gpu activity 24h", f"/fleet/charts/gpus/{gpu.pk}/activity.json"),
        ("chart gpu activity whole", f"/fleet/charts/gpus/{gpu.pk}/activity.json?{whole}"),
        ("chart gpu memory whole", f"/fleet/charts/gpus/{gpu.pk}/memory.json?{whole}"),
        ("node 24h", f"/fleet/nodes/{gpu.node_id}/"),
        ("node whole", f"/fleet/nodes/{gpu.node_id}/?{whole}"),
        ("chart node 24h", f"/fleet/charts/nodes/{gpu.node_id}/activity.json"),
        ("chart node whole", f"/fleet/charts/nodes/{gpu.node_id}/activity.json?{whole}"),
    ]
    if workload_id is not None:
        workload = f"/workloads/{workload_id}/"
        result += [
            ("workload 24h", workload),
            ("workload whole", f"{workload}?{whole}"),
            ("chart workload sm 24h", f"{workload}charts/activity.json"),
            ("chart workload sm whole", f"{workload}charts/activity.json?{whole}"),
            (
                "chart workload tensor whole",
                f"{workload}charts/activity.json?{whole}&metric=tensor",
            ),
        ]
    for episode in Episode.objects.order_by("pk"):
        hours = round(episode.held_gpu_hours / max(episode.gpus, 1.0))
        result += [
            (f"episode {hours}h", f"/alerts/{episode.pk}/"),
            (f"chart episode {hours}h", f"/alerts/{episode.pk}/charts/evidence.json"),
        ]
    return result


def measure(paths: list[tuple[str, str]], requests: int, only: str | None) -> list[Any]:
    import time_machine
    from django.contrib.auth import get_user_model
    from django.test import Client

    from ledger.models import UsageWindow

    end = UsageWindow.objects.order_by("-window_end").values_list("window_end", flat=True).first()
    results = []
    with time_machine.travel(end + timedelta(seconds=30), tick=True):
        client = Client()
        client.force_login(get_user_model().objects.get(username="bench-staff"))
        for label, path in paths:
            if only and only not in label:
                continue
            results.append((label, *base.time_requests(client, label, path, requests, width=30)))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_USAGE_DATABASE_URL", DEFAULT_URL)
    )
    parser.add_argument("--gpus", type=int, default=5000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--reset", action="store_true", help="drop the database and regenerate")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--only", help="time only URLs whose label contains this")
    parser.add_argument("--small", action="store_true", help="80 GPUs, 1 day, 3 requests")
    args = parser.parse_args()
    if args.small:
        args.gpus, args.days, args.requests = 80, 1, 3
    configure_fleet(args.gpus)
    base.prepare_environment(args.database_url)
    # Keep every generated day: retention is what the pages fall back from, not measured here.
    os.environ["GPULEDGER_USAGE_RETENTION_DAYS"] = str(max(args.days + 1, 14))
    base.create_database(args.database_url, drop=args.reset)
    base.setup_django()
    from django.core.management import call_command

    from ledger.models import UsageWindow

    call_command("migrate", verbosity=0)
    if not UsageWindow.objects.exists():
        end = datetime.now(UTC).replace(second=0, microsecond=0)
        print(f"generating {args.gpus:,} GPUs x {args.days} days ending {end:%Y-%m-%d %H:%M}")
        generate(end, args.days)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'page':30} {'p50 ms':>8} {'p95 ms':>8}")
    results = measure(urls(), args.requests, args.only)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    slow = sum(1 for _label, _p50, p95, _status in results if p95 > TARGET_P95_MS)
    failed = sum(1 for *_rest, status in results if status != 200)
    print(f"{len(results)} URLs, {slow} above p95 {TARGET_P95_MS:.0f} ms, {failed} not 200")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
