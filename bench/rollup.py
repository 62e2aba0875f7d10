"""Hourly rollup benchmark on PostgreSQL: ``ledger.rollup.roll_up_hour`` over one synthetic hour.

Data (generated once per size and reused; ``--reload`` rebuilds): one cluster per size
(``bench-5000``, ``bench-50000``), 8 GPUs per node, one node in 10 an L4 node, one in 20 an A100
node whose first two GPUs are MIG-split 3g+2g+1g+1g; about 75 % of the GPUs held by Kueue
workloads of 1-64 GPUs (~10,000 at 50,000 GPUs; one pod per node a workload spans) from 1,000
ClusterQueues (5 per team of 200, 50 cohorts of which 10 implicit, one queue in 20 without a
team), 3 % by notebook pods
with no queue, 2 % time-sliced between a workload pod and a notebook, one node in 200 without
DCGM (its pods' rows have no telemetry); 15 % of the workloads start or end inside the hour;
6 % of the GPUs report GR_ENGINE_ACTIVE only. 60 windows of 60 s; every window's usage rows go in
with COPY, followed by one ClusterQueueSample per queue and window. ``VACUUM ANALYZE`` follows a
load, as autovacuum would after a bulk insert.

Measured: ``roll_up_hour`` of that hour, ``--runs`` times per size and path: wall time, CPU of
this process, CPU of the PostgreSQL backend (``/proc/<pid>/stat``, loopback only), rows written,
and the load average around the runs. ``--path portable`` times the ORM path every database
takes (the path before the PostgreSQL fast path existed), ``--path fast`` the default on
PostgreSQL, ``both`` both and checks they wrote the same figures.

    .venv/bin/python bench/rollup.py [--small] [--database-url postgres://…]
        [--sizes 5000,50000]
        [--runs 3] [--path both] [--reload]
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpuledger_bench_rollup"
HOUR = datetime(2026, 1, 15, 10, tzinfo=UTC)
WINDOWS = 60
WINDOW = timedelta(seconds=60)
GPUS_PER_NODE = 8
TEAMS = 200
QUEUES = 1000
COHORTS = 50
IMPLICIT_COHORTS = 10
MIG_SLICES = (3, 2, 1, 1)
WORKLOAD_SIZES = (1, 1, 1, 1, 2, 2, 2, 4, 4, 8, 8, 16, 64)
H100 = ("h100", "NVIDIA-H100-80GB-HBM3")
A100 = ("a100-mig", "NVIDIA-A100-SXM4-40GB")
L4 = ("l4", "NVIDIA-L4")
# Columns that stay the same in every window first, then the ones each window sets.
STATIC_COLUMNS = [
    "cluster_id", "gpu_key", "namespace", "pod", "container", "node_name", "flavor",
    "gpu_model", "workload_id", "local_queue_id", "cluster_queue_id", "team_id", "allocated",
    "gpus", "capacity_gpus", "shared", "activity_source", "samples", "expected_samples",
    "created_at",
]  # fmt: skip
WINDOW_COLUMNS = [
    "window_start", "window_end", "sm_active", "pipe_tensor_active", "gr_engine_active",
    "gpu_util", "activity",
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
    from django.apps import apps
    from django.conf import settings
    from django.core.management import call_command

    if not (ROOT / "fleet" / "migrations").is_dir():
        # A working tree without generated migrations: build every table from the models (a
        # syncdb of only our apps would fail on foreign keys into the still-missing auth tables).
        settings.MIGRATION_MODULES = {app.label: None for app in apps.get_app_configs()}
    call_command("migrate", run_syncdb=True, verbosity=0)


def ensure_database(database_url: str) -> None:
    import psycopg

    parts = urllib.parse.urlsplit(database_url)
    name = parts.path.lstrip("/")
    admin = urllib.parse.urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as connection:
        found = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if found.fetchone() is None:
            connection.execute(f'CREATE DATABASE "{name}"')
            print(f"created database {name}")


# --- Data ---------------------------------------------------------------------------------------


@dataclass
class Slot:
    """One usage row repeated over the windows it lives in: a GPU, a MIG instance or a share."""

    static: str  # the tab-separated STATIC_COLUMNS
    first: int  # first and last window (1-based) the row exists in
    last: int
    kind: str  # "sm", "gr", "none" (no telemetry) or "free" (unallocated GPU)
    base: float  # typical activity of the holder
    busy: bool  # GPU_UTIL high while SM_ACTIVE stays low


def _text(value: object) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value)


def _kueue_objects(cluster, rng: random.Random) -> dict[str, list]:
    from quotas.models import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Team

    Team.objects.bulk_create(
        [Team(name=f"team-{index:03d}") for index in range(TEAMS)], ignore_conflicts=True
    )
    teams = list(Team.objects.filter(name__startswith="team-").order_by("name")[:TEAMS])
    for name, model in (H100, A100, L4):
        ResourceFlavor.objects.get_or_create(cluster=cluster, name=name, gpu_model=model)
    cohorts = Cohort.objects.bulk_create(
        [Cohort(cluster=cluster, name=f"cohort-{i:02d}") for i in range(COHORTS - IMPLICIT_COHORTS)]
    )
    queues = ClusterQueue.objects.bulk_create(
        [
            ClusterQueue(
                cluster=cluster,
                name=f"cq-{index:04d}",
                team=None if index % 20 == 19 else teams[index // 5],
                cohort=cohorts[index % COHORTS] if index % COHORTS < len(cohorts) else None,
                cohort_name=f"cohort-{index % COHORTS:02d}",
            )
            for index in range(QUEUES)
        ]
    )
    local_queues = LocalQueue.objects.bulk_create(
        [
            LocalQueue(
                cluster=cluster,
                namespace=f"ns-{queue.name}",
                name="default",
                cluster_queue=queue,
                cluster_queue_name=queue.name,
            )
            for queue in queues
        ]
    )
    return {"queues": queues, "local_queues": local_queues}


# (gpu_key, node name, (flavor, GPU model), capacity in GPUs, reports GR_ENGINE_ACTIVE only)
Device = tuple[str, str, tuple[str, str], float, bool]


def _devices(gpus: int, rng: random.Random) -> tuple[list[Device], set[int]]:
    """Physical GPUs (and MIG instances), node by node, and the nodes without dcgm-exporter."""
    devices: list[Device] = []
    nodes = max(1, gpus // GPUS_PER_NODE)
    dark_nodes = set(range(7, nodes, 200))  # no dcgm-exporter on these
    for node in range(nodes):
        host = f"gpu-node-{node:05d}"
        flavor = A100 if node % 20 == 3 else L4 if node % 10 == 5 else H100
        for index in range(GPUS_PER_NODE):
            uuid = f"GPU-{node:05d}-{index}"
            if flavor == A100 and index < 2:
                for gi, slices in enumerate(MIG_SLICES):
                    key = f"{host}/{uuid}/{gi + 1}"
                    devices.append((key, host, flavor, slices / 7, rng.random() < 0.06))
            else:
                devices.append((f"{host}/{uuid}/", host, flavor, 1.0, rng.random() < 0.06))
    return devices, dark_nodes


def _kind_of(device: Device) -> str:
    return "gr" if device[4] else "sm"


def _source_of(kind: str) -> dict[str, str]:
    return {"activity_source": "gr_engine_active" if kind == "gr" else "sm_active"}


@dataclass
class _SlotBuilder:
    """The slots of one hour as they are drawn: the cluster, creation time and random draws."""

    cluster_id: int
    now: str
    rng: random.Random
    dark_nodes: set[int]
    slots: list[Slot] = field(default_factory=list)
    notebook: int = 0  # notebook pods so far (their names count up)

    def static(self, device: Device, **fields: Any) -> str:
        key, host, (flavor, model), capacity, _gr = device
        values = {
            "cluster_id": self.cluster_id,
            "gpu_key": key,
            "namespace": "",
            "pod": "",
            "container": "",
            "node_name": host,
            "flavor": flavor,
            "gpu_model": model,
            "workload_id": None,
            "local_queue_id": None,
            "cluster_queue_id": None,
            "team_id": None,
            "allocated": False,
            "gpus": capacity,
            "capacity_gpus": capacity,
            "shared": False,
            "activity_source": "none",
            "samples": 4,
            "expected_samples": 4,
            "created_at": self.now,
        }
        values.update(fields)
        return "\t".join(_text(values[column]) for column in STATIC_COLUMNS)

    def lifetime(self) -> tuple[int, int]:
        if self.rng.random() < 0.85:
            return 1, WINDOWS
        first, last = sorted(self.rng.sample(range(1, WINDOWS + 1), 2))
        return first, last

    def holder_base(self) -> tuple[float, bool]:
        if self.rng.random() < 0.2:
            return 0.003, self.rng.random() < 0.3
        return self.rng.uniform(0.05, 0.95), False

    def add_free(self, device: Device) -> None:
        """An unallocated GPU."""
        if device[1] not in self.dark_nodes:
            line = self.static(device, activity_source="sm_active")
            self.slots.append(Slot(line, 1, WINDOWS, "free", 0.0, False))

    def add_notebook(self, device: Device) -> None:
        """A notebook pod outside Kueue holding one device."""
        self.notebook += 1
        fields = {"namespace": f"notebooks-{self.notebook % 40}", "pod": f"nb-{self.notebook}"}
        base, busy = self.holder_base()
        first, last = self.lifetime()
        if device[1] in self.dark_nodes:
            line = self.static(device, allocated=True, gpu_key="", capacity_gpus=0.0, **fields)
            self.slots.append(Slot(line, first, last, "none", 0.0, False))
        else:
            kind = _kind_of(device)
            line = self.static(device, allocated=True, **_source_of(kind), **fields)
            self.slots.append(Slot(line, first, last, kind, base, busy))

    def add_workload(self, workload: Any, queue: Any, local_queue: Any, held: list[Device]) -> None:
        """The rows of a Kueue workload's pods: one pod per node it holds devices on."""
        fields = {
            "namespace": workload.namespace,
            "workload_id": workload.pk,
            "local_queue_id": local_queue.pk,
            "cluster_queue_id": queue.pk,
            "team_id": queue.team_id,
            "allocated": True,
        }
        first, last = self.lifetime()
        base, busy = self.holder_base()
        by_node: dict[str, list[Device]] = {}
        for device in held:
            by_node.setdefault(device[1], []).append(device)
        for pod_index, (host, on_node) in enumerate(by_node.items()):
            pod = f"{workload.name}-{pod_index}"
            if host in self.dark_nodes:
                # No DCGM series: one row for the pod's allocation, no telemetry, no capacity.
                device = ("", host, on_node[0][2], 0.0, False)
                count = sum(d[3] for d in on_node)
                line = self.static(device, pod=pod, gpus=count, capacity_gpus=0.0, **fields)
                self.slots.append(Slot(line, first, last, "none", 0.0, False))
                continue
            for device in on_node:
                self.add_pod_device(device, pod, fields, (first, last, base, busy))

    def add_pod_device(
        self,
        device: Device,
        pod: str,
        fields: dict[str, Any],
        life: tuple[int, int, float, bool],
    ) -> None:
        """One device of a workload pod; 2 % of whole GPUs are time-sliced with a notebook."""
        first, last, base, busy = life
        kind = _kind_of(device)
        source = _source_of(kind)
        if device[3] == 1.0 and self.rng.random() < 0.02:
            # Time-sliced with a notebook: two rows, half a GPU each, one capacity.
            self.notebook += 1
            shared = self.static(device, pod=pod, gpus=0.5, shared=True, **source, **fields)
            self.slots.append(Slot(shared, first, last, kind, base, busy))
            notebook = self.static(
                device,
                namespace=f"notebooks-{self.notebook % 40}",
                pod=f"nb-{self.notebook}",
                allocated=True,
                gpus=0.5,
                capacity_gpus=0.0,
                shared=True,
                **source,
            )
            self.slots.append(Slot(notebook, first, last, kind, base, busy))
            return
        line = self.static(device, pod=pod, **source, **fields)
        self.slots.append(Slot(line, first, last, kind, base, busy))


def _hold_devices(
    builder: _SlotBuilder, cluster: Any, devices: list[Device], objects: dict[str, list]
) -> list[tuple[Any, int, list[Device]]]:
    """Walk the devices: leave each free, give it to a notebook, or start a workload on it.

    Returns the (unsaved) workloads with their queue index and the devices they hold.
    """
    from quotas.models import Workload

    queues, local_queues = objects["queues"], objects["local_queues"]
    rng = builder.rng
    held_by: list[tuple[Any, int, list[Device]]] = []
    position = 0
    while position < len(devices):
        draw = rng.random()
        if draw >= 0.78:  # unallocated
            builder.add_free(devices[position])
            position += 1
            continue
        if draw >= 0.75:  # a notebook pod outside Kueue
            builder.add_notebook(devices[position])
            position += 1
            continue
        size = rng.choice(WORKLOAD_SIZES)
        held = devices[position : position + size]
        if held[0][3] < 1:  # MIG instances go one per workload
            held = held[:1]
        position += len(held)
        queue_index = rng.randrange(QUEUES)
        workload = Workload(
            cluster=cluster,
            namespace=local_queues[queue_index].namespace,
            name=f"job-{len(held_by):06d}",
            cluster_queue=queues[queue_index],
            local_queue=local_queues[queue_index],
        )
        held_by.append((workload, queue_index, held))
    return held_by


def _slots(cluster, gpus: int, rng: random.Random) -> list[Slot]:
    """Every usage row of the hour, with the windows it lives in."""
    from quotas.models import Workload

    objects = _kueue_objects(cluster, rng)
    queues, local_queues = objects["queues"], objects["local_queues"]
    now = datetime.now(UTC).isoformat()
    devices, dark_nodes = _devices(gpus, rng)
    builder = _SlotBuilder(cluster.pk, now, rng, dark_nodes)
    held_by = _hold_devices(builder, cluster, devices, objects)
    Workload.objects.bulk_create([workload for workload, _q, _held in held_by], batch_size=5_000)
    for workload, queue_index, held in held_by:
        builder.add_workload(workload, queues[queue_index], local_queues[queue_index], held)
    return builder.slots


def _window_fields(slot: Slot, rng: random.Random) -> str:
    if slot.kind == "none":
        return "\\N\t\\N\t\\N\t\\N\t\\N"
    if slot.kind == "free":
        return "0.0\t0.0\t0.0\t0\t0.0"
    activity = min(1.0, max(0.0, slot.base + rng.uniform(-0.03, 0.03)))
    util = rng.uniform(60, 100) if slot.busy else min(100.0, activity * 130)
    if slot.kind == "gr":
        return f"\\N\t\\N\t{activity:.4f}\t{util:.1f}\t{activity:.4f}"
    return f"{activity:.4f}\t{activity * 0.4:.4f}\t{activity:.4f}\t{util:.1f}\t{activity:.4f}"


_INTEGERS = {"cluster_id", "workload_id", "local_queue_id", "cluster_queue_id", "team_id"}
_COUNTS = {"samples", "expected_samples"}
_TIMES = {"window_start", "window_end", "created_at"}
_FLAGS = {"allocated", "shared"}
_TEXTS = {"gpu_key", "namespace", "pod", "container", "node_name", "flavor", "gpu_model"}


def _typed_row(columns: list[str], fields: list[str]) -> dict[str, Any]:
    """One COPY text line's fields as the Python values the usage writer takes."""
    row: dict[str, Any] = {}
    for column, text in zip(columns, fields, strict=True):
        if text == "\\N":
            row[column] = None
        elif column in _INTEGERS or column in _COUNTS:
            row[column] = int(text)
        elif column in _TIMES:
            row[column] = datetime.fromisoformat(text)
        elif column in _FLAGS:
            row[column] = text == "t"
        elif column in _TEXTS or column == "activity_source":
            row[column] = text
        else:
            row[column] = float(text)
    return row


def load(gpus: int, reload: bool) -> tuple[int, int]:
    """Create (or find) the cluster of this size with its hour of usage; returns (id, rows)."""
    from django.db import connection, transaction

    from fleet.models import Cluster
    from ledger.models import GpuUsage, HourlyRollup
    from ledger.models.usage import write_wide
    from quotas.models import ClusterQueue, ClusterQueueSample

    name = f"bench-{gpus}"
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is not None and not reload and GpuUsage.objects.filter(cluster=cluster).exists():
        return cluster.pk, GpuUsage.objects.filter(cluster=cluster).count()
    if cluster is not None:
        # Cascades to its usage, rollups and Kueue objects.
        HourlyRollup.objects.filter(cluster=cluster).delete()
        cluster.delete()
    started = time.perf_counter()
    rng = random.Random(gpus)
    with transaction.atomic():
        cluster = Cluster.objects.create(name=name, display_name=f"Bench {gpus:,} GPUs")
        slots = _slots(cluster, gpus, rng)
    print(f"{name}: {len(slots):,} usage rows per full window, generating {WINDOWS} windows")
    columns = STATIC_COLUMNS + WINDOW_COLUMNS
    rows = 0
    with connection.cursor() as cursor:
        for window in range(1, WINDOWS + 1):
            end = HOUR + window * WINDOW
            times = f"{(end - WINDOW).isoformat()}\t{end.isoformat()}"
            lines = [
                f"{slot.static}\t{times}\t{_window_fields(slot, rng)}"
                for slot in slots
                if slot.first <= window <= slot.last
            ]
            # Through the usage store's own writer: holdings, facts and the window row.
            rows += write_wide(_typed_row(columns, line.split("\t")) for line in lines)
        queues = list(ClusterQueue.objects.filter(cluster=cluster).values_list("pk", "name"))
        sample_columns = (
            "cluster_queue_id, flavor_name, resource, sampled_at, window_seconds, total, "
            "reserved, borrowed, lent, nominal, pending_demand, pending_workloads, "
            "admitted_workloads, source"
        )
        buffer = io.StringIO()
        for window in range(1, WINDOWS + 1):
            end = (HOUR + window * WINDOW).isoformat()
            for pk, _name in queues:
                nominal = 4 * (1 + pk % 8)
                borrowed = pk % 3 if pk % 5 == 0 else 0
                lent = pk % 4 if pk % 7 == 0 else 0
                pending = rng.choice((0, 0, 0, 1, 2, 8))
                buffer.write(
                    f"{pk}\th100\tnvidia.com/gpu\t{end}\t60\t{nominal + borrowed}\t"
                    f"{nominal + borrowed}\t{borrowed}\t{lent}\t{nominal}\t{pending}\t"
                    f"{1 if pending else 0}\t3\tapi\n"
                )
        with cursor.cursor.copy(
            f"COPY {ClusterQueueSample._meta.db_table} ({sample_columns}) FROM STDIN"
        ) as copy:
            copy.write(buffer.getvalue())
        for table in ("ledger_usagefact", "ledger_usageholding", "ledger_usagewindow"):
            cursor.execute(f"VACUUM ANALYZE {table}")
        cursor.execute(f"VACUUM ANALYZE {ClusterQueueSample._meta.db_table}")
    print(f"{name}: loaded {rows:,} usage rows in {time.perf_counter() - started:.1f} s")
    return cluster.pk, rows


# --- Measurement --------------------------------------------------------------------------------


def backend_cpu() -> float | None:
    """CPU seconds of this connection's PostgreSQL backend (same host only)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # Fields 14 and 15 of /proc/<pid>/stat (utime, stime), counted after the command name.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def snapshot(cluster_id: int) -> dict[tuple, tuple]:
    from ledger.models import HourlyRollup

    figures = [
        field.attname
        for field in HourlyRollup._meta.concrete_fields
        if field.get_internal_type() == "FloatField"
    ]
    rows = HourlyRollup.objects.filter(cluster_id=cluster_id, hour=HOUR).values_list(
        "scope", "key", "flavor", "gpu_model", "team_id", "cluster_queue_id", "workload_id",
        "windows", *figures,
    )  # fmt: skip
    return {row[:4]: row[4:] for row in rows}


def differences(expected: dict[tuple, tuple], actual: dict[tuple, tuple]) -> int:
    import math

    if expected.keys() != actual.keys():
        return len(expected.keys() ^ actual.keys())
    wrong = 0
    for identity, values in expected.items():
        other = actual[identity]
        if values[:4] != other[:4] or not all(
            math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
            for a, b in zip(values[4:], other[4:], strict=True)
        ):
            wrong += 1
    return wrong


def measure(cluster_id: int, runs: int, path: str) -> dict[str, float]:
    from ledger import rollup
    from ledger.rollup import postgres

    saved = postgres.FAST_PATH_VENDORS
    postgres.FAST_PATH_VENDORS = saved if path == "fast" else ()
    walls, cpus, backends = [], [], []
    written = 0
    try:
        for _ in range(runs):
            pg_before = backend_cpu()
            cpu_before = time.process_time()
            started = time.perf_counter()
            written = rollup.roll_up_hour(cluster_id, HOUR)
            walls.append(time.perf_counter() - started)
            cpus.append(time.process_time() - cpu_before)
            pg_after = backend_cpu()
            if pg_before is not None and pg_after is not None:
                backends.append(pg_after - pg_before)
    finally:
        postgres.FAST_PATH_VENDORS = saved
    return {
        "wall_min": min(walls),
        "wall_median": statistics.median(walls),
        "cpu": statistics.median(cpus),
        "backend_cpu": statistics.median(backends) if backends else float("nan"),
        "rows": written,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--sizes", default="5000,50000", help="GPUs per cluster, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--path", choices=("fast", "portable", "both"), default="both")
    parser.add_argument("--reload", action="store_true", help="regenerate the data")
    parser.add_argument(
        "--small",
        action="store_true",
        help="the same steps at a scale that takes seconds (tests/bench/test_benches.py runs it)",
    )
    args = parser.parse_args()
    if args.small:
        # A cluster of its own (its name carries the size): a full run's data is left alone.
        args.sizes, args.runs = "200", 1
        globals().update(QUEUES=50, COHORTS=10, IMPLICIT_COHORTS=2)
    setup_django(args.database_url)
    from django.db import connection

    paths = ("portable", "fast") if args.path == "both" else (args.path,)
    print(f"PostgreSQL: {connection.cursor().connection.info.server_version}")
    for size in (int(value) for value in args.sizes.split(",")):
        cluster_id, rows = load(size, args.reload)
        results = {}
        for path in paths:
            load_before = os.getloadavg()
            result = measure(cluster_id, args.runs, path)
            load_after = os.getloadavg()
            results[path] = snapshot(cluster_id)
            print(
                f"{size:>6,} GPUs, {rows:>9,} usage rows, {path:<8}: "
                f"wall min {result['wall_min']:.2f} s, median {result['wall_median']:.2f} s; "
                f"CPU median: process {result['cpu']:.2f} s + backend "
                f"{result['backend_cpu']:.2f} s; {result['rows']:,} rollup rows; load average "
                f"{load_before[0]:.1f} before, {load_after[0]:.1f} after ({args.runs} runs)"
            )
        if len(results) == 2:
            wrong = differences(results["portable"], results["fast"])
            print(f"{size:>6,} GPUs: fast vs portable rows that differ: {wrong}")


if __name__ == "__main__":
    main()
