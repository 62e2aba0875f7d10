"""Every benchmark under bench/ still runs: its ``--small`` mode, end to end, prints its figures.

The benches are scripts nobody imports, so nothing else notices when a model, a setting or a
function they call changes. Each runs here as ``make bench`` runs it, in a subprocess, on a
database of its own named after the test database (``<name>_bench_<bench>``), cloned from a
migrated template so that no bench pays for the migrations; the Redis database is the test
settings' own. The benches measure PostgreSQL (COPY, its planner, its backends' CPU), so they run
in the PostgreSQL suite only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings

from tests.prometheus_server import require_binary

ROOT = Path(__file__).resolve().parents[2]
DATABASE = settings.DATABASES["default"]
# Read before pytest-django renames the connection's database to the test one.
BASE_NAME = str(DATABASE["NAME"])
# Each bench ends by this even on a loaded machine; a hung one fails instead of blocking the suite.
TIMEOUT_SECONDS = 300

on_postgresql = pytest.mark.postgresql(
    reason="the benches measure PostgreSQL (COPY, its planner, its backends' CPU): they run in "
    "the PostgreSQL suite",
)


@dataclass(frozen=True)
class Bench:
    script: str
    # How the script is told its database: an option taking a URL or a bare name, or the
    # DATABASE_URL environment variable.
    database: str
    # Figures its small run must print (one pattern per line it must contain).
    figures: tuple[str, ...]
    extra: tuple[str, ...] = ()
    # The bench builds its own tables (syncdb in a database it drops and re-creates).
    own_tables: bool = False
    # Programs it starts (skipped without them, failed under CI=true).
    binaries: tuple[str, ...] = ()
    # It keeps its files in a work directory it is given (else a temporary one it leaves behind).
    work_dir: bool = False

    @property
    def variant(self) -> str:
        """What tells two runs of one script apart: its mode (``--deep``, ``--scheduler X``)."""
        if "--deep" in self.extra:
            return "deep"
        if "--scheduler" in self.extra:
            return self.extra[self.extra.index("--scheduler") + 1]
        return ""


BENCHES = [
    Bench(
        "ingest_pure",
        "env",
        (r"parse +\d+\.\d+ s .* usage rows", r"write +\d+\.\d+ s", r"COPY floor: [\d,]+ rows"),
        extra=("--keep",),
    ),
    Bench(
        "collect",
        "--database",
        (
            r"one window, 200 GPUs: \d+\.\d+ s first run",
            r"floor \(Prometheus alone.*ratio \d+\.\d+x",
            r"backfill 40 GPUs: \d+ windows in \d+\.\d+ s",
        ),
        own_tables=True,
        binaries=("prometheus", "promtool"),
        work_dir=True,
    ),
    Bench(
        "collect",
        "--database",
        (
            r"deep backfill 40 GPUs x 2 h: \d+\.\d+ s wall; CPU: process \d+\.\d+ s, "
            r"PostgreSQL \d+\.\d+ s, Prometheus \d+\.\d+ s; [\d,]+ rollup rows",
            r"30 days \(720 h\) at 40 GPUs extrapolated: \d+\.\d+ h wall",
        ),
        extra=("--deep",),
        own_tables=True,
        binaries=("prometheus", "promtool"),
        work_dir=True,
    ),
    Bench(
        "serving_hours",
        "--database",
        (
            r"one window, 200 GPUs: \d+\.\d+ s wall",
            r"serving hour, 20 pods \(1 workloads\): \d+\.\d+ s wall",
            r"serving hour / window: CPU \d+\.\d+%, wall \d+\.\d+% .*spread over",
        ),
        own_tables=True,
        binaries=("prometheus", "promtool"),
        work_dir=True,
    ),
    Bench(
        "rollup",
        "--database-url",
        (
            r"200 GPUs, +[\d,]+ usage rows, portable: wall min \d+\.\d+ s",
            r"200 GPUs, +[\d,]+ usage rows, fast +: wall min \d+\.\d+ s",
            r"fast vs portable rows that differ: (0|\[\])$",
        ),
    ),
    Bench(
        "sync",
        "env",
        (
            r"full sync: \d+\.\d+ s wall.*success",
            r"incremental sync: \d+\.\d+ s from \d+ upstream changes",
        ),
        extra=("--keep",),
    ),
    Bench(
        "sync",
        "env",
        (
            r"fake API server: \{'Queue': 10, 'parent Queue': 11, 'PodGroup': 500, 'Pod': 200",
            r"full sync: \d+\.\d+ s wall.*success",
            r"incremental sync: \d+\.\d+ s from 10 upstream changes .*\(holding workloads "
            r"100 -> 110\)",
        ),
        extra=("--keep", "--scheduler", "volcano"),
    ),
    Bench(
        "sync",
        "env",
        (
            r"fake API server: \{'Queue': 10, 'parent Queue': 10, 'PodGroup': 500, 'Pod': 200",
            r"full sync: \d+\.\d+ s wall.*success",
            r"incremental sync: \d+\.\d+ s from 10 upstream changes .*\(holding workloads "
            r"100 -> 110\)",
        ),
        extra=("--keep", "--scheduler", "kai"),
    ),
    Bench(
        "pages",
        "--database-url",
        (r"^overview .* \d+\.\d+ +\d+\.\d+ +HTTP 200", r"^\d+ URLs, \d+ above p95 .*, 0 not 200"),
    ),
    Bench(
        "pages_usage",
        "--database-url",
        (
            r"^chart gpu activity 24h .* \d+\.\d+ +HTTP 200",
            r"^\d+ URLs, \d+ above p95 .*, 0 not 200",
        ),
    ),
    Bench(
        "chargeback",
        "--database-url",
        (
            r"^30d team json +p50 \d+\.\d+s +p95 \d+\.\d+s +rows [1-9]",
            r"^365d workload csv +p50 \d+\.\d+s",
            r"ratio chargeback 30d by team p50 / PromQL p50 = \d+\.\d+",
        ),
        binaries=("prometheus", "promtool"),
    ),
    Bench(
        "queue_levels",
        "--database-url",
        (
            r"^[\d,]+ admission records, 20 ClusterQueues, 30 days",
            r"^30d by day, cluster_queue +\d+\.\d+ +\d+\.\d+ +HTTP 200",
            r"^\d+ URLs, \d+ above p95 .*, 0 not 200",
        ),
    ),
    Bench(
        "storage",
        "--database-url",
        (
            r"^200 GPUs x 60 windows: [\d,]+ GPU-windows in \d+ s",
            r"^total +[\d,]+ +\d+\.\d$",
            r"^prune_usage dropped the day \([\d,]+ rows\) in \d+\.\d+ s",
        ),
        own_tables=True,
    ),
    Bench(
        "alerts",
        "--database-url",
        (
            r"one window, 400 GPUs .* median \d+\.\d+ s",
            r"backfill, 80 GPUs × 1 h \(60 windows\): \d+\.\d+ s",
        ),
    ),
    Bench(
        "metrics",
        "--database-url",
        (
            r"loaded 1 clusters × 5,000 GPUs in \d+ s",
            r"scrape: median \d+ ms, worst \d+ ms over \d+ scrapes; \d+ queries",
        ),
    ),
]


def database_url(name: str) -> str:
    user = quote(str(DATABASE.get("USER") or "postgres"))
    password = DATABASE.get("PASSWORD")
    auth = f"{user}:{quote(str(password))}" if password else user
    host, port = DATABASE.get("HOST") or "127.0.0.1", DATABASE.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{name}"


def admin(sql: str, database: str = "postgres") -> list[tuple]:
    import psycopg

    with psycopg.connect(database_url(database), autocommit=True) as admin_connection:
        cursor = admin_connection.execute(sql)
        return cursor.fetchall() if cursor.description else []


def migrated(name: str) -> bool:
    """Whether database ``name`` has exactly the migrations on disk applied."""
    from django.db.migrations.loader import MigrationLoader

    if not admin(f"SELECT 1 FROM pg_database WHERE datname = '{name}'"):
        return False
    try:
        applied = set(admin("SELECT app, name FROM django_migrations", database=name))
    except Exception:  # no django_migrations table: never migrated
        return False
    on_disk = set(MigrationLoader(None, ignore_no_migrations=True).disk_migrations)
    return applied == on_disk


def bench_environment(url: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "SECRET_KEY", "DEBUG"}
    }
    env.update(
        DATABASE_URL=url,
        # This process's Redis database, and a cache of each bench's own.
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        CACHE_URL="locmem://",
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture(scope="module")
def template() -> str:
    """A migrated database the benches' databases are cloned from, kept between runs while its
    migrations are the ones on disk."""
    name = f"{BASE_NAME}_bench_template"
    url = database_url(name)
    command = [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"]
    env = {**bench_environment(url), "DJANGO_SETTINGS_MODULE": "config.settings_test"}
    if migrated(name):
        return name
    for attempt in range(2):
        if attempt:
            # Migrations of another branch, or a half-migrated run: start over.
            admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        try:
            admin(f'CREATE DATABASE "{name}"')
        except Exception as exc:  # psycopg.errors.DuplicateDatabase: kept from a previous run
            if "already exists" not in str(exc):
                raise
        result = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS
        )
        if result.returncode == 0:
            return name
    pytest.fail(f"migrating {name} failed:\n{result.stderr[-3000:]}")


@pytest.mark.integration
@on_postgresql
@pytest.mark.parametrize(
    "bench",
    BENCHES,
    ids=lambda bench: bench.script + (f"-{bench.variant}" if bench.variant else ""),
)
def test_small_mode_runs_end_to_end_and_prints_its_figures(template, bench, tmp_path):
    for binary in bench.binaries:
        require_binary(binary)
    name = f"{BASE_NAME}_bench_{bench.script}{f'_{bench.variant}' if bench.variant else ''}"
    url = database_url(name)
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    if not bench.own_tables:
        admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    command = [sys.executable, f"bench/{bench.script}.py", "--small", *bench.extra]
    if bench.database == "--database":
        command += ["--database", name]
    elif bench.database == "--database-url":
        command += ["--database-url", url]
    if bench.work_dir:
        command += ["--work", str(tmp_path)]

    started = time.monotonic()
    result = subprocess.run(
        command,
        cwd=ROOT,
        env=bench_environment(url),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )
    elapsed = time.monotonic() - started
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    output = f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
    assert result.returncode == 0, f"bench/{bench.script}.py --small failed:\n{output}"
    missing = [
        pattern
        for pattern in bench.figures
        if not re.search(pattern, result.stdout, flags=re.MULTILINE)
    ]
    assert missing == [], f"figures not printed ({elapsed:.0f} s):\n{output}"


def test_every_bench_script_is_run_here_or_named_as_a_tool():
    # screenshots.py drives a running server to take the docs' pictures: a tool, not a bench.
    tools = {"screenshots"}
    scripts = {path.stem for path in (ROOT / "bench").glob("*.py") if not path.stem.startswith("_")}

    assert scripts - tools == {bench.script for bench in BENCHES}


def test_make_bench_runs_every_bench():
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]

    assert sorted(re.findall(r"bench/(\w+)\.py", target)) == sorted(b.script for b in BENCHES)
