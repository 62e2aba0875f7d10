"""Benchmark: one collection window of a 50,000-GPU cluster from a real Prometheus into PostgreSQL.

    .venv/bin/python bench/collect.py [--small] [--gpus 50000] [--minutes 15]
        [--backfill-gpus 5000]
        [--queues 1000] [--database NAME] [--no-backfill] [--work DIR] [--rounds 3]
        [--compare-with CHECKOUT [--alternations N]]
        [--deep [--deep-hours 24]] [--load promtool|remote-write] [--load-only]

1. Generates the fleet (bench/_fleet.py: DCGM exporter series with exported_* pod labels, 6
   fields, 30 s scrape interval, plus kube-state-metrics for the pods) as an OpenMetrics backfill
   and imports it with promtool; or, with ``--load remote-write``, streams the very same series
   and values into a Prometheus started with its remote-write receiver (bench/_remote_write.py)
   and waits until count queries find every sample.
2. Starts Prometheus on it (loopback, temp dir) and a fresh PostgreSQL database.
3. In a fresh child process (so peak RSS is the collection's alone): times the same queries as a
   collection window fetched raw, undecoded (the floor: Prometheus alone), then one window end to
   end through ``Collector.run`` (queries + parse + build + write), reported without and with the
   hourly rollup.
   With ``--queues N`` (default 1,000) the history also holds Kueue's ClusterQueue gauges of N
   queues, and the window is run alternately without and with the Kueue queries (``--rounds``
   each, best of them reported), each run writing the window's Kueue samples afresh; the CPU of
   the collector's Kueue steps is reported too.
   ``--compare-with CHECKOUT`` runs step 3 (without the floor) alternately on another checkout's
   code and on this one, against the same Prometheus: before/after under the same load.
4. Backfills N minutes of a 5,000-GPU cluster window by window and extrapolates to 24 h.

``--deep`` measures the deep backfill instead (bench/_collect_deep.py): ``--deep-hours`` hours of
a ``--backfill-gpus`` fleet straight into hourly rollups.

``--load remote-write`` is for fleets whose text would not fit: a day at 50,000 GPUs is ~1 G
samples, ~290 GB of OpenMetrics and hours of promtool, but streams as ~6 GB of compressed
protobuf. Its TSDB is kept in ``--work`` (``tsdb-rw-<gpus>-<queues>-<minutes>m``, marked loaded
when complete) and reused by a later run. ``--load-only`` loads ``--backfill-gpus`` GPUs x
``--deep-hours`` hours (with ``--queues``) the ``--load`` way, prints the cost (wall, CPU of this
process and of Prometheus or promtool, TSDB size, Prometheus RSS) and stops. The deep-backfill
day at 50,000 GPUs:

    .venv/bin/python bench/collect.py --deep --load remote-write --backfill-gpus 50000 \
        --deep-hours 24 --database gl_deep_bench --work /tmp/gl-deep-50k

Every figure is wall time plus the CPU time of this process, of its PostgreSQL backend and of
Prometheus (all on this machine): on a shared machine the wall time mostly measures the queue for
a core, the CPU times what the code costs. The collection deadline is lifted (3,600 s).

Targets: <= 10 s and <= 1 GB peak RSS per window at 50,000 GPUs, within 3x the floor;
Kueue's metrics add <= 10 % to a window at 50,000 GPUs and 1,000 ClusterQueues.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# The code measured: this checkout, or another one (--compare-with runs children on it).
BASE_DIR = Path(os.environ.get("GL_BENCH_CODE") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(BASE_DIR))

PG_ADMIN = "postgres://postgres@127.0.0.1:5432/postgres"
# A fixed, hour-aligned past moment: the data ends here; queries name their time explicitly.
END = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def write_fleet(path: Path, gpus: int, minutes: int, seed: int = 7, queues: int = 0) -> int:
    """The fleet of bench/_fleet.py as OpenMetrics text for promtool; returns samples written."""
    from _fleet import Fleet, write_openmetrics

    return write_openmetrics(Fleet(gpus, minutes, END, seed=seed, queues=queues), path)


def prepare_prometheus(
    work: Path, gpus: int, minutes: int, queues: int = 0, load: str = "promtool"
):
    """A Prometheus serving ``minutes`` of the fleet up to END, loaded by promtool (an
    OpenMetrics file imported into blocks) or by remote write (streamed into a running one)."""
    if load == "remote-write":
        from _remote_load import load_remote_write

        return load_remote_write(work, gpus, minutes, queues)[0]
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
    # Production settings (DEBUG off, no query log); a throwaway key for the scratch database.
    os.environ.setdefault("SECRET_KEY", "bench-collect-" + "x" * 40)
    # The bench measures the cost of a window, not the deadline a loaded machine would miss.
    os.environ.setdefault("GPULEDGER_COLLECT_DEADLINE_SECONDS", "3600")
    import django

    django.setup()
    from django.core.management import call_command

    # The migrations, not the models alone: the usage view and the partitioned fact table are
    # made by them.
    call_command("migrate", verbosity=0)


def peak_rss_mib() -> float:
    """The peak RSS of this process or of the largest of its ended child processes."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024


def own_cpu() -> float:
    """CPU seconds of this process (all threads) and of its ended child processes (a deep
    backfill's worker processes)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` of this machine has used; None if unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # Fields 14 and 15 of /proc/<pid>/stat (utime, stime), counted after the command name.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Cost:
    """One measured run: wall time and the CPU of this process (all its threads), of the
    PostgreSQL backend serving it and of Prometheus (both local here; None when not)."""

    wall: float
    cpu: float
    backend_cpu: float | None
    prometheus_cpu: float | None

    def as_dict(self) -> dict[str, float | None]:
        return asdict(self)


class CostMeter:
    """Measures a block's ``Cost``; on a loaded machine the CPU figures are what the code costs,
    the wall time mostly how long it queued for a core."""

    def __init__(self, prometheus_pid: int | None) -> None:
        self.prometheus_pid = prometheus_pid

    def backend_pid(self) -> int:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    def measure(self, work: Callable[[], object]) -> tuple[Cost, object]:
        backend = self.backend_pid()
        prometheus = self.prometheus_pid
        before = (
            time.perf_counter(),
            own_cpu(),
            process_cpu(backend),
            process_cpu(prometheus) if prometheus else None,
        )
        answer = work()
        after = (
            time.perf_counter(),
            own_cpu(),
            process_cpu(backend),
            process_cpu(prometheus) if prometheus else None,
        )

        def delta(index: int) -> float | None:
            first, last = before[index], after[index]
            return None if first is None or last is None else last - first

        cost = Cost(
            wall=after[0] - before[0],
            cpu=after[1] - before[1],
            backend_cpu=delta(2),
            prometheus_cpu=delta(3),
        )
        return cost, answer


class KueueStages:
    """CPU of the collector's Kueue steps in one run: decoding the Kueue answers (in the query
    threads), routing them, building the samples, and writing them (with its PostgreSQL CPU).
    Patches ``ledger.collector``'s names and the client's ``query``; the figures are per run."""

    STEPS = ("query_decode", "route", "build", "write", "write_backend")

    def __init__(self, client: Any, backend_pid: Callable[[], int]) -> None:
        import threading

        import ledger.collector as collector
        from quotas.constants import KUEUE_QUERIES

        self.figures = dict.fromkeys(self.STEPS, 0.0)
        lock = threading.Lock()
        kueue = set(KUEUE_QUERIES.values())
        query = client.query

        def timed_query(promql: str, at: object) -> object:
            started = time.thread_time()
            try:
                return query(promql, at)
            finally:
                if promql in kueue:
                    with lock:
                        self.figures["query_decode"] += time.thread_time() - started

        client.query = timed_query
        for name, step in (
            ("kueue_answers", "route"),
            ("read_window", "route"),
            ("samples_of", "build"),
            ("write_metric_samples", "write"),
        ):
            setattr(collector, name, self._timed(getattr(collector, name), step, backend_pid))

    def _timed(
        self, function: Callable[..., Any], step: str, backend_pid: Callable[[], int]
    ) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            backend = process_cpu(backend_pid()) if step == "write" else None
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.figures[step] += time.process_time() - started
                after = process_cpu(backend_pid()) if step == "write" else None
                if backend is not None and after is not None:
                    self.figures["write_backend"] += after - backend

        return timed

    def take(self) -> dict[str, float]:
        """This run's figures; the next run starts from zero."""
        figures = dict(self.figures)
        self.figures = dict.fromkeys(self.STEPS, 0.0)
        return figures


def best(costs: list[Cost]) -> dict[str, float | None]:
    """Best of several runs, per figure (each figure's minimum: the least-disturbed run)."""
    figures: dict[str, float | None] = {}
    for name in ("wall", "cpu", "backend_cpu", "prometheus_cpu"):
        values = [getattr(cost, name) for cost in costs if getattr(cost, name) is not None]
        figures[name] = min(values) if values else None
    return figures


def measure_window(
    url: str,
    database_url: str,
    queues: int = 0,
    prometheus_pid: int | None = None,
    rounds: int = 3,
    floor: bool = True,
) -> dict:
    """Child process: floor, then one window end to end, then the rollup; with ``queues``, the
    window alternately without and with Kueue's queries, ``rounds`` times each."""
    setup_django(database_url)
    from fleet import constants as c
    from fleet.choices import IngestSource
    from fleet.models import Cluster, CollectionCursor
    from fleet.prometheus import PrometheusClient
    from ledger.collector import KUEUE, Collector, window_queries
    from ledger.models import GpuUsage
    from ledger.rollup import roll_up_hour
    from quotas.models import ClusterQueue, ClusterQueueSample

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
    meter = CostMeter(prometheus_pid)
    stages = KueueStages(client, meter.backend_pid)

    def raw(promql: str) -> int:
        return len(client.fetch_raw("/api/v1/query", {"query": promql, **params}))

    def concurrently(promqls: list[str]) -> int:
        with ThreadPoolExecutor(c.QUERY_CONCURRENCY) as pool:
            return sum(pool.map(raw, promqls))

    floors: list[Cost] = []
    sizes = 0
    floor_sequential = None
    if floor:
        for _ in range(3):
            cost, answer = meter.measure(lambda: concurrently(list(queries.values())))
            floors.append(cost)
            sizes = int(answer)  # type: ignore[call-overload]
        floor_sequential = meter.measure(lambda: [raw(q) for q in queries.values()])[0]
    kueue_floor = [
        meter.measure(lambda: concurrently(list(kueue_queries.values())))[0] for _ in range(rounds)
    ]

    kueue_stages: list[dict[str, float]] = []

    def window_run(with_kueue: bool, fresh: bool = True) -> tuple[Cost, int]:
        CollectionCursor.objects.update_or_create(
            cluster=cluster,
            source=IngestSource.DCGM,
            defaults={"last_window_end": window_end - timedelta(minutes=1)},
        )
        if fresh:
            # Untimed: the window's Kueue samples go, so a run with the Kueue queries writes all
            # of them (a live window's first write) and one without has none to delete.
            ClusterQueueSample.objects.filter(sampled_at=window_end).delete()
        collector = Collector(cluster, client=client)
        if not with_kueue:
            collector.queries = {
                n: q for n, q in collector.queries.items() if n not in kueue_queries
            }
        # Rollups timed on their own: patch them out of the window run.
        collector._roll_up = lambda hour, result, **_: None  # type: ignore[method-assign]
        now = window_end + timedelta(seconds=c.COLLECT_DELAY_SECONDS + 1)
        stages.take()
        cost, result = meter.measure(lambda: collector.run(now=now))
        if with_kueue and fresh:
            kueue_stages.append(stages.take())
        return cost, result.windows  # type: ignore[attr-defined]

    first, windows = window_run(with_kueue=True)
    # A re-run of the written window: usage rows replaced, Kueue samples already there.
    rerun, _ = window_run(with_kueue=True, fresh=False)
    # Alternately without and with Kueue's queries, best of ``rounds`` each.
    with_kueue: list[Cost] = []
    without_kueue: list[Cost] = []
    for _ in range(rounds):
        without_kueue.append(window_run(with_kueue=False)[0])
        with_kueue.append(window_run(with_kueue=True)[0])
    kueue_samples = ClusterQueueSample.objects.filter(sampled_at=window_end).count()
    rows = GpuUsage.objects.filter(cluster=cluster, window_end=window_end).count()
    rollup = meter.measure(lambda: roll_up_hour(cluster.pk, window_end - timedelta(minutes=1)))[0]
    return {
        "floor": best(floors) if floors else None,
        "floor_sequential": floor_sequential.as_dict() if floor_sequential else None,
        "answer_mib": sizes / 2**20,
        "window_first": first.as_dict(),
        "window_rerun": rerun.as_dict(),
        "windows": windows,
        "usage_rows": rows,
        "rollup": rollup.as_dict(),
        "peak_rss_mib": peak_rss_mib(),
        "kueue_queries": len(kueue_queries),
        "kueue_floor": best(kueue_floor),
        "with_kueue": best(with_kueue),
        "without_kueue": best(without_kueue),
        "with_kueue_runs": [cost.as_dict() for cost in with_kueue],
        "without_kueue_runs": [cost.as_dict() for cost in without_kueue],
        "kueue_samples": kueue_samples,
        # Per step, the least of the runs that wrote the window's Kueue samples.
        "kueue_stages": {
            step: min(run[step] for run in kueue_stages) for step in KueueStages.STEPS
        },
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


def child(kind: str, *args: str, code: Path | None = None) -> dict:
    """Run one measurement in a fresh process, on this checkout's code or on ``code``'s."""
    env = dict(os.environ)
    if code is not None:
        env["GL_BENCH_CODE"] = str(code)
    output = subprocess.run(
        [sys.executable, __file__, "--child", kind, *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=code or BASE_DIR,
        env=env,
    )
    if output.returncode != 0:
        raise SystemExit(f"child {kind} failed:\n{output.stderr[-4000:]}")
    return json.loads(output.stdout.strip().splitlines()[-1])


def seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def print_kueue(window: dict, queues: int, label: str = "") -> None:
    """The with/without Kueue figures of one window child."""
    with_k, without = window["with_kueue"], window["without_kueue"]
    print(
        f"  Kueue metrics of {queues:,} ClusterQueues{label} ({window['kueue_queries']} queries, "
        f"{window['kueue_samples']:,} samples written per window), best of "
        f"{len(window['with_kueue_runs'])} alternating runs each:"
    )
    print("    figure            without      with   difference")
    for name, title in (
        ("wall", "wall"),
        ("cpu", "process CPU"),
        ("backend_cpu", "PostgreSQL CPU"),
        ("prometheus_cpu", "Prometheus CPU"),
    ):
        a, b = without[name], with_k[name]
        diff = "n/a" if a is None or b is None else f"{b - a:+.2f} s"
        share = f" ({b / a - 1:+.1%})" if a and b is not None else ""
        print(f"    {title:16s} {seconds(a):>9s} {seconds(b):>9s}   {diff}{share}")
    print(
        f"    the Kueue queries alone (raw answers): {seconds(window['kueue_floor']['wall'])} "
        f"wall, Prometheus CPU {seconds(window['kueue_floor']['prometheus_cpu'])}"
    )
    stages = window.get("kueue_stages")
    if stages:
        print(
            "    the collector's Kueue steps, CPU (least of the runs): decoding the answers "
            f"{stages['query_decode']:.3f} s, routing {stages['route']:.3f} s, building the "
            f"samples {stages['build']:.3f} s, writing them {stages['write']:.3f} s "
            f"+ PostgreSQL {stages['write_backend']:.3f} s"
        )


def main() -> None:
    args = arguments().parse_args()
    if args.small:
        args.gpus, args.minutes, args.queues, args.rounds = 200, 3, 10, 1
        args.backfill_gpus, args.backfill_minutes, args.deep_hours = 40, 2, 2
    if args.child:
        run_child(args.child)
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="gl-bench-collect-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"bench/collect.py (work dir {work})")
    if args.load_only:
        from _remote_load import load_only

        load_only(work, args.backfill_gpus, args.deep_hours * 60, args.queues, args.load)
        return
    if args.deep:
        deep(args, work)
        return
    window_and_backfill(args, work)


def arguments() -> argparse.ArgumentParser:
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
    parser.add_argument(
        "--rounds", type=int, default=3, help="Runs without and with the Kueue queries, each."
    )
    parser.add_argument(
        "--compare-with",
        type=Path,
        metavar="CHECKOUT",
        help="Also measure the window on another checkout's code (e.g. a worktree of the "
        "previous commit), alternating with this one on the same Prometheus; skips the floor.",
    )
    parser.add_argument(
        "--alternations", type=int, default=1, help="With --compare-with: rounds of both codes."
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help="the same steps at a scale that takes seconds (tests/bench/test_benches.py runs it)",
    )
    parser.add_argument("--deep", action="store_true", help="Measure the deep backfill only.")
    parser.add_argument("--deep-hours", type=int, default=24, help="Hours to deep-backfill.")
    parser.add_argument(
        "--load",
        choices=("promtool", "remote-write"),
        default="promtool",
        help="How Prometheus gets the fleet: an OpenMetrics file imported by promtool, or "
        "streamed into a running Prometheus by remote write (a day at 50,000 GPUs).",
    )
    parser.add_argument(
        "--load-only",
        action="store_true",
        help="Load --backfill-gpus GPUs x --deep-hours hours (and --queues) the --load way, "
        "print what it cost, and stop.",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    return parser


def run_child(argv: list[str]) -> None:
    """``--child KIND ...``: one measurement in this fresh process, printed as JSON."""
    kind, *rest = argv
    if kind == "deep":
        from _collect_deep import measure_deep

        url, database_url, hours, pid = rest
        print(json.dumps(measure_deep(url, database_url, int(hours), int(pid) or None)))
    elif kind == "window":
        url, database_url, queues, pid, rounds, floor = rest
        measured = measure_window(
            url, database_url, int(queues), int(pid) or None, int(rounds), floor == "floor"
        )
        print(json.dumps(measured))
    else:
        print(json.dumps(measure_backfill(rest[0], rest[1], int(rest[2]))))


def window_and_backfill(args: argparse.Namespace, work: Path) -> None:
    """The default mode: one collection window of ``--gpus`` GPUs, then a backfill."""
    server = prepare_prometheus(work, args.gpus, args.minutes, args.queues, args.load)
    process = getattr(server, "_process", None)
    pid = str(process.pid if process is not None else 0)

    def window_child(code: Path | None, floor: bool) -> dict:
        database = fresh_database(args.database)
        what = "floor" if floor else "no-floor"
        return child(
            "window", server.url, database, str(args.queues), pid, str(args.rounds), what, code=code
        )

    try:
        if args.compare_with:
            for round_number in range(args.alternations):
                for code, label in ((args.compare_with, "other"), (None, "this")):
                    started = time.strftime("%H:%M:%S", time.gmtime())
                    load = os.getloadavg()
                    measured = window_child(code, floor=False)
                    print(
                        f"  [{label} checkout, round {round_number + 1}, {started} UTC, load "
                        f"{load[0]:.1f}] window {seconds(measured['window_first']['wall'])} "
                        f"first run"
                    )
                    print_kueue(measured, args.queues, f" ({label} checkout)")
            return
        window = window_child(None, floor=True)
    finally:
        server.cleanup()
    first, floor = window["window_first"], window["floor"]
    ratio = first["wall"] / floor["wall"]
    print(
        f"  one window, {args.gpus:,} GPUs: {seconds(first['wall'])} first run (process CPU "
        f"{seconds(first['cpu'])}, PostgreSQL {seconds(first['backend_cpu'])}, Prometheus "
        f"{seconds(first['prometheus_cpu'])}), {seconds(window['window_rerun']['wall'])} re-run "
        f"(replace), {window['usage_rows']:,} usage rows, peak RSS "
        f"{window['peak_rss_mib']:.0f} MiB"
    )
    print(
        f"  floor (Prometheus alone, the same queries, raw bytes, "
        f"{window['answer_mib']:.1f} MiB): {seconds(floor['wall'])} concurrent, "
        f"{seconds(window['floor_sequential']['wall'])} sequential; ratio {ratio:.2f}x"
    )
    print(f"  hourly rollup of that hour: {seconds(window['rollup']['wall'])}")
    if args.queues:
        print_kueue(window, args.queues)
    if args.no_backfill:
        return

    server = prepare_prometheus(work, args.backfill_gpus, args.backfill_minutes + 5, load=args.load)
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


def deep(args: argparse.Namespace, work: Path) -> None:
    """``--deep``: the deep backfill of ``--deep-hours`` hours of a ``--backfill-gpus`` fleet."""
    from _collect_deep import report

    # The same fleet ``--load-only`` loads: the hours, with the Kueue history of ``--queues``.
    server = prepare_prometheus(
        work, args.backfill_gpus, args.deep_hours * 60, queues=args.queues, load=args.load
    )
    process = getattr(server, "_process", None)
    pid = str(process.pid if process is not None else 0)
    try:
        measured = child(
            "deep", server.url, fresh_database(args.database), str(args.deep_hours), pid
        )
    finally:
        server.cleanup()
    report(measured, args.backfill_gpus)


if __name__ == "__main__":
    main()
