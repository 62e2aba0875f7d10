"""``simulate --follow`` (``make demo``): the simulated fleet keeps moving, one window a minute
through the real ingest path, so the demo does not turn "Stale"; it stops cleanly on SIGTERM
and when the process that started it is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db.models import Max

from fleet.choices import IngestSource, IngestStatus
from fleet.freshness import current_freshness
from fleet.models import IngestRun
from ledger.models import GpuUsage, HourlyRollup
from quotas.models import ClusterQueueSample
from serving.models import ServingHour
from tests.databases import child_database_url

ROOT = Path(__file__).resolve().parents[2]
END = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)
# Six hourly windows of history: what the follower goes on from (each window written costs a
# few tenths of a second; the live windows are a minute each whatever the history's step).
HISTORY = ["--days", "0.25", "--step", "3600", "--seed", "5"]
# The history of a follower started in a process of its own: nine one-minute windows, so that
# it ends on the minute the test picks (a coarser step would end it at the step before, and the
# follower would first catch up every minute since).
MINUTE_HISTORY = ["--days", "0.00625", "--step", "60", "--seed", "5"]
# How often the tests look at the database or a process while they wait for a follower.
POLL_SECONDS = 0.1


def _simulate(*args: str, history: list[str] = HISTORY) -> None:
    call_command("simulate", *history, *args, verbosity=0)


def _live_runs() -> list[IngestRun]:
    return list(
        IngestRun.objects.filter(source=IngestSource.SIMULATION, window_end__gt=END).order_by(
            "window_end"
        )
    )


@pytest.mark.django_db
def test_following_writes_a_window_a_minute_through_the_ingest_path(time_machine) -> None:
    _simulate("--end", END.isoformat())
    history_rows = GpuUsage.objects.count()
    assert history_rows > 0
    # Three minutes and a bit after the history's end, the stale limit (10 min) not yet reached
    # by the history alone 15 minutes later.
    time_machine.move_to(END + timedelta(minutes=3, seconds=20), tick=False)

    _simulate("--end", END.isoformat(), "--follow", "--max-windows", "3")

    runs = _live_runs()
    minute = timedelta(minutes=1)
    assert [(r.window_start, r.window_end) for r in runs] == [
        (END + i * minute, END + (i + 1) * minute) for i in range(3)
    ]
    assert {r.status for r in runs} <= {IngestStatus.SUCCESS, IngestStatus.PARTIAL}
    # The history was replayed in memory, not written again.
    assert IngestRun.objects.filter(source=IngestSource.SIMULATION).count() == 4
    assert GpuUsage.objects.filter(window_end__lte=END).count() == history_rows
    # Each live window went through the DCGM and Kueue writers and the roll-up.
    for run in runs:
        assert run.window_end is not None
        assert GpuUsage.objects.filter(window_end=run.window_end).exists()
        assert ClusterQueueSample.objects.filter(sampled_at=run.window_end).exists()
    assert HourlyRollup.objects.filter(hour=END).exists()

    # Fifteen minutes on, the history alone would be stale; with the live windows it is not.
    time_machine.move_to(END + timedelta(minutes=12), tick=False)
    sources = [s for s in current_freshness().sources if s.source == IngestSource.SIMULATION]
    assert sources and not any(s.stale for s in sources)


@pytest.mark.django_db
def test_a_restarted_follower_goes_on_from_the_last_window(time_machine) -> None:
    _simulate("--end", END.isoformat())
    time_machine.move_to(END + timedelta(minutes=2, seconds=5), tick=False)
    _simulate("--end", END.isoformat(), "--follow", "--max-windows", "2")
    time_machine.move_to(END + timedelta(minutes=4, seconds=5), tick=False)
    _simulate("--end", END.isoformat(), "--follow", "--max-windows", "2")

    ends = [r.window_end for r in _live_runs()]
    assert ends == [END + timedelta(minutes=m) for m in (1, 2, 3, 4)]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
        "DATABASE_URL": child_database_url(),
    }


def _follower_args(end: datetime) -> list[str]:
    return [sys.executable, "manage.py", "simulate", *MINUTE_HISTORY, "--end", end.isoformat()]


def _wait_for_live_window(end: datetime, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        newest = IngestRun.objects.filter(source=IngestSource.SIMULATION).aggregate(
            end=Max("window_end")
        )["end"]
        if newest is not None and newest > end:
            return
        time.sleep(POLL_SECONDS)
    raise AssertionError("the follower wrote no live window")


@pytest.mark.django_db
def test_following_collects_each_serving_hour_as_it_ends(time_machine) -> None:
    # The history (three quarter-hour windows) ends at 11:45; the serving hour from 11:00 is not
    # over yet.
    history = ["--days", str(45 / (24 * 60)), "--step", "900", "--seed", "5"]
    history_end = END - timedelta(minutes=15)
    _simulate("--end", history_end.isoformat(), history=history)
    last_hour = END - timedelta(hours=1)
    assert not ServingHour.objects.filter(hour=last_hour).exists()
    time_machine.move_to(END + timedelta(minutes=1, seconds=5), tick=False)

    # Fifteen live windows: the last ends at 12:00, the hour's end.
    _simulate("--end", history_end.isoformat(), "--follow", "--max-windows", "15", history=history)

    assert sorted(str(row.workload) for row in ServingHour.objects.filter(hour=last_hour)) == [
        "ml-serving/Deployment/vllm-llama-8b",
        "ml-serving/Deployment/vllm-qwen-chat",
    ]


@pytest.mark.django_db(transaction=True)
def test_the_follower_stops_cleanly_on_sigterm() -> None:
    # A history that ended two minutes ago: the follower catches up at once.
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    _simulate("--end", end.isoformat(), history=MINUTE_HISTORY)
    follower = subprocess.Popen(
        [*_follower_args(end), "--follow"],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for_live_window(end)
        follower.send_signal(signal.SIGTERM)
        output, _ = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, output
    assert "Stopped following after" in output
    assert not IngestRun.objects.filter(status=IngestStatus.FAILED).exists()


@pytest.mark.django_db(transaction=True)
def test_the_follower_stops_when_the_process_that_started_it_is_gone() -> None:
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    _simulate("--end", end.isoformat(), history=MINUTE_HISTORY)
    command = " ".join([*_follower_args(end), "--follow"])
    # A shell that starts the follower in the background, as make demo does, then dies.
    shell = subprocess.Popen(
        ["bash", "-c", f"{command} >/dev/null 2>&1 & echo $!; sleep 600"],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert shell.stdout is not None
    follower_pid = int(shell.stdout.readline())
    try:
        _wait_for_live_window(end)
        shell.kill()
        shell.wait(timeout=10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(follower_pid):
            time.sleep(POLL_SECONDS)
        assert not _alive(follower_pid)
    finally:
        if _alive(follower_pid):
            os.kill(follower_pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie not yet reaped by init counts as gone.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_make_demo_runs_the_follower_with_the_server_and_stops_it_with_it() -> None:
    recipe = subprocess.run(
        ["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    history = next(line for line in recipe.splitlines() if "--reset" in line)
    follower = next(line for line in recipe.splitlines() if "--follow" in line)
    # The same fleet: seed, days and end shared by the history and the follower.
    shared = history.split("simulate", 1)[1].replace("--reset", "").split()
    assert all(arg in follower for arg in shared)
    assert "--end" in shared
    assert "& follower=$!" in follower
    assert "trap 'kill -TERM $follower" in recipe
    assert recipe.index("--follow") < recipe.index("runserver")
