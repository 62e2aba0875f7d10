"""Write simulated windows through the real ingest path, and keep the demo fleet moving.

``ingest_window`` hands one window of the simulator's upstream answers (Kubernetes LISTs,
Kueue's metrics, the visibility API, DCGM and kube-state-metrics, and at each hour's end the
serving metrics through ``serving.collector.collect_hour``) to the same pure ingest functions
and writers the collectors use. ``follow`` does it once a minute, up to the current
minute, so ``make demo`` does not turn "Stale" after ``GPULEDGER_STALE_SECONDS``: each live
window leaves a successful ``IngestRun`` (source simulation), rolls its hours up and lets the
simulated Kueue admit, finish and preempt. It stops between windows on SIGTERM or SIGINT, or
when the process that started it is gone (``make demo`` stops it with the server).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import FrameType

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from alerts.overprovisioned import evaluate_serving
from core.timewindows import Window, floor_time
from demo.simulation import SCRAPE_SECONDS, FleetSimulator
from fleet.choices import IngestSource, IngestStatus
from fleet.constants import DCGM_METRICS
from fleet.ingest import IngestStats, WindowInput, build_window
from fleet.models import Cluster, IngestRun
from ledger.rollup import roll_up_range
from ledger.store import write_window
from quotas.ingest import build_gpu_queue_samples, build_snapshot, snapshot_from_lists
from quotas.ingest.metrics import build_metric_samples
from quotas.store import (
    metric_sample_context,
    write_metric_samples,
    write_queue_samples,
    write_snapshot,
)
from quotas.sync import pending_positions, write_pending_positions
from serving.collector import collect_hour

logger = logging.getLogger(__name__)

# One live window a minute: the demo's collection interval while it follows.
LIVE_SECONDS = 60
# A follower started long after its history catches up at most this much (older minutes are
# played in memory only, so the fleet's state is right but the gap shows as a gap).
CATCH_UP = timedelta(hours=1)


HOUR = timedelta(hours=1)
# Between windows the follower wakes at least this often to see whether the process that started
# it is gone: a check of its parent's pid, so it stops within a second of the server.
PARENT_CHECK_SECONDS = 1.0


@dataclass
class Written:
    rows: int = 0
    kube_skipped: int = 0
    stats: IngestStats = field(default_factory=IngestStats)
    # A serving hour was collected (the window ended an hour).
    serving_hour: bool = False


def ingest_window(
    cluster: Cluster, sim: FleetSimulator, window: Window, *, synced: bool, last: bool
) -> Written:
    """Move ``sim`` to ``window`` and write what the collectors would for it.

    ``synced``: the API server sync "runs" (queue samples and pending positions from it, not
    only Kueue's metrics); ``last``: write the Kueue snapshot even if nothing changed.
    """
    out = Written()
    sim.advance(window.start)
    snapshot = snapshot_from_lists(window.end, **sim.kube_lists(window.end))
    batch = build_snapshot(snapshot, settings.GPULEDGER_TEAM_LABELS)
    out.kube_skipped = batch.stats.skipped
    if sim.changed or last:
        write_snapshot(cluster, batch, snapshot.complete)
        sim.changed = False
    # Kueue's metrics for every window, the API server's status once the sync "runs" (it wins
    # where both exist): the backfill path of a fresh install.
    order, pools = metric_sample_context(cluster)
    metric = build_metric_samples(sim.kueue_window(window), flavor_order=order, cohort_quota=pools)
    out.rows += write_metric_samples(cluster, metric.samples, window.end, window.seconds)
    if synced:
        out.rows += write_queue_samples(
            cluster, build_gpu_queue_samples(batch), window.end, window.seconds
        )
        # As the sync does after each sample: positions from the visibility API.
        positions = {}
        for summary in sim.pending_workloads(window.end).values():
            positions.update(pending_positions(summary["items"]))
        out.rows += write_pending_positions(cluster, positions)
    answers = sim.prometheus_window(window)
    window_batch = build_window(
        WindowInput(
            window=window,
            dcgm_avg={key: answers.get(f"avg:{key}", []) for key in DCGM_METRICS},
            dcgm_count={key: answers.get(f"count:{key}", []) for key in DCGM_METRICS},
            gpu_requests=answers["gpu_requests"],
            pod_labels=answers["pod_labels"],
            expected_samples=window.seconds // SCRAPE_SECONDS,
        )
    )
    out.stats.merge(window_batch.stats)
    out.rows += write_window(cluster, window_batch).rows_written
    if window.end.timestamp() % HOUR.total_seconds() == 0:
        # The hour just ended: the serving collector's queries, answered about the fleet.
        out.rows += collect_hour(cluster, window.end - HOUR, client=sim.serving_prometheus()).rows
        out.serving_hour = True
    return out


def history_written(cluster: Cluster, sim: FleetSimulator) -> bool:
    """Whether ``sim``'s history is already in the tables (a simulation run reaching its end)."""
    return IngestRun.objects.filter(
        cluster=cluster,
        source=IngestSource.SIMULATION,
        status__in=[IngestStatus.SUCCESS, IngestStatus.PARTIAL],
        window_start__lte=sim.start,
        window_end__gte=sim.end,
    ).exists()


def _last_written(cluster: Cluster, sim: FleetSimulator) -> datetime:
    newest = IngestRun.objects.filter(
        cluster=cluster,
        source=IngestSource.SIMULATION,
        status__in=[IngestStatus.SUCCESS, IngestStatus.PARTIAL],
    ).aggregate(end=Max("window_end"))["end"]
    return max(newest or sim.end, sim.end)


class _Stop:
    """Set by SIGTERM / SIGINT; the loop checks it between windows and while it waits."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.parent = os.getppid()

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach only the main thread; a test's thread stops on max_windows
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        logger.info("follow: signal %d, stopping after this window", signum)
        self.event.set()

    def wanted(self) -> bool:
        if os.getppid() != self.parent:
            logger.info("follow: the process that started it is gone; stopping")
            self.event.set()
        return self.event.is_set()


@contextmanager
def simulation_run(cluster: Cluster, start: datetime, end: datetime) -> Iterator[IngestRun]:
    """The IngestRun of simulated windows ending in ``(start, end]``: recorded as failed, with
    the error, when the body raises (Ctrl-C included); the body ends it with ``finish_run``."""
    run = IngestRun.objects.create(
        cluster=cluster,
        source=IngestSource.SIMULATION,
        started_at=timezone.now(),
        window_start=start,
        window_end=end,
    )
    try:
        yield run
    except BaseException as exc:
        run.status = IngestStatus.FAILED
        run.error = f"{type(exc).__name__}: {exc}"
        run.finished_at = timezone.now()
        run.save()
        raise


def finish_run(run: IngestRun, stats: IngestStats, rows: int, kube_skipped: int) -> None:
    """A simulation run that wrote everything: its counts, partial when anything was skipped."""
    run.records_read = stats.records_read
    run.rows_written = rows
    run.skipped = stats.skipped + kube_skipped
    run.nonfinite_skipped = stats.nonfinite_skipped
    run.skip_reasons = dict(stats.skip_reasons)
    run.status = IngestStatus.PARTIAL if run.skipped else IngestStatus.SUCCESS
    run.finished_at = timezone.now()
    run.save()


def _live_window(cluster: Cluster, sim: FleetSimulator, window: Window) -> int:
    """One live window: ingest, its IngestRun, and the roll-up of the hour it ends in."""
    with simulation_run(cluster, window.start, window.end) as run:
        written = ingest_window(cluster, sim, window, synced=True, last=False)
        hour = floor_time(window.start, 3600)
        written.rows += roll_up_range(cluster.id, hour, hour + timedelta(hours=1))
        finish_run(run, written.stats, written.rows, written.kube_skipped)
    if written.serving_hour:
        # As the beat entry would: a day whose last hour just came in is judged.
        evaluate_serving(window.end)
    return written.rows


def follow(cluster: Cluster, sim: FleetSimulator, *, max_windows: int | None = None) -> int:
    """Write one window a minute from the last one written up to now, until stopped.

    ``sim`` stands at its history's end. Returns the number of live windows written.
    """
    stop = _Stop()
    stop.install()
    sim.step = LIVE_SECONDS  # the scheduler counts run time in steps
    cursor = floor_time(_last_written(cluster, sim), LIVE_SECONDS)
    horizon = floor_time(timezone.now(), LIVE_SECONDS) - CATCH_UP
    while cursor < horizon:  # minutes already written, or too old to catch up: memory only
        sim.advance(cursor)
        cursor += timedelta(seconds=LIVE_SECONDS)
    written = 0
    while not stop.wanted():
        now = timezone.now()
        if cursor + timedelta(seconds=LIVE_SECONDS) <= now:
            window = Window(cursor, cursor + timedelta(seconds=LIVE_SECONDS))
            rows = _live_window(cluster, sim, window)
            logger.info("follow: window %s..%s, %d rows", window.start, window.end, rows)
            cursor = window.end
            written += 1
            if max_windows is not None and written >= max_windows:
                break
            continue
        wait = (cursor + timedelta(seconds=LIVE_SECONDS) - now).total_seconds()
        stop.event.wait(min(max(wait, 0.1), PARENT_CHECK_SECONDS))
    return written
