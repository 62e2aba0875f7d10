"""Hoarding-alert evaluation benchmark on PostgreSQL (``alerts.evaluate.evaluate_range``).

One window: a cluster of ``--gpus`` GPUs (8 per node) held by as many 1-GPU Kueue workloads from
1,000 ClusterQueues (5 per team, 50 cohorts); 10 % of the workloads idle, 1 % ghosts (admitted,
no pod: their GPUs unallocated), one node in 200 without DCGM (its pods' rows have no telemetry),
one queue in 10 borrowing 2 GPUs per window with one of its workloads idle. 60 s windows go in
with COPY (``core.bulk.copy_rows``); the first two are evaluated to open the episodes and the
episode table is vacuumed (as autovacuum keeps it), then each following window is written (not
timed) and evaluated and committed on its own (timed), as live collection does: the steady
state, where every window moves the same ~5,800 open episodes on. Memory: the peak RSS of a
fresh process that only evaluates the next window (rolled back), minus its RSS before.

Backfill: ``--backfill-gpus`` GPUs × ``--backfill-hours`` hours of 60 s windows, evaluated in one
call as ``collect_metrics --start/--end`` does; the time is extrapolated linearly to 7 days
(which overstates it: the fixed costs, such as writing the episodes, are extrapolated too).
``--backfill-hours 168`` measures the week itself (about 24 GB of usage rows, loaded once).
``--only window`` / ``--only backfill`` runs one of the two parts; ``--churn`` makes the
backfill's workloads go idle and busy again in stretches of 30-89 minutes, with noisy activity
(each one's episodes start and end all week), instead of the same 10 % idle all along.

    .venv/bin/python bench/alerts.py [--small] [--database-url postgres://…] [--gpus 50000]
        [--runs 3] [--backfill-gpus 5000] [--backfill-hours 6] [--only window|backfill]
        [--churn] [--reload]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rollup import setup_django  # noqa: E402  (bench/rollup.py: database, settings, migrate)

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpuledger_bench_alerts"
T0 = datetime(2026, 2, 2, 0, 0, tzinfo=UTC)
WINDOW = timedelta(seconds=60)
QUEUES = 1000
COHORTS = 50
GPUS_PER_NODE = 8
COLUMNS = [
    "cluster_id", "window_start", "window_end", "gpu_key", "namespace", "pod", "container",
    "node_name", "flavor", "gpu_model", "workload_id", "local_queue_id", "cluster_queue_id",
    "team_id", "allocated", "gpus", "capacity_gpus", "shared", "sm_active", "activity",
    "activity_source", "samples", "expected_samples", "created_at",
]  # fmt: skip
SAMPLE_COLUMNS = [
    "cluster_queue_id", "flavor_name", "resource", "sampled_at", "window_seconds", "total",
    "reserved", "borrowed", "lent", "nominal", "pending_demand", "pending_workloads",
    "admitted_workloads", "source",
]  # fmt: skip


def load(name: str, gpus: int, windows: int, reload: bool, churn: bool = False) -> int:
    """The cluster ``name`` with ``windows`` windows from T0; its id (built once)."""
    from django.db import connection, transaction

    from fleet.models import Cluster, Node
    from ledger.models import GpuUsage
    from quotas.models import (
        ClusterQueue,
        Cohort,
        LocalQueue,
        Team,
        Workload,
    )

    existing = Cluster.objects.filter(name=name).first()
    if existing is not None and not reload:
        stored = GpuUsage.objects.filter(cluster=existing).values("window_end").distinct().count()
        if stored >= windows:
            return existing.pk
    if existing is not None:
        existing.delete()
    Team.objects.filter(name__startswith=f"{name}-team-").delete()  # teams span clusters
    started = time.monotonic()
    with transaction.atomic():
        cluster = Cluster.objects.create(name=name)
        teams = Team.objects.bulk_create(
            [Team(name=f"{name}-team-{i:03d}") for i in range(QUEUES // 5)]
        )
        cohorts = Cohort.objects.bulk_create(
            [Cohort(cluster=cluster, name=f"cohort-{i:02d}") for i in range(COHORTS)]
        )
        queues = ClusterQueue.objects.bulk_create(
            [
                ClusterQueue(
                    cluster=cluster,
                    name=f"cq-{i:04d}",
                    team=teams[i // 5],
                    cohort=cohorts[i % COHORTS],
                )
                for i in range(QUEUES)
            ]
        )
        local_queues = LocalQueue.objects.bulk_create(
            [
                LocalQueue(
                    cluster=cluster,
                    namespace=f"ns-{q.name}",
                    name="default",
                    cluster_queue=q,
                    cluster_queue_name=q.name,
                )
                for q in queues
            ]
        )
        nodes = gpus // GPUS_PER_NODE
        Node.objects.bulk_create(
            [Node(cluster=cluster, name=f"node-{n:05d}", gpu_capacity=8) for n in range(nodes)]
        )
        held = T0 - timedelta(hours=1)
        workloads = Workload.objects.bulk_create(
            [
                Workload(
                    cluster=cluster,
                    namespace=f"ns-{queues[i % QUEUES].name}",
                    name=f"job-{i:06d}",
                    cluster_queue=queues[i % QUEUES],
                    local_queue=local_queues[i % QUEUES],
                    pod_sets=[{"name": "main", "count": 1, "gpus_per_pod": 1.0}],
                    gpu_pods=1,
                    requested_gpus=1.0,
                    admitted_gpus=1.0,
                    flavors={"nvidia.com/gpu": "h100"},
                    state="admitted",
                    quota_reserved_at=held,
                    admitted_at=held,
                )
                for i in range(gpus)
            ],
            batch_size=5000,
        )
        for w in range(windows):
            write_window(cluster.pk, w, workloads, queues, local_queues, churn)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"loaded {name}: {gpus:,} GPUs × {windows} windows in {time.monotonic() - started:.0f} s")
    return cluster.pk


def write_window(
    cluster_id: int, w: int, workloads: list, queues: list, local_queues: list, churn: bool = False
) -> None:
    """Window ``w`` (from T0) of every GPU, and the queues' samples at its end, with COPY.

    ``churn``: instead of the same 10 % of workloads idle all along, each workload is idle or
    busy for stretches of 30 to 89 minutes (its own length), idle in one stretch out of ten,
    with activity that moves from window to window on both sides."""
    from core.bulk import copy_rows
    from ledger.models.usage import write_wide

    now = datetime.now(UTC)
    start, end = T0 + w * WINDOW, T0 + (w + 1) * WINDOW
    rows = []
    for i, workload in enumerate(workloads):
        node = i // GPUS_PER_NODE
        queue = queues[i % QUEUES]
        ghost = i % 100 == 37
        dark = node % 200 == 7
        idle = i % 10 == 3 or (i % QUEUES) % 10 == 1 and i < QUEUES * 2
        if churn:
            stretch = w // (30 + i % 60)
            idle = (i * 7919 + stretch * 104729) % 10 == 3
        noise = ((w * 31 + i * 17) % 9) / 1000 if churn else 0.0
        activity = (
            None if dark or ghost else (0.001 + noise if idle else 0.4 + (i % 7) / 20 + noise)
        )
        rows.append(
            (
                cluster_id,
                start,
                end,
                "" if dark else f"node-{node:05d}/GPU-{i:06d}/",
                "" if ghost else workload.namespace,
                "" if ghost else f"{workload.name}-0",
                "" if ghost else "main",
                f"node-{node:05d}",
                "h100",
                "H100",
                None if ghost else workload.pk,
                None if ghost else local_queues[i % QUEUES].pk,
                None if ghost else queue.pk,
                None if ghost else queue.team_id,
                not ghost,
                1.0,
                1.0,
                False,
                activity,
                activity,
                "none" if activity is None else "sm_active",
                0 if activity is None else 4,
                4,
                now,
            )
        )
    write_wide(dict(zip(COLUMNS, row, strict=True)) for row in rows)
    copy_rows(
        "quotas_clusterqueuesample",
        SAMPLE_COLUMNS,
        [
            (
                queue.pk,
                "h100",
                "nvidia.com/gpu",
                end,
                60,
                Decimal(50),
                Decimal(50),
                Decimal(2 if index % 10 == 1 else 0),
                Decimal(2 if index % 10 == 2 else 0),
                Decimal(40),
                Decimal(0),
                0,
                0,
                "api",
            )
            for index, queue in enumerate(queues)
        ],
    )


def next_window(cluster_id: int, w: int) -> None:
    """Write window ``w`` of the loaded cluster (its workloads and queues as ``load`` made them)."""
    from fleet.models import Cluster
    from quotas.models import ClusterQueue, LocalQueue, Workload

    cluster = Cluster.objects.get(pk=cluster_id)
    write_window(
        cluster_id,
        w,
        list(Workload.objects.filter(cluster=cluster).order_by("name")),
        list(ClusterQueue.objects.filter(cluster=cluster).order_by("name")),
        list(LocalQueue.objects.filter(cluster=cluster).order_by("cluster_queue__name")),
    )


def one_window(cluster_id: int, runs: int) -> list[float]:
    from django.db import connection

    from alerts.evaluate import evaluate_range
    from alerts.models import Episode
    from ledger.models import GpuUsage
    from quotas.models import ClusterQueueSample

    Episode.objects.filter(cluster_id=cluster_id).delete()
    # Windows after the first two were written by an earlier run: live, a window is evaluated
    # before the next one exists.
    first_two = T0 + 2 * WINDOW
    GpuUsage.objects.filter(cluster_id=cluster_id, window_end__gt=first_two).delete()
    ClusterQueueSample.objects.filter(
        cluster_queue__cluster_id=cluster_id, sampled_at__gt=first_two
    ).delete()
    evaluate_range(cluster_id, T0, first_two)
    with connection.cursor() as cursor:
        # What autovacuum keeps in production (it is off on some machines): the rows deleted
        # above and the episodes just written.
        for table in ("ledger_usagefact", "quotas_clusterqueuesample", "alerts_episode"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    times = []
    for run in range(runs):
        next_window(cluster_id, 2 + run)  # the collector's write, not timed
        start = T0 + (2 + run) * WINDOW
        started, cpu = time.perf_counter(), Cpu()
        result = evaluate_range(cluster_id, start, start + WINDOW)
        times.append(time.perf_counter() - started)
        print(f"  window {3 + run}: {times[-1]:.2f} s wall; {cpu.spent()}")
    print(
        f"  episodes after the last window: {result.created} created, {result.updated} updated "
        f"(open: {Episode.objects.filter(cluster_id=cluster_id).count():,})"
    )
    next_window(cluster_id, 2 + runs)  # for the memory measurement's fresh process
    return times


class Cpu:
    """CPU seconds of this process and of the PostgreSQL backend serving its connection: on a
    shared machine wall time mostly measures the queue for a core."""

    def __init__(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            self.pid = cursor.fetchone()[0]
        self.process, self.backend = time.process_time(), self._backend()

    def _backend(self) -> float:
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def spent(self) -> str:
        process, backend = time.process_time() - self.process, self._backend() - self.backend
        total = process + backend
        return f"CPU {process:.2f} s process + {backend:.2f} s PostgreSQL = {total:.2f} s"


def rss_child(database_url: str, cluster_id: int, window: int) -> None:
    """In a fresh process: evaluate window ``window`` once (rolled back) and print the RSS
    before it and the peak during it, in MB.

    The peak is the kernel's high-water mark reset just before (``/proc/self/clear_refs``):
    ``getrusage``'s ``ru_maxrss`` keeps the parent's peak across fork and exec, so it measured
    this benchmark's own data loading, not the evaluation."""
    from django.db import connection, transaction

    from alerts.evaluate import evaluate_range

    connection.ensure_connection()
    before = _status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM to the current RSS
    with transaction.atomic():
        evaluate_range(cluster_id, T0 + window * WINDOW, T0 + (window + 1) * WINDOW)
        transaction.set_rollback(True)
    print(f"RSS {before:.0f} {_status_mb('VmHWM'):.0f}")


def _status_mb(name: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{name}:"):
                return int(line.split()[1]) / 1024
    return 0.0


def backfill(cluster_id: int, hours: int) -> float:
    from alerts.evaluate import evaluate_range
    from alerts.models import Episode

    Episode.objects.filter(cluster_id=cluster_id).delete()
    before = _status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM to the current RSS (see rss_child)
    started, cpu = time.perf_counter(), Cpu()
    result = evaluate_range(cluster_id, T0, T0 + timedelta(hours=hours), live=False)
    seconds = time.perf_counter() - started
    print(
        f"  {result.windows} windows, {result.created} episodes written; {cpu.spent()}; "
        f"peak RSS {_status_mb('VmHWM') - before:.0f} MB above the {before:.0f} MB before"
    )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--gpus", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backfill-gpus", type=int, default=5_000)
    parser.add_argument("--backfill-hours", type=int, default=6)
    parser.add_argument("--only", choices=["window", "backfill"])
    parser.add_argument("--churn", action="store_true", help="backfill: idle stretches churn")
    parser.add_argument("--reload", action="store_true")
    parser.add_argument(
        "--small",
        action="store_true",
        help="the same steps at a scale that takes seconds (tests/bench/test_benches.py runs it)",
    )
    parser.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rss-window", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.small:
        # Its own cluster names (they carry the size): a full run's data is left alone.
        args.gpus, args.runs, args.backfill_gpus, args.backfill_hours = 400, 2, 80, 1
    setup_django(args.database_url)
    if args.rss_child:
        rss_child(args.database_url, args.rss_child, args.rss_window)
        return

    if args.only != "backfill":
        measure_window(args)
    if args.only != "window":
        measure_backfill(args)
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def measure_window(args: argparse.Namespace) -> None:
    cluster_id = load(f"bench-alerts-{args.gpus}", args.gpus, 2, args.reload)
    times = one_window(cluster_id, args.runs)
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            "--database-url",
            args.database_url,
            "--rss-child",
            str(cluster_id),
            "--rss-window",
            str(2 + args.runs),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    before, peak = (float(v) for v in child.stdout.split("RSS ")[-1].split())
    print(
        f"one window, {args.gpus:,} GPUs / {args.gpus:,} workloads / {QUEUES:,} ClusterQueues: "
        f"median {statistics.median(times):.2f} s, max {max(times):.2f} s over {len(times)} runs; "
        f"peak RSS {peak:.0f} MB, {peak - before:.0f} MB above the {before:.0f} MB before"
    )


def measure_backfill(args: argparse.Namespace) -> None:
    windows = args.backfill_hours * 60
    name = f"bench-alerts-backfill-{args.backfill_gpus}" + ("-churn" if args.churn else "")
    backfill_id = load(name, args.backfill_gpus, windows, args.reload, args.churn)
    seconds = backfill(backfill_id, args.backfill_hours)
    week = seconds * (7 * 24 / args.backfill_hours)
    print(
        f"backfill, {args.backfill_gpus:,} GPUs × {args.backfill_hours} h ({windows} windows): "
        f"{seconds:.1f} s; linear to 7 days: {week:.0f} s; to 7 days at {args.gpus:,} GPUs: "
        f"{week * args.gpus / args.backfill_gpus:.0f} s"
    )


if __name__ == "__main__":
    main()
