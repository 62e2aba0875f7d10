"""Collect DCGM usage and GPU allocation of one cluster from Prometheus, window by window.

One run (``Collector.run``), driven by Celery beat every ``GPULEDGER_COLLECT_SECONDS``:

1. Claim the cluster's ``CollectionCursor`` (source ``dcgm``) with a conditional UPDATE whose row
   count is checked (docs/conventions.md "Background work"). A claim is a lease, renewed after each
   window; a worker that died holding it is taken over once the lease expires. A run that finds the
   cursor claimed does nothing: the holder is already collecting those windows.
2. Work out the windows: the last complete aligned window (``COLLECT_DELAY_SECONDS`` after its end)
   on a first run; otherwise every window after the cursor, oldest first, at most
   ``GPULEDGER_CATCHUP_HOURS`` back (an outage longer than that leaves a gap, logged).
3. Ask Prometheus a handful of aggregated queries (``fleet.constants.PROMQL_*``): per DCGM metric
   ``avg_over_time`` per GPU series, ``count_over_time`` of the activity metrics for coverage,
   kube-state-metrics GPU requests of Running pods with their node, and the pods' Kueue labels;
   and the scheduler's own quota gauges (``quotas.constants.QUOTA_METRIC_QUERIES``: Kueue's, or
   Volcano's or KAI's asked in Kueue's shape, by ``Cluster.quota_source``), which become
   ClusterQueue samples (source ``metrics``) wherever the API server sync left the window
   without one.
   One window → instant queries at its end; several → range queries with step = window, chunked so
   an answer stays under ``RANGE_POINTS_PER_QUERY`` points and Prometheus' 11,000 points/series.
4. Per window, oldest first: ``fleet.ingest.build_window`` → ``ledger.store.write_window``, the
   cursor advance and a success ``IngestRun`` in ONE transaction, so a window is in the database
   with its bookkeeping or not at all. A failure stops the run there: the cursor stays, a failed
   ``IngestRun`` says why, and the next run starts again at that window.
5. Roll up each hour once a window of a later hour comes (a long catch-up shows its progress in
   rollups), then every due hour of the cluster (``ledger.rollup.sweep``): each window bumps its
   hour's change counter in its own transaction, so an hour whose rollup failed or was killed
   stays dirty until one succeeds, in this run or a later one.

``Collector.backfill`` fills an explicit historical range the same way (``manage.py
collect_metrics --start --end``). It is resumable: windows that already have a successful
``IngestRun`` are skipped, and it only moves the cursor forward when a backfilled window extends
it contiguously, so live collection carries on from where it was.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.deadlines import Deadline
from core.failpoints import failpoint
from core.gcpause import gc_paused
from core.timewindows import Window, ensure_aware, last_complete_window, windows_between
from fleet import constants as c
from fleet.choices import IngestSource, IngestStatus, PodLabelStyle
from fleet.ingest import IngestStats, WindowInput, build_window, split_matrix
from fleet.leases import Lease, holder_identity
from fleet.models import Cluster, CollectionCursor, Gpu, IngestRun
from fleet.prometheus import PrometheusClient, PrometheusError
from ledger.rollup import hours_touched
from ledger.rollup.completeness import mark_changed
from ledger.rollup.sweep import due_hours, roll_up_or_log
from ledger.signals import windows_collected
from ledger.store import write_window
from quotas.constants import (
    QUOTA_METRIC_NO_BORROWING,
    QUOTA_METRIC_QUERIES,
    QUOTA_METRIC_UNEXPORTED,
)
from quotas.ingest.metric_range import read_range
from quotas.ingest.metrics import MetricFigures, read_window, route_answers, samples_of
from quotas.store import (
    metric_sample_context,
    quota_metrics_source,
    synced_cohorts,
    write_metric_samples,
)

logger = logging.getLogger(__name__)

AVG = "avg:"
COUNT = "count:"
REQUESTS = "requests"
POD_LABELS = "pod_labels"
POD_OWNERS = "pod_owners"
JOB_OWNERS = "job_owners"
POD_GROUPS = "pod_groups"
KUEUE = "kueue:"


class ClaimLostError(Exception):
    """Another worker took the cursor over (our lease ran out); stop without writing."""


@dataclass
class CollectResult:
    """What one run or backfill did."""

    cluster: str
    claimed: bool = True
    busy: str = ""  # who holds the lease, when not claimed
    windows: int = 0
    windows_skipped: int = 0
    rows_written: int = 0
    hours_rolled_up: list[datetime] = field(default_factory=list)
    first_window_start: datetime | None = None
    last_window_end: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "claimed": self.claimed,
            "windows": self.windows,
            "windows_skipped": self.windows_skipped,
            "rows_written": self.rows_written,
            "hours_rolled_up": [hour.isoformat() for hour in self.hours_rolled_up],
            "last_window_end": self.last_window_end.isoformat() if self.last_window_end else None,
        }


def window_queries(
    label_style: str, window_seconds: int, quota_source: str = "kueue"
) -> dict[str, str]:
    """The PromQL of one window, by answer name (``avg:<key>``, ``count:<key>``, requests...);
    the quota gauges of ``quota_source``'s scheduler (``Cluster.quota_source``)."""
    labels = list(c.DCGM_IDENTITY_LABELS)
    if label_style in c.POD_LABELS_BY_STYLE:
        labels += c.POD_LABELS_BY_STYLE[label_style]
    else:
        # Auto-detection needs both spellings; on honor_labels: false the plain ones name the
        # exporter pod, one value per exporter, so they cost bytes but split no series.
        for names in c.POD_LABELS_BY_STYLE.values():
            labels += [name for name in names if name not in labels]
    by = ", ".join(labels)
    span = f"{window_seconds * 1000 - 1}ms"
    queries = {
        AVG + key: c.PROMQL_DCGM_AVG.format(by=by, metric=metric, range=span)
        for key, metric in c.DCGM_METRICS.items()
    }
    for key in c.DCGM_COUNT_METRICS:
        queries[COUNT + key] = c.PROMQL_DCGM_COUNT.format(
            by=by, metric=c.DCGM_METRICS[key], range=span
        )
    queries[REQUESTS] = c.PROMQL_GPU_REQUESTS
    queries[POD_LABELS] = c.PROMQL_POD_LABELS
    queries[POD_OWNERS] = c.PROMQL_POD_OWNERS
    queries[JOB_OWNERS] = c.PROMQL_JOB_OWNERS
    queries[POD_GROUPS] = c.PROMQL_POD_GROUPS
    # The scheduler's own metrics: the quota history of windows the API server sync did not
    # sample.
    for name, promql in QUOTA_METRIC_QUERIES.get(quota_source, {}).items():
        queries[KUEUE + name] = promql
    return queries


def kueue_answers(answers: dict[str, list[dict]]) -> dict[str, list[object]]:
    """The Kueue metric answers of one window, as ``read_window`` inputs."""
    return route_answers(
        {name[len(KUEUE) :]: items for name, items in answers.items() if name.startswith(KUEUE)}
    )


def window_input(window: Window, answers: dict[str, list[dict]], label_style: str) -> WindowInput:
    """Name the answers of one window the way ``fleet.ingest.build_window`` wants them."""
    counts = {
        name[len(COUNT) :]: items for name, items in answers.items() if name.startswith(COUNT)
    }
    return WindowInput(
        window=window,
        dcgm_avg={
            name[len(AVG) :]: items for name, items in answers.items() if name.startswith(AVG)
        },
        dcgm_count=counts,
        gpu_requests=answers.get(REQUESTS, []),
        pod_labels=answers.get(POD_LABELS, []),
        pod_owners=answers.get(POD_OWNERS, []),
        job_owners=answers.get(JOB_OWNERS, []),
        pod_groups=answers.get(POD_GROUPS, []),
        label_style=label_style,
        expected_samples=_expected_samples(counts),
    )


def _expected_samples(counts: dict[str, list[dict]]) -> int:
    """Samples a fully covered series has in the window: the most any series had.

    The scrape interval is not visible through the query API (and differs per job), so the
    best-covered GPU of the window stands for it; coverage of the others is relative to it.
    """
    best = 0.0
    for items in counts.values():
        for item in items:
            try:
                best = max(best, float(item["value"][1]))
            except (KeyError, TypeError, ValueError, IndexError):
                continue
    return int(best) if best == best else 0  # NaN guard


class Collector:
    """Collects one cluster's windows; see the module docstring."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        client: PrometheusClient | None = None,
        window_seconds: int | None = None,
        worker: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.window_seconds = int(window_seconds or settings.GPULEDGER_COLLECT_SECONDS)
        self.worker = worker or holder_identity("collect")
        self.lease = Lease(cluster, IngestSource.DCGM, self.worker)
        self._client = client
        # A run ends by GPULEDGER_COLLECT_DEADLINE_SECONDS (set in ``run``; a backfill has none).
        self.deadline: Deadline | None = None
        self._series_estimate = 0
        self.label_style = str(cluster.pod_label_style or PodLabelStyle.AUTO)
        self.quota_source = quota_metrics_source(cluster)
        self.queries = window_queries(self.label_style, self.window_seconds, self.quota_source)
        # Per window end: Kueue's metrics, read, until the window is written.
        self._kueue: dict[datetime, MetricFigures] = {}
        self._kueue_context: tuple[dict[str, list[str]], dict[tuple[str, str], Decimal]] | None = (
            None
        )
        self._queues: dict[str, str] | None = None

    # --- claim ------------------------------------------------------------------------------

    def claim(self, result: CollectResult | None = None) -> bool:
        """Take the cursor's lease (fleet.leases) if it is free or its holder stopped renewing it;
        True when this worker holds it. Otherwise ``result`` learns who holds it."""
        if self.lease.acquire():
            return True
        if result is not None:
            result.claimed = False
            result.busy = self.lease.busy_message("collected")
        return False

    def release(self) -> None:
        self.lease.release()

    def _cursor(self) -> CollectionCursor:
        return CollectionCursor.objects.get(cluster=self.cluster, source=IngestSource.DCGM)

    # --- entry points -----------------------------------------------------------------------

    def run(self, now: datetime | None = None) -> CollectResult:
        """Collect the last complete window and every window missed since the cursor."""
        now = ensure_aware(now or timezone.now())
        target = last_complete_window(
            now - timedelta(seconds=c.COLLECT_DELAY_SECONDS), self.window_seconds
        )
        result = CollectResult(cluster=self.cluster.name)
        if not self.claim(result):
            logger.info("%s; skipping", result.busy)
            return result
        self.deadline = Deadline(
            settings.GPULEDGER_COLLECT_DEADLINE_SECONDS,
            "the collection deadline",
            "GPULEDGER_COLLECT_DEADLINE_SECONDS",
        )
        try:
            last_end = self._cursor().last_window_end
            windows = self._pending_windows(last_end, target)
            self._collect(windows, result, contiguous_only=False)
        finally:
            self.release()
        return result

    def backfill(
        self,
        start: datetime,
        end: datetime,
        *,
        now: datetime | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> CollectResult:
        """Collect every window ending in ``(start, end]`` that has no successful IngestRun yet."""
        start, end = ensure_aware(start), ensure_aware(end)
        now = ensure_aware(now or timezone.now())
        newest = last_complete_window(
            now - timedelta(seconds=c.COLLECT_DELAY_SECONDS), self.window_seconds
        )
        end = min(end, newest.end)
        windows = list(windows_between(start, end, self.window_seconds))
        result = CollectResult(cluster=self.cluster.name)
        done = self.collected_window_ends(windows)
        todo = [window for window in windows if window.end not in done]
        result.windows_skipped = len(windows) - len(todo)
        if progress is not None and result.windows_skipped:
            progress(result.windows_skipped)
        if not todo:
            # Nothing to collect, but an earlier run may have died before rolling up.
            self._roll_up_due_hours(result)
            return result
        if not self.claim(result):
            return result
        try:
            self._collect(todo, result, contiguous_only=True, progress=progress)
        finally:
            self.release()
        return result

    def collected_window_ends(self, windows: Sequence[Window]) -> set[datetime]:
        if not windows:
            return set()
        ends = (
            IngestRun.objects.succeeded()
            .filter(
                cluster=self.cluster,
                source=IngestSource.DCGM,
                window_end__gt=windows[0].start,
                window_end__lte=windows[-1].end,
            )
            .values_list("window_end", flat=True)
        )
        return {end for end in ends if end is not None}

    # --- the work ---------------------------------------------------------------------------

    def _pending_windows(self, last_end: datetime | None, target: Window) -> list[Window]:
        if last_end is None:
            return [target]
        oldest = target.end - timedelta(hours=settings.GPULEDGER_CATCHUP_HOURS)
        if last_end < oldest:
            logger.warning(
                "cluster %s: cursor at %s is older than the %dh catch-up; windows up to %s "
                "are left out (use manage.py collect_metrics --start/--end to backfill them)",
                self.cluster,
                last_end.isoformat(),
                settings.GPULEDGER_CATCHUP_HOURS,
                oldest.isoformat(),
            )
        return list(windows_between(max(last_end, oldest), target.end, self.window_seconds))

    def _collect(
        self,
        windows: list[Window],
        result: CollectResult,
        *,
        contiguous_only: bool,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        pending_hours: set[datetime] = set()
        try:
            chunk_seconds = 0.0
            for chunk in self._chunks(windows):
                # Start a window only while twice the last one's time is left before the
                # deadline: a catch-up stops between windows, and the next run goes on.
                if self.deadline is not None and self.deadline.remaining() <= 2 * chunk_seconds:
                    logger.warning(
                        "cluster %s: %s is near; windows from %s on are left to the next run",
                        self.cluster,
                        self.deadline,
                        chunk[0].end.isoformat(),
                    )
                    return
                chunk_started = time.monotonic()
                started_at = timezone.now()
                with gc_paused():
                    going_on = self._collect_chunk(
                        chunk, started_at, result, pending_hours, contiguous_only, progress
                    )
                if not going_on:
                    return
                chunk_seconds = time.monotonic() - chunk_started
        finally:
            self._roll_up_due_hours(result)
            self._announce(result, live=not contiguous_only)

    def _collect_chunk(
        self,
        chunk: list[Window],
        started_at: datetime,
        result: CollectResult,
        pending_hours: set[datetime],
        contiguous_only: bool,
        progress: Callable[[int], None] | None,
    ) -> bool:
        """Fetch one chunk of windows and write them, oldest first (Python's garbage collector
        paused: ``core.gcpause``); False when the claim was lost and the run must stop."""
        try:
            inputs = self._fetch(chunk)
        except PrometheusError as exc:
            self._record_failure(chunk[0].start, chunk[-1].end, started_at, exc)
            raise
        for window in chunk:
            hour = hours_touched([window.end])[0]
            # An hour is complete once a later hour's window is written: roll it up now
            # rather than at the end, so a long catch-up shows its progress in rollups.
            for done in sorted(h for h in pending_hours if h < hour):
                self._roll_up(done, result)
                pending_hours.discard(done)
            started = started_at if window is chunk[0] else timezone.now()
            try:
                rows = self._write(inputs.pop(window.end), started, contiguous_only)
            except ClaimLostError:
                logger.warning(
                    "cluster %s: claim lost before window %s, stopping",
                    self.cluster,
                    window.end.isoformat(),
                )
                return False
            except Exception as exc:
                self._record_failure(window.start, window.end, started, exc)
                raise
            pending_hours.add(hour)
            result.windows += 1
            result.rows_written += rows
            if result.first_window_start is None:
                result.first_window_start = window.start
            result.last_window_end = window.end
            if progress is not None:
                progress(1)
        return True

    def _announce(self, result: CollectResult, *, live: bool) -> None:
        """Tell the apps above (alerts) which windows were written, once they are committed."""
        if result.first_window_start is None or result.last_window_end is None:
            return
        for receiver, answer in windows_collected.send_robust(
            sender=Collector,
            cluster_id=self.cluster.pk,
            start=result.first_window_start,
            end=result.last_window_end,
            live=live,
        ):
            if isinstance(answer, Exception):
                logger.error(
                    "cluster %s: %r failed on windows (%s, %s]: %s",
                    self.cluster,
                    receiver,
                    result.first_window_start.isoformat(),
                    result.last_window_end.isoformat(),
                    answer,
                    exc_info=answer,
                )

    def _chunks(self, windows: list[Window]) -> Iterator[list[Window]]:
        """Contiguous runs of windows, each small enough for one range query per metric."""
        position = 0
        while position < len(windows):
            size = self._chunk_windows()
            chunk = [windows[position]]
            while (
                len(chunk) < size
                and position + len(chunk) < len(windows)
                and windows[position + len(chunk)].start == chunk[-1].end
            ):
                chunk.append(windows[position + len(chunk)])
            position += len(chunk)
            yield chunk

    def _chunk_windows(self) -> int:
        if not self._series_estimate:
            self._series_estimate = Gpu.objects.filter(cluster=self.cluster).count()
        if not self._series_estimate:
            # Unknown fleet size: one window (an instant query) tells us how many series to expect.
            return 1
        # Pods sharing GPUs add series; leave a quarter of the budget for them.
        per_window = self._series_estimate + self._series_estimate // 4 + 1
        return max(1, min(c.RANGE_MAX_POINTS_PER_SERIES, c.RANGE_POINTS_PER_QUERY // per_window))

    def _client_for_run(self) -> PrometheusClient:
        if self._client is None:
            self._client = PrometheusClient.for_cluster(self.cluster)
        self._client.deadline = self.deadline
        return self._client

    def _fetch(self, chunk: list[Window]) -> dict[datetime, WindowInput]:
        client = self._client_for_run()
        if len(chunk) == 1:
            at = chunk[0].end

            def fetch(promql: str) -> list[dict]:
                return client.query(promql, at)
        else:

            def fetch(promql: str) -> list[dict]:
                return client.query_range(promql, chunk[0].end, chunk[-1].end, self.window_seconds)

        with ThreadPoolExecutor(max_workers=c.QUERY_CONCURRENCY) as pool:
            futures = {name: pool.submit(fetch, promql) for name, promql in self.queries.items()}
            answers = {name: future.result() for name, future in futures.items()}
        failpoint("collect.fetch")

        self._series_estimate = max(
            [self._series_estimate]
            + [len(items) for name, items in answers.items() if name.startswith(AVG)]
        )
        if len(chunk) == 1:
            self._kueue[chunk[0].end] = read_window(kueue_answers(answers))
            return {chunk[0].end: window_input(chunk[0], answers, self.label_style)}

        stats = IngestStats()
        # Kueue's gauges are read series by series (``quotas.ingest.metric_range``).
        kueue = read_range(
            {
                name[len(KUEUE) :]: answers.pop(name)
                for name in list(answers)
                if name.startswith(KUEUE)
            },
            stats,
        )
        split = {name: split_matrix(items, stats) for name, items in answers.items()}
        answers.clear()
        if stats.skipped:
            logger.warning(
                "cluster %s: malformed matrix items %s", self.cluster, stats.skip_reasons
            )
        inputs: dict[datetime, WindowInput] = {}
        for window in chunk:
            ts = window.end.timestamp()
            per_window = {name: by_ts.pop(ts, []) for name, by_ts in split.items()}
            self._kueue[window.end] = kueue.pop(ts, MetricFigures())
            inputs[window.end] = window_input(window, per_window, self.label_style)
        return inputs

    def _write(self, inp: WindowInput, started_at: datetime, contiguous_only: bool) -> int:
        batch = build_window(inp)
        stats = batch.stats
        window = inp.window
        status = (
            IngestStatus.PARTIAL
            if stats.skipped or stats.nonfinite_skipped
            else IngestStatus.SUCCESS
        )
        flavor_order, cohort_quota = self._sample_context()
        kueue = samples_of(
            self._kueue.pop(window.end, MetricFigures()),
            flavor_order=flavor_order,
            cohort_quota=cohort_quota,
            queues=self._queues,
            unknown=QUOTA_METRIC_UNEXPORTED.get(self.quota_source, frozenset()),
            borrows=self.quota_source not in QUOTA_METRIC_NO_BORROWING,
        )
        with transaction.atomic():
            written = write_window(self.cluster, batch)
            quota_rows = write_metric_samples(
                self.cluster, kueue.samples, window.end, self.window_seconds
            )
            failpoint("collect.write")
            # With the rows, so the hour is dirty exactly when its rollup may lack this window.
            mark_changed(self.cluster.pk, hours_touched([window.end])[0])
            self._advance(window, contiguous_only)
            IngestRun.objects.create(
                cluster=self.cluster,
                source=IngestSource.DCGM,
                status=status,
                window_start=window.start,
                window_end=window.end,
                started_at=started_at,
                finished_at=timezone.now(),
                records_read=stats.records_read + kueue.stats.records_read,
                rows_written=written.rows_written + quota_rows,
                skipped=stats.skipped + kueue.stats.skipped,
                nonfinite_skipped=stats.nonfinite_skipped,
                skip_reasons=dict(stats.skip_reasons + kueue.stats.skip_reasons),
            )
            failpoint("collect.advance")
        failpoint("collect.committed")
        return written.usage_rows

    def _sample_context(self) -> tuple[dict[str, list[str]], dict[tuple[str, str], Decimal]]:
        """Flavor order and cohort pools for the Kueue metric samples, read once per run."""
        if self._kueue_context is None:
            self._kueue_context = metric_sample_context(self.cluster)
            self._queues = synced_cohorts(self.cluster, self.quota_source)
        return self._kueue_context

    def _advance(self, window: Window, contiguous_only: bool) -> None:
        """Renew the lease and move the cursor to ``window``; ClaimLostError if not ours."""
        cursors = CollectionCursor.objects
        if not self.lease.renew():
            raise ClaimLostError(self.worker)
        if contiguous_only:
            position = Q(last_window_end__isnull=True) | Q(last_window_end=window.start)
        else:
            position = Q(last_window_end__isnull=True) | Q(last_window_end__lt=window.end)
        mine = cursors.held_by(self.cluster, IngestSource.DCGM, self.worker)
        mine.filter(position).update(last_window_end=window.end)

    def _record_failure(
        self, start: datetime, end: datetime, started_at: datetime, exc: Exception
    ) -> None:
        transient = isinstance(exc, PrometheusError) and not exc.permanent
        logger.warning(
            "cluster %s: collecting windows (%s, %s] failed (%s): %s",
            self.cluster,
            start.isoformat(),
            end.isoformat(),
            "transient" if transient else "permanent",
            exc,
        )
        try:
            IngestRun.objects.create(
                cluster=self.cluster,
                source=IngestSource.DCGM,
                status=IngestStatus.FAILED,
                window_start=start,
                window_end=end,
                started_at=started_at,
                finished_at=timezone.now(),
                error=f"{type(exc).__name__}: {exc}"[:10_000],
            )
        except Exception:
            # The database itself may be what failed; the original error is what matters.
            logger.exception("cluster %s: cannot record the failed run", self.cluster)

    def _is_open(self, hour: datetime, result: CollectResult) -> bool:
        """Whether windows of ``hour`` are still to come (no window after it is written)."""
        last_end = result.last_window_end or self.cursor_end()
        return last_end is not None and last_end < hour + timedelta(hours=1)

    def cursor_end(self) -> datetime | None:
        return (
            CollectionCursor.objects.filter(cluster=self.cluster, source=IngestSource.DCGM)
            .values_list("last_window_end", flat=True)
            .first()
        )

    def _roll_up_due_hours(self, result: CollectResult) -> None:
        """Every due hour of the cluster, not only this run's: also one whose rollup failed or
        was killed in an earlier run (``ledger.rollup.sweep``)."""
        try:
            hours = due_hours(self.cluster.pk)
        except Exception:
            # Reached from ``finally``: the error that stopped the run is the one to raise.
            logger.exception("cluster %s: cannot list the hours to roll up", self.cluster)
            return
        for hour in hours:
            self._roll_up(hour, result, open_hour=self._is_open(hour, result))

    def _roll_up(self, hour: datetime, result: CollectResult, *, open_hour: bool = False) -> None:
        """Roll up ``hour``; the open hour at most every GPULEDGER_ROLLUP_SECONDS, a complete
        hour always. A failure is logged and leaves the hour due (``ledger.rollup.sweep``)."""
        if roll_up_or_log(self.cluster.pk, hour, open_hour=open_hour):
            result.hours_rolled_up.append(hour)


def collect_cluster(cluster_id: int, now: datetime | None = None) -> CollectResult:
    """One normal collection run of a cluster (what the Celery task does)."""
    cluster = Cluster.objects.get(pk=cluster_id)
    return Collector(cluster).run(now=now)
