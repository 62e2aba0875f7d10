"""How long one scrape of ``/metrics`` takes on PostgreSQL, with a full history behind it.

Per cluster (``--clusters``, default 3): 14 days of run records (a collection run a minute and a
Kueue sync every five minutes, 1 % failed), 14 days of rollup-hour bookkeeping (two hours due),
the newest window of ``--gpus`` GPUs (default 50,000, 1 GPU per workload) held by 1,000
ClusterQueues of 200 teams (10 % idle, 5 % free), the last complete hour's team and queue
rollups, 5,000 open episodes and 1,000 deliveries. Times the exposition as a scrape reads it
(``observability.exposition.registry``, then ``generate_latest``): ``--runs`` scrapes, the
median and the worst, with the number of queries of one scrape.

    .venv/bin/python bench/metrics.py [--small] [--database-url postgres://…] [--gpus 50000]
        [--clusters 3] [--runs 7] [--reuse]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rollup import setup_django  # noqa: E402  (bench/rollup.py: database, settings, migrate)

QUEUES = 1_000
TEAMS = 200
HISTORY_DAYS = 14
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpuledger_bench_metrics"


def load_cluster(index: int, gpus: int, now: datetime) -> None:
    from django.db import transaction

    from alerts.models import Episode
    from core.timewindows import floor_time, hour_floor
    from fleet.models import Cluster, IngestRun
    from ledger.choices import RollupScope
    from ledger.models import GpuUsage, HourlyRollup, RollupHour
    from quotas.models import ClusterQueue, Team

    name = f"bench-{index}"
    with transaction.atomic():
        cluster = Cluster.objects.create(name=name, prometheus_url="http://127.0.0.1:9/")
        teams = Team.objects.bulk_create([Team(name=f"{name}-team-{i:03d}") for i in range(TEAMS)])
        queues = ClusterQueue.objects.bulk_create(
            [
                ClusterQueue(cluster=cluster, name=f"cq-{i:04d}", team=teams[i % TEAMS])
                for i in range(QUEUES)
            ]
        )
        IngestRun.objects.bulk_create(ingest_runs(cluster, now), batch_size=5_000)
        start = now - timedelta(days=HISTORY_DAYS)
        hours = [hour_floor(start) + timedelta(hours=h) for h in range(HISTORY_DAYS * 24)]
        RollupHour.objects.bulk_create(
            [
                RollupHour(
                    cluster=cluster,
                    hour=hour,
                    changes=60,
                    rolled_changes=60 if n < len(hours) - 3 else 0,
                    rolled_up_at=now,
                )
                for n, hour in enumerate(hours)
            ]
        )
        window = floor_time(now, 60)
        GpuUsage.objects.bulk_create(
            [
                GpuUsage(
                    cluster=cluster,
                    window_start=window - timedelta(seconds=60),
                    window_end=window,
                    gpu_key=f"node-{g // 8:05d}/GPU-{g}/",
                    node_name=f"node-{g // 8:05d}",
                    namespace=f"ns-{queues[g % QUEUES].name}",
                    pod=f"job-{g:06d}-0",
                    allocated=g % 20 != 0,
                    gpus=1.0,
                    capacity_gpus=1.0,
                    activity=0.001 if g % 10 == 0 else 0.6,
                    sm_active=0.001 if g % 10 == 0 else 0.6,
                    activity_source="sm_active",
                    samples=1,
                    expected_samples=1,
                    cluster_queue=queues[g % QUEUES] if g % 20 != 0 else None,
                    team=queues[g % QUEUES].team if g % 20 != 0 else None,
                )
                for g in range(gpus)
            ],
            batch_size=10_000,
        )
        last_hour = hour_floor(now) - timedelta(hours=1)
        HourlyRollup.objects.bulk_create(
            [
                HourlyRollup(
                    cluster=cluster,
                    scope=RollupScope.TEAM,
                    key=team.name,
                    hour=last_hour,
                    team=team,
                    allocated_gpu_hours=gpus / TEAMS,
                    active_gpu_hours=gpus / TEAMS / 2,
                    windows=60,
                )
                for team in teams
            ]
            + [
                HourlyRollup(
                    cluster=cluster,
                    scope=RollupScope.CLUSTER_QUEUE,
                    key=queue.name,
                    hour=last_hour,
                    cluster_queue=queue,
                    allocated_gpu_hours=gpus / QUEUES,
                    active_gpu_hours=gpus / QUEUES / 2,
                    windows=60,
                )
                for queue in queues
            ]
        )
        Episode.objects.bulk_create(
            [
                Episode(
                    cluster=cluster,
                    rule="idle_workload",
                    severity="warning" if e % 3 else "critical",
                    subject_key=f"workload:{name}/{e}",
                    started_at=now - timedelta(hours=3),
                    fired_at=now - timedelta(hours=2),
                    evaluated_until=now,
                )
                for e in range(5_000)
            ],
            batch_size=5_000,
        )


def ingest_runs(cluster: Any, now: datetime) -> list[Any]:
    """A collection run a minute (one in 100 failed) and a Kueue sync every 5 minutes over
    ``HISTORY_DAYS``."""
    from fleet.choices import IngestSource, IngestStatus
    from fleet.models import IngestRun

    runs = []
    start = now - timedelta(days=HISTORY_DAYS)
    for minute in range(HISTORY_DAYS * 24 * 60):
        at = start + timedelta(minutes=minute)
        failed = minute % 100 == 0
        runs.append(
            IngestRun(
                cluster=cluster,
                source=IngestSource.DCGM,
                status=IngestStatus.FAILED if failed else IngestStatus.SUCCESS,
                started_at=at,
                finished_at=at + timedelta(seconds=3),
                window_end=at,
                error="PrometheusError: read timed out" if failed else "",
            )
        )
        if minute % 5 == 0:
            runs.append(
                IngestRun(
                    cluster=cluster,
                    source=IngestSource.KUEUE,
                    status=IngestStatus.SUCCESS,
                    started_at=at,
                    finished_at=at + timedelta(minutes=5),
                    skip_reasons={"Workload: relisted after 410 Gone": 1},
                )
            )
    return runs


def load(gpus: int, clusters: int) -> None:
    from django.db import connection
    from django.utils import timezone

    from fleet.models import Cluster
    from quotas.models import Team

    Cluster.objects.filter(name__startswith="bench-").delete()
    Team.objects.filter(name__startswith="bench-").delete()
    now = timezone.now()
    started = time.monotonic()
    for index in range(clusters):
        load_cluster(index, gpus, now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"loaded {clusters} clusters × {gpus:,} GPUs in {time.monotonic() - started:.0f} s")


def measure(runs: int) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from prometheus_client import generate_latest

    from observability.exposition import registry

    took = []
    size = 0
    for _ in range(runs):
        started = time.perf_counter()
        size = len(generate_latest(registry()))
        took.append(time.perf_counter() - started)
    with CaptureQueriesContext(connection) as queries:
        generate_latest(registry())
    print(
        f"scrape: median {statistics.median(took) * 1000:.0f} ms, worst {max(took) * 1000:.0f} ms "
        f"over {runs} scrapes; {len(queries)} queries; {size / 1024:.0f} KiB of exposition"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--gpus", type=int, default=50_000)
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--small", action="store_true", help="5,000 GPUs, one cluster")
    parser.add_argument("--reuse", action="store_true", help="measure the data loaded before")
    args = parser.parse_args()
    if args.small:
        args.gpus, args.clusters = 5_000, 1
    setup_django(args.database_url)
    os.environ.setdefault("CELERY_BROKER_URL", "memory://")
    from django.conf import settings

    settings.CELERY_BROKER_URL = "memory://"
    if not args.reuse:
        load(args.gpus, args.clusters)
    measure(args.runs)


if __name__ == "__main__":
    main()
