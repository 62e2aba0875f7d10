"""Deep backfill: hours older than the per-window retention, straight into hourly rollups.

``DeepBackfill.run(start, end)`` fills every whole hour of ``[start, end)`` that has no
``RollupHour`` yet (an hour already deep-backfilled, or with windows collected, is skipped, so
a run that stopped is resumed by running it again). Per hour:

1. Fetch (nothing written yet): per shard the stored samples of the six DCGM metrics in the
   hour, through the remote read API (``ledger.deep.remote``; an instant query of a range
   selector where a server has no such API), binned into windows as they arrive
   (``ledger.deep.presence.bin_columns``: the series present in each window and four metrics'
   averages per window; ``ledger.deep.presence`` sums the figures from them) (GPU series split
   by UUID so a read holds at most
   ``GPULEDGER_DEEP_BACKFILL_SERIES_PER_QUERY`` series), the pods' GPU requests per window, their
   labels and owners over the hour, and the scheduler's quota metrics per window (Kueue's, or
   Volcano's or KAI's in Kueue's shape: ``quotas.constants.QUOTA_METRIC_QUERIES``); at most
   ``GPULEDGER_DEEP_BACKFILL_CONCURRENCY`` queries in flight, the next hour's fetched while this
   one is written. A Prometheus error or an unusable answer stops the run before the hour is
   written; malformed items are skipped, counted and logged, as per window.
2. Write, in one transaction: the nodes the hour names, the quota samples of each window where the
   API server left none (``quotas.store.write_metric_samples``, as the collector does), the rollup
   rows (``ledger.rollup.hour.compute_rows``: the same naming, quota and pending figures as a
   rollup of per-window rows), and the hour's ``RollupHour`` with ``usage_pruned=True``: it has
   no per-window rows, the sweep never rebuilds it and no hoarding alert looks at it.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.failpoints import failpoint
from core.timewindows import ensure_aware, hour_floor
from fleet import constants as c
from fleet.choices import PodLabelStyle
from fleet.ingest import IngestStats
from fleet.ingest.kube_state import collect_pod_owners
from fleet.inventory import ensure_nodes
from fleet.models import Cluster, Gpu
from fleet.prometheus import PrometheusClient, PrometheusError
from ledger.collector import KUEUE
from ledger.deep import presence, remote, workers
from ledger.deep import queries as q
from ledger.deep.grain import Grain, GrainBuilder
from ledger.deep.rows import hour_owners, scope_rows
from ledger.models import HourlyRollup, RollupHour
from ledger.rollup.hour import HOUR, compute_rows, insert_rows
from ledger.rollup.row_figures import thresholds
from quotas.constants import (
    QUOTA_METRIC_NO_BORROWING,
    QUOTA_METRIC_QUERIES,
    QUOTA_METRIC_UNEXPORTED,
)
from quotas.ingest.metric_range import read_range
from quotas.ingest.metrics import MetricFigures, samples_of
from quotas.store import (
    metric_sample_context,
    quota_metrics_source,
    synced_cohorts,
    write_metric_samples,
)

logger = logging.getLogger(__name__)

HOURLY = "hour:"
LABELS = "labels:"


@dataclass
class DeepResult:
    """What one deep backfill did."""

    hours: list[datetime] = field(default_factory=list)
    hours_skipped: int = 0
    rows_written: int = 0
    shards: int = 1
    skipped_items: int = 0


def hours_between(start: datetime, end: datetime) -> list[datetime]:
    """The whole hours in ``[start, end)``."""
    hour = hour_floor(ensure_aware(start))
    if hour < ensure_aware(start):
        hour += HOUR
    found = []
    while hour + HOUR <= ensure_aware(end):
        found.append(hour)
        hour += HOUR
    return found


def shards_for(series: int, per_query: int) -> int:
    """Shards (a power of two, at most 16) so each holds about ``per_query`` series or fewer."""
    wanted = max(1, math.ceil(series / max(per_query, 1)))
    shards = 1
    while shards < wanted and shards < 16:
        shards *= 2
    return shards


class DeepBackfill:
    """Deep-backfills one cluster; see the module docstring."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        client: PrometheusClient | None = None,
        window_seconds: int | None = None,
        concurrency: int | None = None,
        series_per_query: int | None = None,
        workers: int | None = None,
    ) -> None:
        self.cluster = cluster
        self.client = client or PrometheusClient.for_cluster(cluster)
        self.window_seconds = int(window_seconds or settings.GPULEDGER_COLLECT_SECONDS)
        if 3600 % self.window_seconds:
            raise ValueError(f"a window of {self.window_seconds} s does not divide an hour")
        self.concurrency = concurrency or settings.GPULEDGER_DEEP_BACKFILL_CONCURRENCY
        self.series_per_query = (
            series_per_query or settings.GPULEDGER_DEEP_BACKFILL_SERIES_PER_QUERY
        )
        self.workers = workers or settings.GPULEDGER_DEEP_BACKFILL_WORKERS
        self.style = str(cluster.pod_label_style or PodLabelStyle.AUTO)
        self._sample_context: tuple[dict[str, list[str]], dict[tuple[str, str], Decimal]] | None
        self._sample_context = None
        self.quota_source = quota_metrics_source(cluster)
        self._queues: dict[str, str] | None = None
        # The remote read API until a server says it has none.
        self._remote_read = True

    # --- entry point ------------------------------------------------------------------------

    def todo(self, hours: list[datetime]) -> list[datetime]:
        """The hours without a RollupHour (never collected, never deep-backfilled)."""
        if not hours:
            return []
        done = set(
            RollupHour.objects.filter(
                cluster=self.cluster, hour__gte=hours[0], hour__lte=hours[-1]
            ).values_list("hour", flat=True)
        )
        return [hour for hour in hours if hour not in done]

    def run(
        self,
        start: datetime,
        end: datetime,
        progress: Callable[[int], None] | None = None,
    ) -> DeepResult:
        hours = hours_between(start, end)
        todo = self.todo(hours)
        result = DeepResult(hours_skipped=len(hours) - len(todo))
        if progress is not None and result.hours_skipped:
            progress(result.hours_skipped)
        if not todo:
            return result
        style = self._resolve_style(todo[-1])
        result.shards = shards_for(self._series_estimate(todo[-1]), self.series_per_query)

        def written(hour: datetime, skipped: int) -> None:
            result.hours.append(hour)
            result.skipped_items += skipped
            if progress is not None:
                progress(1)

        run_hours = functools.partial(self._run_hours, style=style, shards=result.shards)
        processes = workers.usable(self.workers, len(todo))
        if processes > 1:
            workers.run_forked(self, todo, processes, run_hours, written)
            result.hours.sort()
        else:
            run_hours(todo, written)
        result.rows_written = HourlyRollup.objects.filter(
            cluster=self.cluster, hour__in=result.hours
        ).count()
        return result

    def _run_hours(
        self,
        hours: list[datetime],
        written: Callable[[datetime, int], None],
        stopped: Callable[[], bool] = lambda: False,
        *,
        style: str,
        shards: int,
    ) -> None:
        """Fetch and write ``hours`` in order, the next hour's answers asked while one is
        written; ``written(hour, skipped items)`` after each; ``stopped()`` ends the run before
        the next hour."""
        queries = q.DeepQueries(style, self.window_seconds, thresholds())
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            for hour, answers in self._prefetched(pool, queries, hours, shards):
                if stopped():
                    break
                stats = self._write_hour(hour, answers(), style)
                written(hour, stats.skipped + stats.nonfinite_skipped)

    # --- fetching ---------------------------------------------------------------------------

    def _resolve_style(self, hour: datetime) -> str:
        if self.style in (PodLabelStyle.EXPORTED, PodLabelStyle.PLAIN):
            return self.style
        names = "|".join(c.DCGM_METRICS.values())
        promql = (
            f'count(last_over_time({{__name__=~"{names}", {c.LABEL_EXPORTED_POD}!=""}}[1h]))'
            f' or count(last_over_time({{__name__=~"{names}", '
            f'{c.LABEL_EXPORTED_NAMESPACE}!=""}}[1h]))'
        )
        found = self.client.query(promql, hour + HOUR)
        return PodLabelStyle.EXPORTED if found else PodLabelStyle.PLAIN

    def _series_estimate(self, hour: datetime) -> int:
        metric = c.DCGM_METRICS["gpu_util"]
        answer = self.client.query(f"count(last_over_time({metric}[1h]))", hour + HOUR)
        counted = 0
        for item in answer:
            try:
                counted = max(counted, int(float(item["value"][1])))
            except (KeyError, TypeError, ValueError, IndexError):
                continue
        return max(counted, Gpu.objects.filter(cluster=self.cluster).count())

    def _calls(
        self, pool: ThreadPoolExecutor, queries: q.DeepQueries, hour: datetime, shards: int
    ) -> dict[str, Callable[[], Any]]:
        """The hour's queries by answer name (a shard's named ``<HOURLY><shard>:<name>``)."""
        end = hour + HOUR
        first = hour + timedelta(seconds=self.window_seconds)
        client, step = self.client, self.window_seconds

        def instant(promql: str) -> Callable[[], list[dict]]:
            return lambda: client.query(promql, end)

        def ranged(promql: str) -> Callable[[], list[dict]]:
            return lambda: client.query_range(promql, first, end, step)

        def binned(shard: str) -> Callable[[], dict[str, presence.Windows]]:
            # Binned in the pool's thread as it arrives: a shard's samples are held as arrays
            # of per-window doubles, not as parsed answers, until the hour is written.
            return lambda: self._samples(queries, shard, end, first.timestamp())

        calls: dict[str, Callable[[], Any]] = {}
        for number, matcher in enumerate(q.shard_matchers(shards)):
            calls[f"{HOURLY}{number}:{q.SAMPLES}"] = binned(matcher)
        for name, promql in queries.label_queries().items():
            calls[f"{LABELS}{name}"] = instant(promql)
        calls[q.REQUESTS] = ranged(c.PROMQL_GPU_REQUESTS)
        for name, promql in QUOTA_METRIC_QUERIES.get(self.quota_source, {}).items():
            calls[KUEUE + name] = ranged(promql)
        return calls

    def _samples(
        self, queries: q.DeepQueries, shard: str, end: datetime, first: float
    ) -> dict[str, presence.Windows]:
        """The shard's stored DCGM samples of the hour ending at ``end``, binned into windows:
        through the remote read API, else (a Prometheus-compatible server without it answers
        404 or 405) an instant query of a range selector."""
        if self._remote_read:
            end_ms = round(end.timestamp() * 1000)
            start_ms = end_ms - 3600 * 1000 + 1
            request = remote.read_request(start_ms, end_ms, queries.sample_matchers(shard))
            try:
                answer, content_type = self.client.remote_read(request)
            except PrometheusError as exc:
                if exc.status not in (404, 405):
                    raise
                logger.warning("No remote read API (%s): the samples come as JSON", exc)
                self._remote_read = False
            else:
                try:
                    columns = remote.read_answer(answer, content_type, start_ms, end_ms)
                except remote.RemoteReadError as exc:
                    raise PrometheusError(str(exc), permanent=True) from exc
                return presence.bin_columns(
                    columns.labels,
                    columns.series,
                    columns.times_ms,
                    columns.values,
                    queries.by_labels,
                    first,
                    self.window_seconds,
                    columns.stats,
                    kept_labels=True,
                )
        items = self.client.query_samples(queries.samples(shard), end)
        return presence.bin_samples(items, queries.by_labels, first, self.window_seconds)

    def _prefetched(
        self, pool: ThreadPoolExecutor, queries: q.DeepQueries, hours: list[datetime], shards: int
    ) -> Iterator[tuple[datetime, Callable[[], dict[str, list[dict]]]]]:
        """Each hour with a way to wait for its answers; the next hour's are already asked.

        Only the hours in flight are held: a done hour's futures (and the answers they hold) are
        let go when the next hour is handed out, so a month or a year of hours runs in the
        memory of two."""

        def submit(hour: datetime) -> dict[str, Future[Any]]:
            return {
                name: pool.submit(call)
                for name, call in self._calls(pool, queries, hour, shards).items()
            }

        ahead: deque[dict[str, Future[Any]]] = deque([submit(hours[0])])
        for position, hour in enumerate(hours):
            if position + 1 < len(hours):
                ahead.append(submit(hours[position + 1]))
            current = ahead.popleft()
            yield hour, functools.partial(_wait, current, ahead)
            del current

    # --- writing ----------------------------------------------------------------------------

    def grain(
        self, answers: dict[str, list[dict]], style: str, end: datetime
    ) -> tuple[GrainBuilder, Any]:
        """The hour's grain from its answers (``ledger.deep.presence`` sums each shard's
        per-window answers, ``ledger.deep.grain`` joins them), owners not yet read."""
        builder = GrainBuilder(style, self.window_seconds)
        queries = q.DeepQueries(style, self.window_seconds, thresholds())
        limits = queries.limits
        builder.add_kube_state(answers.get(q.REQUESTS, []), answers.get(f"{LABELS}pod_labels", []))
        seen: dict[tuple[str, str], dict[float, float]] = {}
        shard_numbers = sorted({name.split(":")[1] for name in answers if name.startswith(HOURLY)})
        for number in shard_numbers:
            shard_answers = _shard(answers, f"{HOURLY}{number}:")
            found = presence.derive(
                shard_answers.get(q.SAMPLES) or shard_answers,
                queries.by_labels,
                queries.pod_labels,
                (end - HOUR).timestamp() + self.window_seconds,
                self.window_seconds,
                limits,
            )
            builder.grain.stats.merge(found.stats)
            builder.add_series(found)
            for ident, by_end in builder.add_windows(found).items():
                target = seen.setdefault(ident, {})
                for ts, gpus in by_end.items():
                    target[ts] = target.get(ts, 0.0) + gpus
        owners = collect_pod_owners(
            answers.get(f"{LABELS}pod_owners", []),
            answers.get(f"{LABELS}job_owners", []),
            answers.get(f"{LABELS}pod_labels", []),
            builder.grain.stats,
            answers.get(f"{LABELS}pod_groups", []),
        )
        return builder, (seen, owners)

    def _write_hour(
        self, hour: datetime, answers: dict[str, list[dict]], style: str
    ) -> IngestStats:
        builder, (seen, owners) = self.grain(answers, style, hour + HOUR)
        kueue = read_range(_shard(answers, KUEUE), builder.grain.stats)
        with transaction.atomic():
            cluster = (
                Cluster.objects.select_for_update(no_key=True)
                .only("pk", "name")
                .get(pk=self.cluster.pk)
            )
            if RollupHour.objects.filter(cluster_id=cluster.pk, hour=hour).exists():
                # Collected or deep-backfilled meanwhile (another run): that one stands.
                return builder.grain.stats
            wanted = builder.nodes()
            nodes = ensure_nodes(cluster, list(wanted), wanted)
            builder.add_unseen_requests(seen, {n: i.gpu_product for n, i in nodes.items()})
            extra = sorted({p.node_name for p in builder.grain.pieces} - set(nodes) - {""})
            if extra:
                nodes.update(ensure_nodes(cluster, extra, {}))
            self._write_samples(hour, kueue)
            by_scope = scope_rows(
                cluster, builder.grain, hour_owners(cluster, hour, builder.grain, owners), nodes
            )
            rows = compute_rows(cluster, hour, by_scope)
            failpoint("deep.compute")
            HourlyRollup.objects.filter(cluster_id=cluster.pk, hour=hour).delete()
            insert_rows(rows)
            _mark_deep(cluster.pk, hour)
            failpoint("deep.write")
        _log(self.cluster, hour, builder.grain, len(rows))
        return builder.grain.stats

    def _write_samples(self, hour: datetime, kueue: dict[float, MetricFigures]) -> None:
        """The quota samples of each window of the hour, as ``Collector._write`` stores them."""
        if self._sample_context is None:
            self._sample_context = metric_sample_context(self.cluster)
            self._queues = synced_cohorts(self.cluster, self.quota_source)
        flavor_order, cohort_quota = self._sample_context
        step = timedelta(seconds=self.window_seconds)
        end = hour + step
        while end <= hour + HOUR:
            samples = samples_of(
                kueue.get(end.timestamp()) or MetricFigures(),
                flavor_order=flavor_order,
                cohort_quota=cohort_quota,
                queues=self._queues,
                unknown=QUOTA_METRIC_UNEXPORTED.get(self.quota_source, frozenset()),
                borrows=self.quota_source not in QUOTA_METRIC_NO_BORROWING,
            )
            write_metric_samples(self.cluster, samples.samples, end, self.window_seconds)
            end += step


def _wait(
    futures: dict[str, Future[Any]], ahead: Iterable[dict[str, Future[Any]]]
) -> dict[str, list[dict]]:
    """The answers of one hour; on a failure every query not yet started, of this hour or of
    the hours asked ``ahead``, is cancelled."""
    answers: dict[str, list[dict]] = {}
    try:
        for name, future in futures.items():
            answers[name] = future.result()
    except BaseException:
        for future in itertools.chain(futures.values(), *(hour.values() for hour in ahead)):
            future.cancel()
        raise
    return answers


def _shard(answers: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {
        name[len(prefix) :]: items for name, items in answers.items() if name.startswith(prefix)
    }


def _mark_deep(cluster_id: int, hour: datetime) -> None:
    """The hour has rollup rows and no per-window rows: never rebuilt, no hoarding alerts."""
    now = timezone.now()
    updated = RollupHour.objects.filter(cluster_id=cluster_id, hour=hour).update(
        usage_pruned=True, rolled_up_at=now, updated_at=now
    )
    if not updated:
        RollupHour.objects.create(
            cluster_id=cluster_id, hour=hour, usage_pruned=True, rolled_up_at=now
        )


def _log(cluster: Cluster, hour: datetime, grain: Grain, rows: int) -> None:
    stats = grain.stats
    if stats.skipped or stats.nonfinite_skipped:
        logger.warning(
            "cluster %s hour %s: skipped %d malformed items %s and %d non-finite",
            cluster,
            hour.isoformat(),
            stats.skipped,
            dict(stats.skip_reasons),
            stats.nonfinite_skipped,
        )
    logger.info(
        "Deep-backfilled cluster %s hour %s: %d rollup rows", cluster, hour.isoformat(), rows
    )
