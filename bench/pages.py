"""Benchmark: server time of every dashboard page and chart JSON view at full scale (50,000 GPUs).

    .venv/bin/python bench/pages.py [--small] [--database-url URL] [--reset] [--requests 20]
                                    [--only LABEL] [--no-migrate] [--cold]

PostgreSQL (default postgres://postgres@127.0.0.1:5432/gpuledger_bench_pages, created when
missing) holds one cluster with 50,000 GPUs on 6,250 nodes, 100 teams, 1,000 ClusterQueues in 50
cohorts, 50,000 workloads, 30 days of hourly rollups (fleet, flavor, team, cohort, ClusterQueue
and workload scopes), the newest USAGE_WINDOWS collection windows of every GPU, 30 days of
minutely collection runs, and the Kueue history the queue pages read: QUEUE_SAMPLE_HOURS of
per-window ClusterQueue samples of every queue and the state transitions of every workload
(created, quota reserved, admitted, finished; evictions and preemptions with their preemptors).
The data is generated once with COPY and kept (``--reset`` rebuilds it; a database generated
before the Kueue history existed gets it added). Requests run at the data's "now" (the clock is
moved to the newest window), so "now" figures find their samples however old the data is. Each
URL is requested ``--requests`` times with the Django test client, logged in as staff, after one
warm-up request; p50 / p95 are wall time inside ``Client.get`` (view, queries, template). The
cache is this process's own (``CACHE_URL=locmem://`` unless set): a stored chargeback report is
found from the second request on; ``--cold`` empties the cache before every request, so each
one pays what the first request after a data change pays.
Target: p95 <= 300 ms.

To add pages, append a function to ``URL_GROUPS`` (bench/_pages_urls.py): it gets the ``Sample``
(ids and names of objects that exist) and returns ``(label, path)`` pairs.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

from _pages_urls import URL_GROUPS, Sample  # noqa: E402  (bench/_pages_urls.py)

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpuledger_bench_pages"
GPUS_PER_NODE = 8
NODES = 6250
TEAMS = 100
CLUSTER_QUEUES = 1000
COHORTS = 50
WORKLOADS = 50_000
DAYS = 30
USAGE_WINDOWS = 30  # newest collection windows stored per GPU (60 s each)
# Per-window ClusterQueue samples stored per queue (60 s each): 1,000 queues x 48 h = 2.9 M rows.
# Production keeps GPULEDGER_USAGE_RETENTION_DAYS (14 d, 20 M rows); the pages read only the
# newest fresh samples through the (sampled_at, cluster_queue) index, so older rows add index
# depth, not rows read.
QUEUE_SAMPLE_HOURS = 48
# One workload in this many was evicted or preempted (and requeued, then admitted again).
EVICTED_ONE_IN = 8
FLAVORS = (
    ("h100", "NVIDIA-H100-80GB-HBM3", 0.5),
    ("a100", "NVIDIA-A100-SXM4-80GB", 0.35),
    ("l4", "NVIDIA-L4", 0.15),
)
TARGET_P95_MS = 300.0


def prepare_environment(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # Production-like: no debug cursor wrapper; plain HTTP through the test client.
    os.environ["DEBUG"] = "false"
    os.environ.setdefault("SECRET_KEY", "bench-pages-not-a-secret-" + "x" * 32)
    os.environ["SECURE_SSL_REDIRECT"] = "false"
    os.environ["SESSION_COOKIE_SECURE"] = "false"
    os.environ["CSRF_COOKIE_SECURE"] = "false"
    # The process's own cache: no other process's entries, and --cold may empty it.
    os.environ.setdefault("CACHE_URL", "locmem://")


def create_database(database_url: str, *, drop: bool) -> None:
    import psycopg

    parts = urlsplit(database_url)
    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as connection:
        if drop:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
        if not exists:
            connection.execute(f'CREATE DATABASE "{name}"')
            print(f"created database {name}")


def setup_django() -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.test.utils import setup_test_environment

    # Templates use {% static %}; the manifest storage DEBUG=false selects needs collectstatic.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    setup_test_environment()
    if not (BASE_DIR / "fleet" / "migrations").is_dir():
        # A working tree without generated migrations: build every table from the models (a
        # syncdb of only our apps would fail on foreign keys into the still-missing auth tables).
        from django.apps import apps

        settings.MIGRATION_MODULES = {app.label: None for app in apps.get_app_configs()}


# --- Data ---------------------------------------------------------------------------------------


def copy_rows(model: Any, rows: Iterable[dict[str, Any]]) -> int:
    """COPY dicts of field names into ``model``'s table; missing fields take their defaults."""
    from django.db import connection
    from psycopg.types.json import Jsonb

    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(f'"{f.column}"' for f in fields)
    now = datetime.now(UTC)
    defaults = {}
    for f in fields:
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            defaults[f.attname] = now
        else:
            # "" for blank text fields without a default, None for nullable ones.
            defaults[f.attname] = f.get_default()
    json_fields = {f.attname for f in fields if f.get_internal_type() == "JSONField"}
    count = 0
    with connection.cursor() as cursor:
        raw = cursor.cursor
        with raw.copy(f'COPY "{model._meta.db_table}" ({columns}) FROM STDIN') as copy:
            for row in rows:
                values = []
                for f in fields:
                    value = row.get(f.attname, row.get(f.name, defaults[f.attname]))
                    if f.attname in json_fields:
                        value = Jsonb(value)
                    values.append(value)
                copy.write_row(values)
                count += 1
    return count


def generate(end: datetime) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from fleet.models import Cluster, Gpu, IngestRun
    from ledger.models import HourlyRollup
    from ledger.models.usage import write_wide

    rng = random.Random(7)
    started = time.perf_counter()

    def step(label: str) -> None:
        print(f"  {label} ({time.perf_counter() - started:.0f} s)", flush=True)

    with transaction.atomic():
        cluster = Cluster.objects.create(name="bench", display_name="Bench cluster")
        teams, cohorts, queues = generate_queues(cluster.pk)
        step("teams, cohorts, queues")
        nodes = generate_nodes(cluster.pk)
        step("6,250 nodes, 50,000 GPUs")
        workloads = generate_workloads(cluster.pk, queues, rng)
        step("50,000 workloads")
        holders = node_holders(nodes, workloads)
        gpus = list(Gpu.objects.order_by("pk").values_list("pk", "host", "uuid", "node__flavor"))
        write_wide(usage_rows(cluster.pk, end, gpus, holders, rng))
        step(f"{USAGE_WINDOWS} windows x 50,000 GPUs of usage")
        rows = rollup_rows(cluster.pk, end, teams, cohorts, queues, workloads, rng)
        count = copy_rows(HourlyRollup, rows)
        step(f"{count:,} hourly rollups")
        copy_rows(IngestRun, ingest_runs(cluster.pk, end))
        step("30 days of collection runs")
        generate_queue_history(end, step)
        user_model = get_user_model()
        user_model.objects.create_user("bench-staff", password="bench", is_staff=True)
    # Autovacuum does this for insert-only tables in production (PostgreSQL >= 13); index-only
    # scans need the visibility map it sets.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    step("VACUUM ANALYZE")


def generate_queues(cluster_id: int) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """TEAMS teams, COHORTS cohorts and CLUSTER_QUEUES queues spread over both, round robin.

    Returns (pk, name) of the teams and cohorts and (pk, team_id) of the queues, in pk order.
    """
    from quotas.models import ClusterQueue, Cohort, Team

    copy_rows(
        Team, ({"name": f"team-{i:03d}", "display_name": f"Team {i:03d}"} for i in range(TEAMS))
    )
    teams = list(Team.objects.order_by("pk").values_list("pk", "name"))
    copy_rows(
        Cohort, ({"cluster_id": cluster_id, "name": f"cohort-{i:02d}"} for i in range(COHORTS))
    )
    cohorts = list(Cohort.objects.order_by("pk").values_list("pk", "name"))
    copy_rows(
        ClusterQueue,
        (
            {
                "cluster_id": cluster_id,
                "name": f"cq-{i:04d}",
                "team_id": teams[i % TEAMS][0],
                "cohort_id": cohorts[i % COHORTS][0],
                "cohort_name": cohorts[i % COHORTS][1],
            }
            for i in range(CLUSTER_QUEUES)
        ),
    )
    queues = list(ClusterQueue.objects.order_by("pk").values_list("pk", "team_id"))
    return teams, cohorts, queues


def flavor_of(i: int) -> tuple[str, str]:
    """The (flavor, GPU model) of node ``i``: FLAVORS in order, each its weight of the nodes."""
    share = i / NODES
    cumulative = 0.0
    for name, model, weight in FLAVORS:
        cumulative += weight
        if share < cumulative:
            return name, model
    return FLAVORS[-1][0], FLAVORS[-1][1]


def generate_nodes(cluster_id: int) -> list[tuple]:
    """NODES nodes of GPUS_PER_NODE GPUs each; returns (pk, name, flavor, model) of the nodes."""
    from fleet.models import Gpu, Node

    copy_rows(
        Node,
        (
            {
                "cluster_id": cluster_id,
                "name": f"gpu-node-{i:05d}",
                "flavor": flavor_of(i)[0],
                "gpu_product": flavor_of(i)[1],
                "node_pool": f"{flavor_of(i)[0]}-pool-{i % 4}",
                "gpu_capacity": GPUS_PER_NODE,
                "gpu_allocatable": GPUS_PER_NODE,
            }
            for i in range(NODES)
        ),
    )
    nodes = list(Node.objects.order_by("pk").values_list("pk", "name", "flavor", "gpu_product"))
    copy_rows(
        Gpu,
        (
            {
                "cluster_id": cluster_id,
                "node_id": pk,
                "host": name,
                "uuid": f"GPU-{name}-{index}",
                "gi_id": "",
                "index": index,
                "model_name": model,
                "time_sliced": index == 7 and pk % 50 == 0,
            }
            for pk, name, _flavor, model in nodes
            for index in range(GPUS_PER_NODE)
        ),
    )
    return nodes


def generate_workloads(cluster_id: int, queues: list[tuple], rng: random.Random) -> list[tuple]:
    """WORKLOADS workloads over the queues (6 in 10 succeeded, 3 admitted, 1 pending).

    Returns (pk, namespace, name, cluster_queue_id, team_id, state) of each, in pk order.
    """
    from quotas.choices import WorkloadState
    from quotas.models import Workload

    states = [WorkloadState.SUCCEEDED] * 6 + [WorkloadState.ADMITTED] * 3 + [WorkloadState.PENDING]
    copy_rows(
        Workload,
        (
            {
                "cluster_id": cluster_id,
                "namespace": f"ns-{i % TEAMS:03d}",
                "name": f"job-{i:05d}",
                "cluster_queue_id": queues[i % CLUSTER_QUEUES][0],
                "state": states[i % len(states)],
                "requested_gpus": float(rng.choice((1, 2, 4, 8, 16))),
                "admitted_gpus": 8.0,
                "pod_sets": [],
                "flavors": {},
            }
            for i in range(WORKLOADS)
        ),
    )
    return list(
        Workload.objects.order_by("pk").values_list(
            "pk", "namespace", "name", "cluster_queue_id", "cluster_queue__team_id", "state"
        )
    )


def node_holders(nodes: list[tuple], workloads: list[tuple]) -> dict[str, tuple]:
    """Newest windows: 8 of 10 nodes held whole by one running workload (by node name)."""
    from quotas.choices import WorkloadState

    running = [w for w in workloads if w[5] == WorkloadState.ADMITTED]
    holders = {}
    for n, (_pk, name, *_rest) in enumerate(nodes):
        if n % 10 < 8:
            holders[name] = running[n % len(running)]
    return holders


def usage_rows(
    cluster_id: int,
    end: datetime,
    gpus: list[tuple],
    holders: dict[str, tuple],
    rng: random.Random,
) -> Iterator[dict[str, Any]]:
    """The newest USAGE_WINDOWS collection windows of the ``(pk, host, uuid, flavor)`` GPUs."""
    for w in range(USAGE_WINDOWS):
        window_end = end - timedelta(minutes=w)
        window_start = window_end - timedelta(minutes=1)
        for pk, host, uuid, flavor in gpus:
            holder = holders.get(host)
            activity = None if pk % 97 == 0 else round(rng.random(), 3)
            row = {
                "cluster_id": cluster_id,
                "window_start": window_start,
                "window_end": window_end,
                "gpu_id": pk,
                "gpu_key": f"{host}/{uuid}/",
                "node_name": host,
                "flavor": flavor,
                "allocated": holder is not None,
                "gpus": 1.0,
                "capacity_gpus": 1.0,
                "activity": activity,
                "sm_active": activity,
                "gpu_util": None if activity is None else round(rng.random() * 100, 1),
                "fb_used_mib": 20000.0,
                "activity_source": "none" if activity is None else "sm_active",
                "samples": 0 if activity is None else 4,
                "expected_samples": 4,
            }
            if holder is not None:
                row.update(
                    namespace=holder[1],
                    pod=f"{holder[2]}-0",
                    workload_id=holder[0],
                    cluster_queue_id=holder[3],
                    team_id=holder[4],
                )
            yield row


def rollup_row(
    rng: random.Random,
    cluster_id: int,
    scope: str,
    key: str,
    hour: datetime,
    size: float,
    **extra: Any,
) -> dict[str, Any]:
    """One hourly rollup of ``size`` GPU-hours of capacity, with drawn allocation and activity."""
    from ledger.choices import RollupScope

    allocated = size * rng.uniform(0.5, 0.9)
    telemetry = allocated * 0.97
    if scope == RollupScope.WORKLOAD:
        # One workload-hour in ten is input-bound (busy but not working), one in five idle.
        busy = allocated * rng.uniform(0.3, 0.9) if rng.random() < 0.1 else 0.0
        idle = allocated * rng.uniform(0.5, 1.0) if rng.random() < 0.2 else 0.0
    else:
        busy = allocated * rng.uniform(0.0, 0.05)
        idle = allocated * rng.uniform(0.0, 0.2)
    return {
        "cluster_id": cluster_id,
        "scope": scope,
        "key": key,
        "hour": hour,
        "flavor": extra.pop("flavor", ""),
        "gpu_model": "",
        "capacity_gpu_hours": size,
        "allocated_gpu_hours": allocated,
        "telemetry_gpu_hours": telemetry,
        "active_gpu_hours": telemetry * rng.uniform(0.2, 0.7),
        "idle_gpu_hours": idle,
        "busy_not_working_gpu_hours": busy,
        "gpu_util_gpu_hours": telemetry * 0.6,
        "gpu_util_covered_gpu_hours": telemetry,
        "nominal_gpu_hours": size,
        "peak_allocated_gpus": allocated,
        "windows": 60,
        **extra,
    }


def workload_hours(
    workloads: list[tuple], hours: int, rng: random.Random
) -> dict[int, list[tuple]]:
    """Each workload ran 12 hours somewhere in the ``hours``: the workloads of each hour index."""
    running_by_hour: dict[int, list[tuple]] = {}
    for workload in workloads:
        first = rng.randrange(0, hours - 12)
        for h in range(first, first + 12):
            running_by_hour.setdefault(h, []).append(workload)
    return running_by_hour


def rollup_rows(
    cluster_id: int,
    end: datetime,
    teams: list[tuple],
    cohorts: list[tuple],
    queues: list[tuple],
    workloads: list[tuple],
    rng: random.Random,
) -> Iterator[dict[str, Any]]:
    """DAYS of hourly rollups of every scope, hour by hour as the hourly rollup writes them."""
    from ledger.choices import RollupScope

    last_hour = end.replace(minute=0, second=0, microsecond=0)
    hours = [last_hour - timedelta(hours=h) for h in range(DAYS * 24, 0, -1)]
    flavor_gpus = {name: NODES * GPUS_PER_NODE * weight for name, _m, weight in FLAVORS}
    running_by_hour = workload_hours(workloads, len(hours), rng)

    def row(scope: str, key: str, hour: datetime, size: float, **extra: Any) -> dict[str, Any]:
        return rollup_row(rng, cluster_id, scope, key, hour, size, **extra)

    for h, hour in enumerate(hours):
        for flavor, size in flavor_gpus.items():
            yield row(RollupScope.FLEET, "bench", hour, size, flavor=flavor)
            yield row(RollupScope.FLAVOR, flavor, hour, size, flavor=flavor)
        for pk, name in teams:
            yield row(RollupScope.TEAM, name, hour, 500.0, team_id=pk)
        for _pk, name in cohorts:
            yield row(RollupScope.COHORT, name, hour, 1000.0)
        for i, (pk, team_id) in enumerate(queues):
            yield row(
                RollupScope.CLUSTER_QUEUE,
                f"cq-{i:04d}",
                hour,
                50.0,
                cluster_queue_id=pk,
                team_id=team_id,
            )
        for pk, namespace, name, cq, team_id, _state in running_by_hour.get(h, []):
            yield row(
                RollupScope.WORKLOAD,
                f"{namespace}/{name}",
                hour,
                8.0,
                workload_id=pk,
                cluster_queue_id=cq,
                team_id=team_id,
            )


def ingest_runs(cluster_id: int, end: datetime) -> Iterator[dict[str, Any]]:
    """One successful collection run per minute of the DAYS before ``end``, newest first."""
    from fleet.choices import IngestSource, IngestStatus

    for minute in range(DAYS * 24 * 60):
        moment = end - timedelta(minutes=minute)
        yield {
            "cluster_id": cluster_id,
            "source": IngestSource.DCGM,
            "status": IngestStatus.SUCCESS,
            "started_at": moment - timedelta(seconds=20),
            "finished_at": moment - timedelta(seconds=5),
            "window_start": moment - timedelta(minutes=1),
            "window_end": moment,
            "skip_reasons": {},
        }


def generate_queue_history(end: datetime, step: Callable[[str], None]) -> None:
    """ClusterQueue samples of the newest QUEUE_SAMPLE_HOURS and every workload's transitions.

    Samples: each queue has one GPU flavor and 50 GPUs of nominal quota (as its rollups), uses
    50-130 % of it (above 100 % it borrows), and every fifth queue has demand pending.
    Transitions: a workload was created, reserved quota and was admitted within 30 days; finished
    ones finished; one in EVICTED_ONE_IN was evicted or preempted by another workload of its
    queue, requeued, and admitted again.
    """
    from quotas.choices import TransitionKind, WorkloadState
    from quotas.models import ClusterQueue, ClusterQueueSample, Workload, WorkloadTransition

    rng = random.Random(11)
    queues = list(ClusterQueue.objects.order_by("pk").values_list("pk", flat=True))
    windows = QUEUE_SAMPLE_HOURS * 60

    def samples():
        for w in range(windows):
            sampled_at = end - timedelta(minutes=w)
            for i, pk in enumerate(queues):
                nominal = 50.0
                total = float(round(nominal * rng.uniform(0.5, 1.3)))
                borrowed = max(0.0, total - nominal)
                pending = float(rng.choice((8, 16, 32))) if i % 5 == 0 else 0.0
                yield {
                    "cluster_queue_id": pk,
                    "flavor_name": FLAVORS[i % len(FLAVORS)][0],
                    "resource": "nvidia.com/gpu",
                    "sampled_at": sampled_at,
                    "window_seconds": 60,
                    "total": total,
                    "reserved": total,
                    "borrowed": borrowed,
                    "lent": 0.0 if borrowed else float(round(rng.uniform(0, 10))),
                    "nominal": nominal,
                    "borrowing_limit": 25.0,
                    "lending_limit": None,
                    "pending_demand": pending,
                    "pending_workloads": int(pending // 8),
                    "admitted_workloads": int(total // 8),
                }

    count = copy_rows(ClusterQueueSample, samples())
    step(f"{count:,} ClusterQueue samples ({QUEUE_SAMPLE_HOURS} h x {len(queues):,} queues)")

    workloads = list(Workload.objects.order_by("pk").values_list("pk", "cluster_queue_id", "state"))
    by_queue: dict[int, list[int]] = {}
    for pk, queue_id, _state in workloads:
        by_queue.setdefault(queue_id, []).append(pk)
    span = DAYS * 24 * 3600 - 24 * 3600

    def transitions():
        for n, (pk, queue_id, state) in enumerate(workloads):
            created = end - timedelta(seconds=rng.randrange(3600, span))
            admitted = created + timedelta(seconds=rng.randrange(10, 1800))
            yield {"workload_id": pk, "kind": TransitionKind.CREATED, "at": created}
            if state == WorkloadState.PENDING:
                continue
            yield {"workload_id": pk, "kind": TransitionKind.QUOTA_RESERVED, "at": admitted}
            yield {"workload_id": pk, "kind": TransitionKind.ADMITTED, "at": admitted}
            moment = admitted
            if n % EVICTED_ONE_IN == 0:
                evicted = admitted + timedelta(seconds=rng.randrange(600, 6 * 3600))
                peers = by_queue[queue_id]
                preemptor = peers[(peers.index(pk) + 1) % len(peers)]
                preempted = n % 2 == 0
                kind = TransitionKind.PREEMPTED if preempted else TransitionKind.EVICTED
                readmitted = evicted + timedelta(seconds=rng.randrange(60, 3600))
                yield {
                    "workload_id": pk,
                    "kind": kind,
                    "at": evicted,
                    "reason": "InClusterQueue" if preempted else "PodsReadyTimeout",
                    "preemptor_id": preemptor if preempted else None,
                }
                yield {"workload_id": pk, "kind": TransitionKind.REQUEUED, "at": evicted}
                yield {"workload_id": pk, "kind": TransitionKind.ADMITTED, "at": readmitted}
                moment = readmitted
            if state == WorkloadState.SUCCEEDED:
                finished = moment + timedelta(seconds=rng.randrange(600, 12 * 3600))
                yield {"workload_id": pk, "kind": TransitionKind.FINISHED, "at": finished}

    count = copy_rows(WorkloadTransition, transitions())
    step(f"{count:,} workload transitions")


def usage_model() -> Any:
    """GpuUsage, wherever the code being measured keeps it (``ledger`` since the restructure)."""
    try:
        from ledger.models import GpuUsage
    except ImportError:  # the code before the restructure, measured on the same database
        from fleet.models import GpuUsage  # type: ignore[attr-defined,no-redef]
    return GpuUsage


def data_present() -> bool:
    from fleet.models import Gpu

    return Gpu.objects.count() >= NODES * GPUS_PER_NODE and usage_model().objects.exists()


def queue_history_present() -> bool:
    from quotas.models import ClusterQueueSample, WorkloadTransition

    return ClusterQueueSample.objects.exists() and WorkloadTransition.objects.exists()


def data_end() -> datetime:
    """The end of the newest collection window: the data's "now"."""
    from django.db.models import Max

    return usage_model().objects.aggregate(end=Max("window_end"))["end"]


# --- URLs ---------------------------------------------------------------------------------------


def sample() -> Sample:
    from fleet.models import Gpu
    from quotas.choices import WorkloadState
    from quotas.models import ClusterQueue, Workload

    # A GPU of node 100 (of the last node in a small fleet).
    index = min(GPUS_PER_NODE * 100, GPUS_PER_NODE * NODES - 1)
    gpu = Gpu.objects.select_related("node", "cluster").order_by("pk")[index]
    queue = ClusterQueue.objects.select_related("team", "cohort").order_by("pk").first()
    workload = Workload.objects.filter(state=WorkloadState.ADMITTED).order_by("pk").first()
    return Sample(
        node_id=gpu.node_id,
        gpu_id=gpu.pk,
        team_name=queue.team.name,
        cluster_name=gpu.cluster.name,
        cluster_queue_name=queue.name,
        cohort_name=queue.cohort.name,
        workload_id=workload.pk,
    )


def measure(
    requests: int, only: str | None, cold: bool = False
) -> list[tuple[str, str, float, float, int]]:
    import time_machine

    # The data's "now", 30 s after its newest window; the clock ticks on from there.
    with time_machine.travel(data_end() + timedelta(seconds=30), tick=True):
        return measure_now(requests, only, cold)


def measure_now(
    requests: int, only: str | None, cold: bool = False
) -> list[tuple[str, str, float, float, int]]:
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username="bench-staff"))
    s = sample()
    results = []
    for group in URL_GROUPS:
        for label, path in group(s):
            if only and only not in label:
                continue
            p50, p95, status = time_requests(
                client, label, path, requests, before=cache.clear if cold else None
            )
            results.append((label, path, p50, p95, status))
    return results


def time_requests(
    client: Any,
    label: str,
    path: str,
    requests: int,
    before: Callable[[], None] | None = None,
    width: int = 28,
) -> tuple[float, float, int]:
    """One warm-up GET (and status check), then ``requests`` timed GETs of ``path`` (``before``
    called ahead of each): p50 and p95 in ms and the last status, printed as a table row."""
    response = client.get(path)
    timings = []
    for _ in range(requests):
        if before is not None:
            before()
        started = time.perf_counter()
        response = client.get(path)
        timings.append((time.perf_counter() - started) * 1000.0)
    timings.sort()
    p50 = statistics.median(timings)
    p95 = timings[max(0, int(round(0.95 * len(timings))) - 1)]
    flag = "" if p95 <= TARGET_P95_MS else "  > target"
    print(f"{label:{width}} {p50:8.1f} {p95:8.1f}  HTTP {response.status_code}{flag}", flush=True)
    return p50, p95, response.status_code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_PAGES_DATABASE_URL", DEFAULT_URL)
    )
    parser.add_argument(
        "--reset", action="store_true", help="drop the database and regenerate the data"
    )
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--only", help="time only URLs whose label contains this")
    parser.add_argument(
        "--no-migrate",
        action="store_true",
        help="read an existing database as it is: no migration, no data generation (measuring "
        "code whose migrations it does not have, without writing to it)",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="empty the cache before every timed request (what the first request after a data "
        "change costs; the login session is in the database)",
    )
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
        args.requests = 2
        globals().update(
            NODES=10,
            TEAMS=4,
            CLUSTER_QUEUES=20,
            COHORTS=4,
            WORKLOADS=400,
            DAYS=3,
            USAGE_WINDOWS=5,
            QUEUE_SAMPLE_HOURS=2,
        )

    prepare_environment(args.database_url)
    if not args.no_migrate:
        create_database(args.database_url, drop=args.reset)
    setup_django()
    from django.core.management import call_command
    from django.db import transaction
    from django.utils import timezone

    if args.no_migrate:
        if args.reset or not data_present() or not queue_history_present():
            parser.error("--no-migrate reads a generated database as it is (no --reset)")
    else:
        call_command("migrate", run_syncdb=True, verbosity=0)
    if not data_present():
        call_command("flush", interactive=False, verbosity=0)
        end = timezone.now().replace(second=0, microsecond=0)
        print("generating data (once; --reset regenerates):")
        generate(end)
    elif not queue_history_present():
        print("adding the Kueue history (samples, transitions) to the data:")
        with transaction.atomic():
            generate_queue_history(data_end(), lambda label: print(f"  {label}", flush=True))
    print(f"{'page / chart':28} {'p50 ms':>8} {'p95 ms':>8}  ({args.requests} requests each)")
    results = measure(args.requests, args.only, args.cold)
    failed = [r for r in results if r[4] != 200]
    slow = [r for r in results if r[3] > TARGET_P95_MS]
    print(
        f"{len(results)} URLs, {len(slow)} above p95 {TARGET_P95_MS:.0f} ms, {len(failed)} not 200"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
