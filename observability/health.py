"""Health of the background work, read from its bookkeeping when Prometheus scrapes
(README "Metrics").

Each function returns ``prometheus_client`` metric families. Counts over time ("runs",
"failures", "relists") cover the ``GPULEDGER_METRICS_LOOKBACK_SECONDS`` before the scrape: the
records they count are pruned, so a total since the start could go down, which a Prometheus
counter must never do. They are gauges; ``max_over_time`` or the lookback itself gives longer
views. Every read is a handful of indexed queries whatever the history size.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Max, Min, QuerySet, Sum
from django.db.models.functions import Substr
from prometheus_client.core import GaugeMetricFamily

from alerts.models import Episode
from fleet.choices import IngestSource, IngestStatus
from fleet.freshness import current_freshness
from fleet.models import Cluster, IngestRun
from ledger.models import PruneRun, RollupHour
from notifications.choices import OPEN_OUTCOMES, DeliveryOutcome
from notifications.models import Delivery
from quotas.sync.tally import RELISTED_AFTER_GONE

# The label of runs that belong to no cluster (a simulation of every cluster), as the freshness
# banner names them.
ALL_CLUSTERS = "all clusters"
# Failed runs whose error text is classified per scrape, newest first: enough for any sane
# lookback (a failing collector leaves one a minute per cluster).
FAILED_RUNS_READ = 2_000
# The start of an error that is classified: the reason is in its first line.
ERROR_PREFIX = 300

# A failed run's reason, from its error text: the first pattern that matches, else "other".
# Bounded on purpose: a label per exception message would be a series per message.
REASONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("lease_lost", re.compile(r"ClaimLost|lease", re.IGNORECASE)),
    ("timeout", re.compile(r"timed? ?out|deadline", re.IGNORECASE)),
    ("connection", re.compile(r"connect|refused|resolve|unreachable|reset by peer", re.I)),
    ("unauthorized", re.compile(r"\b40[13]\b|unauthori[sz]ed|forbidden", re.IGNORECASE)),
    ("server_error", re.compile(r"\b5\d\d\b")),
    ("client_error", re.compile(r"\b4\d\d\b")),
    ("database", re.compile(r"OperationalError|IntegrityError|DatabaseError|database", re.I)),
    ("bad_answer", re.compile(r"malformed|invalid|decode|parse|unexpected", re.IGNORECASE)),
)
REASON_NAMES = (*(name for name, _ in REASONS), "other")


def failure_reason(error: str) -> str:
    """The bounded reason of a failed run (``REASON_NAMES``) from its error text."""
    for name, pattern in REASONS:
        if pattern.search(error):
            return name
    return "other"


def _cluster_names() -> dict[int | None, str]:
    names: dict[int | None, str] = dict(Cluster.objects.values_list("pk", "name"))
    names[None] = ALL_CLUSTERS
    return names


def _collected_sources() -> set[tuple[str, str]]:
    """(cluster, source) pairs that are expected to collect: a disabled collection is not late."""
    pairs = {(ALL_CLUSTERS, IngestSource.SIMULATION.value)}
    for name, prometheus_url, collect, sync in Cluster.objects.values_list(
        "name", "prometheus_url", "collect_enabled", "sync_enabled"
    ):
        pairs.add((name, IngestSource.SIMULATION.value))
        if collect and prometheus_url:
            pairs.add((name, IngestSource.DCGM.value))
        if sync:
            pairs.add((name, IngestSource.KUEUE.value))
    return pairs


def collection_lag(now: datetime) -> Iterable[GaugeMetricFamily]:
    """Seconds since each (cluster, source)'s newest successful run, as the pages' freshness
    banner reads it (``fleet.freshness``); +Inf when it ran but never succeeded."""
    lag = GaugeMetricFamily(
        "gpuledger_collection_lag_seconds",
        "Seconds since the newest successful collection or sync run of the cluster and source "
        "(+Inf when it has runs but none succeeded).",
        labels=["cluster", "source"],
    )
    failing = GaugeMetricFamily(
        "gpuledger_collection_failing",
        "1 when the newest run of the cluster and source failed, else 0.",
        labels=["cluster", "source"],
    )
    expected = _collected_sources()
    for entry in current_freshness(now).sources:
        if (entry.cluster, entry.source) not in expected:
            continue
        labels = [entry.cluster, entry.source]
        if entry.last_success_at is None:
            lag.add_metric(labels, float("inf"))
        else:
            lag.add_metric(labels, max(0.0, (now - entry.last_success_at).total_seconds()))
        failing.add_metric(labels, 1.0 if entry.failing else 0.0)
    return [lag, failing]


def runs(now: datetime) -> Iterable[GaugeMetricFamily]:
    """Runs, their durations, failures by reason and the Kueue sync's relists, over the
    lookback."""
    lookback = settings.GPULEDGER_METRICS_LOOKBACK_SECONDS
    since = now - timedelta(seconds=lookback)
    names = _cluster_names()
    recent = IngestRun.objects.filter(started_at__gte=since, started_at__lte=now)
    window = f"in the last GPULEDGER_METRICS_LOOKBACK_SECONDS ({lookback} s)"

    counted = GaugeMetricFamily(
        "gpuledger_runs",
        f"Collection, sync and simulation runs started {window}, by status.",
        labels=["cluster", "source", "status"],
    )
    for cluster_id, source, status, count in (
        recent.order_by()
        .values_list("cluster_id", "source", "status")
        .annotate(count=Count("pk"))
        .values_list("cluster_id", "source", "status", "count")
    ):
        counted.add_metric([names.get(cluster_id, str(cluster_id)), source, status], count)

    longest = GaugeMetricFamily(
        "gpuledger_run_duration_max_seconds",
        f"The longest finished run {window}.",
        labels=["cluster", "source"],
    )
    mean = GaugeMetricFamily(
        "gpuledger_run_duration_mean_seconds",
        f"The mean duration of the runs finished {window}.",
        labels=["cluster", "source"],
    )
    took = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    for cluster_id, source, slowest, total, finished in (
        recent.filter(finished_at__isnull=False)
        .order_by()
        .values_list("cluster_id", "source")
        .annotate(slowest=Max(took), total=Sum(took), finished=Count("pk"))
        .values_list("cluster_id", "source", "slowest", "total", "finished")
    ):
        labels = [names.get(cluster_id, str(cluster_id)), source]
        longest.add_metric(labels, _seconds(slowest))
        mean.add_metric(labels, _seconds(total) / finished if finished else 0.0)

    failures = GaugeMetricFamily(
        "gpuledger_run_failures",
        f"Failed runs {window}, by reason (timeout, connection, unauthorized, server_error, "
        "client_error, database, bad_answer, lease_lost, other).",
        labels=["cluster", "source", "reason"],
    )
    reasons: Counter[tuple[str, str, str]] = Counter()
    for cluster_id, source, error in (
        recent.filter(status=IngestStatus.FAILED)
        .annotate(start=Substr("error", 1, ERROR_PREFIX))
        .order_by("-started_at")
        .values_list("cluster_id", "source", "start")[:FAILED_RUNS_READ]
    ):
        reasons[(names.get(cluster_id, str(cluster_id)), source, failure_reason(error))] += 1
    for reason_labels, count in sorted(reasons.items()):
        failures.add_metric(list(reason_labels), count)

    return [counted, longest, mean, failures, _relists(recent, names, window)]


def _relists(
    recent: QuerySet[IngestRun], names: dict[int | None, str], window: str
) -> GaugeMetricFamily:
    """Full LISTs of the Kueue sync: one at the start of every sync run ("scheduled"), and one
    per kind whose WATCH answered ``410 Gone`` ("gone", from the run's notes)."""
    relists = GaugeMetricFamily(
        "gpuledger_sync_relists",
        f"Full LISTs of the Kueue sync {window}: scheduled (one per sync run) or gone (a "
        "WATCH answered 410 Gone).",
        labels=["cluster", "cause"],
    )
    counts: Counter[tuple[str, str]] = Counter()
    suffix = f": {RELISTED_AFTER_GONE}"
    for cluster_id, notes in recent.filter(source=IngestSource.KUEUE).values_list(
        "cluster_id", "skip_reasons"
    ):
        cluster = names.get(cluster_id, str(cluster_id))
        counts[(cluster, "scheduled")] += 1
        counts[(cluster, "gone")] += 0
        for key, value in (notes or {}).items():
            if isinstance(key, str) and key.endswith(suffix) and isinstance(value, int):
                counts[(cluster, "gone")] += value
    for labels, count in sorted(counts.items()):
        relists.add_metric(list(labels), count)
    return relists


def _seconds(value: timedelta | float | int | None) -> float:
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        return max(0.0, value.total_seconds())
    # Some backends answer a duration aggregate in microseconds.
    return max(0.0, float(value) / 1_000_000)


def rollup_lag(now: datetime) -> Iterable[GaugeMetricFamily]:
    """How far the hourly rollups are behind: per cluster, the hours that ended and whose
    rollup is due (``RollupHour.objects.due``: dirty, or unsettled), and the seconds since the
    oldest of them ended (0 when none)."""
    lag = GaugeMetricFamily(
        "gpuledger_rollup_lag_seconds",
        "Seconds since the end of the cluster's oldest hour whose rollup is due (0 when none).",
        labels=["cluster"],
    )
    due = GaugeMetricFamily(
        "gpuledger_rollup_hours_due",
        "Hours of the cluster that ended and whose rollup is due.",
        labels=["cluster"],
    )
    hour = timedelta(hours=1)
    found = {
        cluster_id: (oldest, hours)
        for cluster_id, oldest, hours in RollupHour.objects.due(now)
        .filter(hour__lte=now - hour)
        .order_by()
        .values_list("cluster_id")
        .annotate(oldest=Min("hour"), hours=Count("pk"))
        .values_list("cluster_id", "oldest", "hours")
    }
    for cluster_id, name in Cluster.objects.order_by("name").values_list("pk", "name"):
        oldest, hours = found.get(cluster_id, (None, 0))
        seconds = max(0.0, (now - (oldest + hour)).total_seconds()) if oldest else 0.0
        lag.add_metric([name], seconds)
        due.add_metric([name], hours)
    return [lag, due]


def prune(now: datetime) -> Iterable[GaugeMetricFamily]:
    """The newest finished retention run (``ledger.tasks.prune_usage``)."""
    duration = GaugeMetricFamily(
        "gpuledger_prune_duration_seconds",
        "How long the newest finished retention prune took.",
    )
    failed = GaugeMetricFamily(
        "gpuledger_prune_failed",
        "1 when the newest finished retention prune failed, else 0.",
    )
    success = GaugeMetricFamily(
        "gpuledger_prune_last_success_timestamp_seconds",
        "When the newest successful retention prune finished (Unix time).",
    )
    last = PruneRun.objects.filter(finished_at__isnull=False).order_by("-started_at").first()
    if last is not None and last.finished_at is not None:
        duration.add_metric([], max(0.0, (last.finished_at - last.started_at).total_seconds()))
        failed.add_metric([], 0.0 if last.succeeded else 1.0)
    good = (
        PruneRun.objects.filter(succeeded=True)
        .order_by("-started_at")
        .values_list("finished_at", flat=True)
        .first()
    )
    if good is not None:
        success.add_metric([], good.timestamp())
    return [duration, failed, success]


def alert_episodes() -> Iterable[GaugeMetricFamily]:
    """Open (fired, unresolved) hoarding episodes per cluster, rule and severity."""
    family = GaugeMetricFamily(
        "gpuledger_alert_episodes_open",
        "Hoarding alert episodes that fired and are not resolved.",
        labels=["cluster", "rule", "severity"],
    )
    names = _cluster_names()
    for cluster_id, rule, severity, count in (
        Episode.objects.open()
        .order_by()
        .values_list("cluster_id", "rule", "severity")
        .annotate(count=Count("pk"))
        .values_list("cluster_id", "rule", "severity", "count")
    ):
        family.add_metric([names.get(cluster_id, str(cluster_id)), rule, severity], count)
    return [family]


def notifications(now: datetime) -> Iterable[GaugeMetricFamily]:
    """The delivery outbox and the deliveries whose last try failed within the lookback."""
    lookback = settings.GPULEDGER_METRICS_LOOKBACK_SECONDS
    outbox = GaugeMetricFamily(
        "gpuledger_notification_outbox",
        "Notification deliveries waiting to be sent (pending) or tried again (retrying).",
        labels=["receiver_kind", "outcome"],
    )
    by_kind: defaultdict[tuple[str, str], int] = defaultdict(int)
    for kind, outcome, count in (
        Delivery.objects.filter(outcome__in=OPEN_OUTCOMES)
        .order_by()
        .values_list("receiver__kind", "outcome")
        .annotate(count=Count("pk"))
        .values_list("receiver__kind", "outcome", "count")
    ):
        by_kind[(kind, outcome)] += count
    for labels, count in sorted(by_kind.items()):
        outbox.add_metric(list(labels), count)

    failures = GaugeMetricFamily(
        "gpuledger_notification_failures",
        "Notification deliveries whose last try failed in the last "
        f"GPULEDGER_METRICS_LOOKBACK_SECONDS ({lookback} s): retrying, or failed (gave up).",
        labels=["receiver_kind", "outcome"],
    )
    since = now - timedelta(seconds=lookback)
    for kind, outcome, count in (
        Delivery.objects.filter(
            outcome__in=[DeliveryOutcome.RETRYING, DeliveryOutcome.FAILED], updated_at__gte=since
        )
        .order_by()
        .values_list("receiver__kind", "outcome")
        .annotate(count=Count("pk"))
        .values_list("receiver__kind", "outcome", "count")
    ):
        failures.add_metric([kind, outcome], count)
    return [outbox, failures]
