"""Kill -9 at every phase of a collection, run it again, and get the rollups of a clean run.

A real Prometheus holds the generated "alpha" fleet (tests/fleet/conftest.py: two nodes, MIG, a
time-sliced GPU, fallback activity, a pod without telemetry). The run to kill is
``manage.py collect_metrics --start --end`` (a backfill) or a live ``Collector.run``, in a
process of its own on this test's database; ``GPULEDGER_FAILPOINT`` names the point where it dies
with SIGKILL (core.failpoints). Each such process is forked from one that set Django up once for
the module (``FORK_SERVER``), so a kill point costs its run, not a Django start. The rerun, in
this process, takes the dead run's lease over once it expires (LEASE_SECONDS, renewed every third
of it by the dead run's heartbeat while it lived), and then every HourlyRollup row, of every scope
and every figure, must equal the rows of an uninterrupted run of the same windows.

The range, (T0 + 45 min, T0 + 75 min], is 30 windows: 15 in hour T0 and 15 in hour T0 + 1 h, so a
kill can land in a complete hour, in the hour still being collected, or in either's rollup.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from fleet import constants as c
from fleet.choices import IngestSource
from fleet.models import Cluster, CollectionCursor
from ledger.choices import RollupScope
from ledger.collector import Collector
from ledger.models import HourlyRollup, RollupHour
from tests.databases import child_database_url
from tests.fleet.conftest import T0, WINDOW_SECONDS

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
# Shorter than the 3 s that GPULEDGER_LEASE_SECONDS accepts from the environment: the fork server
# sets it in its settings directly. Nothing competes with the run to kill while it lives, so a
# renewal its heartbeat makes late costs nothing; the rerun waits this long after each kill.
LEASE_SECONDS = 1.0
START = T0 + timedelta(minutes=45)
END = T0 + timedelta(minutes=75)
WINDOWS = 30
# A live run at this moment collects every window up to END (windows close 30 s late).
LIVE_NOW = END + timedelta(seconds=c.COLLECT_DELAY_SECONDS + 1)
IDENTITY = ("scope", "key", "hour", "flavor", "gpu_model")
# Every column of a rollup row but its ids and timestamps: all figures, peaks, window counts.
NOT_FIGURES = {"id", "cluster_id", "team_id", "cluster_queue_id", "workload_id", "updated_at"}
FIGURES = tuple(
    field.attname
    for field in HourlyRollup._meta.concrete_fields
    if field.attname not in {*IDENTITY, *NOT_FIGURES}
)
FLEET_KEY = "<fleet>"

# Sets Django up once, then forks one child per line read: {"failpoint", "argv"} runs
# ``collect_metrics argv`` (what ``manage.py collect_metrics argv`` runs), {"failpoint", "live":
# [cluster, now]} a live ``Collector.run``. It answers each line with how the child ended.
FORK_SERVER = """
import json
import os
import sys
import traceback
from datetime import datetime

import django

django.setup()
from django.conf import settings
from django.core.management import call_command, load_command_class

from fleet.models import Cluster
from ledger.collector import Collector

settings.GPULEDGER_LEASE_SECONDS = float(sys.argv[1])
load_command_class("ledger", "collect_metrics")


def run(job):
    os.environ["GPULEDGER_FAILPOINT"] = job["failpoint"]
    if "live" in job:
        name, now = job["live"]
        Collector(Cluster.objects.get(name=name)).run(now=datetime.fromisoformat(now))
    else:
        call_command("collect_metrics", *job["argv"])


for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1)
        os.dup2(log, 2)
        code = 0
        try:
            run(job)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    print(json.dumps({"signal": signal, "code": code}), flush=True)
"""

# (failpoint, hit): window n (1-30) is written by the n-th ``collect.write``; windows 1-15 are
# hour T0's. The first fetch is one window (an instant query: the fleet size is unknown yet), the
# second the 29 others. Hour T0 is rolled up when window 16 comes (the first rollup), hour
# T0 + 1 h after window 30 (the second).
BACKFILL_KILLS = [
    "collect.fetch:2",  # window 1 written, the other 29 fetched, none written
    "collect.write:8",  # inside window 8's transaction, its rows written
    "collect.advance:15",  # window 15 (hour T0's last): cursor moved, run recorded, no commit
    "collect.committed:15",  # window 15 committed, hour T0 not rolled up yet
    "rollup.compute:1",  # hour T0's rollup computed, old rows not yet replaced
    "rollup.insert:1",  # hour T0's new rows inserted, not committed (the bug report's case)
    "rollup.committed:1",  # hour T0's rollup committed, nothing after it
    "collect.write:23",  # inside a window of the hour still being collected
    "rollup.insert:2",  # the last hour's rollup, after every window was written
]
LIVE_KILLS = [
    "collect.write:8",
    "rollup.insert:1",
    "collect.committed:30",  # every window written, no rollup of the last hour yet
]

_clean: dict[str, list[tuple]] = {}


def snapshot(cluster: Cluster) -> list[tuple]:
    rows = HourlyRollup.objects.filter(cluster=cluster).values_list(*IDENTITY, *FIGURES)
    normalized = [
        (row[0], FLEET_KEY if row[1] == cluster.name else row[1], *row[2:]) for row in rows
    ]
    return sorted(normalized, key=lambda row: tuple(str(value) for value in row[:5]))


def clean_rollups(url: str) -> list[tuple]:
    """The rollups of an uninterrupted backfill of the range, from a cluster of their own."""
    if "rows" not in _clean:
        cluster = Cluster.objects.create(name="clean", prometheus_url=url)
        backfill(cluster)
        _clean["rows"] = snapshot(cluster)
        # both hours, every scope
        assert {row[2] for row in _clean["rows"]} == {T0, T0 + timedelta(hours=1)}
        assert {row[0] for row in _clean["rows"]} == set(RollupScope.values)
    return _clean["rows"]


def backfill(cluster: Cluster) -> str:
    out = StringIO()
    call_command(
        "collect_metrics",
        cluster=cluster.name,
        start=START.isoformat(),
        end=END.isoformat(),
        no_progress=True,
        stdout=out,
    )
    return out.getvalue()


# The history here is of January 2026: a retention that reaches it keeps the backfill on the
# per-window path (older hours would be deep-backfilled, ledger.deep), the path these tests kill.
PER_WINDOW_DAYS = 36500


@pytest.fixture(scope="module")
def fork_server(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        database_url = child_database_url()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
        "DATABASE_URL": database_url,
        "GPULEDGER_LEASE_HEARTBEAT": "true",
        "GPULEDGER_COLLECT_SECONDS": str(WINDOW_SECONDS),
        "GPULEDGER_USAGE_RETENTION_DAYS": str(PER_WINDOW_DAYS),
    }
    env.pop("GPULEDGER_FAILPOINT", None)
    server = subprocess.Popen(
        [sys.executable, "-c", FORK_SERVER, str(LEASE_SECONDS)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its group is the server and the run it forked
    )
    assert server.stdin is not None
    yield server
    server.stdin.close()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def run_until_killed(server: subprocess.Popen[str], job: dict, failpoint: str, log: Path) -> None:
    """Run ``job`` in a child of the fork server; it must die by SIGKILL at ``failpoint``."""
    stdin, stdout = server.stdin, server.stdout
    assert stdin is not None and stdout is not None
    stdin.write(json.dumps({**job, "failpoint": failpoint, "log": str(log)}) + "\n")
    stdin.flush()
    ready, _, _ = select.select([stdout], [], [], 120)
    if not ready:
        # the server and its child: no later test may read this run's answer
        os.killpg(server.pid, signal.SIGKILL)
        pytest.fail(f"{failpoint}: the run did not end within 120 s")
    ended = json.loads(stdout.readline())
    output = log.read_text()[-3000:] if log.exists() else ""
    assert ended["signal"] == 9, f"{failpoint} never fired ({ended}):\n{output}"


def retry_until_the_lease_expires(rerun):
    """The dead run's lease holds for up to LEASE_SECONDS after its last renewal."""
    deadline = time.monotonic() + LEASE_SECONDS + 10
    while True:
        try:
            result = rerun()
        except CommandError as exc:
            if "being collected" not in str(exc) or time.monotonic() > deadline:
                raise
        else:
            if getattr(result, "claimed", True):
                return result
            assert time.monotonic() < deadline, "the dead run's lease never expired"
        time.sleep(0.25)


def assert_same_rollups(actual: list[tuple], expected: list[tuple]) -> None:
    assert [row[:5] for row in actual] == [row[:5] for row in expected]
    for got, want in zip(actual, expected, strict=True):
        assert got[5:] == pytest.approx(want[5:], rel=1e-9, abs=1e-12), (got[:5], FIGURES)


@pytest.fixture(autouse=True)
def _collection_settings(settings):
    settings.GPULEDGER_COLLECT_SECONDS = WINDOW_SECONDS
    settings.GPULEDGER_CATCHUP_HOURS = 24
    settings.GPULEDGER_IDLE_THRESHOLD = 0.01
    settings.GPULEDGER_LEASE_SECONDS = LEASE_SECONDS
    settings.GPULEDGER_USAGE_RETENTION_DAYS = PER_WINDOW_DAYS


@pytest.mark.parametrize("failpoint", BACKFILL_KILLS)
def test_a_backfill_killed_at_any_phase_and_run_again_rolls_up_like_a_clean_run(
    alpha_prometheus, fork_server, tmp_path, failpoint
):
    expected = clean_rollups(alpha_prometheus.url)
    cluster = Cluster.objects.create(name="alpha", prometheus_url=alpha_prometheus.url)
    argv = ["--cluster", "alpha", "--no-progress"]
    argv += ["--start", START.isoformat(), "--end", END.isoformat()]

    run_until_killed(fork_server, {"argv": argv}, failpoint, tmp_path / "run.log")
    out = retry_until_the_lease_expires(lambda: backfill(cluster))

    assert "windows collected" in out
    assert_same_rollups(snapshot(cluster), expected)
    assert not RollupHour.objects.filter(cluster=cluster).dirty().exists()
    # and a third run finds nothing to do
    assert f"0 windows collected, {WINDOWS} already done" in backfill(cluster)
    assert_same_rollups(snapshot(cluster), expected)


@pytest.mark.parametrize("failpoint", LIVE_KILLS)
def test_a_live_run_killed_at_any_phase_and_run_again_rolls_up_like_a_clean_run(
    alpha_prometheus, fork_server, tmp_path, failpoint
):
    expected = clean_rollups(alpha_prometheus.url)
    cluster = Cluster.objects.create(name="alpha", prometheus_url=alpha_prometheus.url)
    CollectionCursor.objects.create(
        cluster=cluster, source=IngestSource.DCGM, last_window_end=START
    )

    job = {"live": ["alpha", LIVE_NOW.isoformat()]}
    run_until_killed(fork_server, job, failpoint, tmp_path / "run.log")
    retry_until_the_lease_expires(lambda: Collector(cluster).run(now=LIVE_NOW))

    assert_same_rollups(snapshot(cluster), expected)
    assert not RollupHour.objects.filter(cluster=cluster).dirty().exists()
    assert CollectionCursor.objects.get(cluster=cluster).last_window_end == END
