"""Hours before the install, from Kueue's own metrics in Prometheus (``QueueMetricsHour``).

Each query is a range query at hour ends with a one-hour ``increase()``, so the value at ``t``
covers ``(t - 1h, t]``:

* ``kueue_admitted_workloads_total`` -> admissions per ClusterQueue;
* ``kueue_admission_wait_time_seconds`` (ClusterQueue) and
  ``kueue_local_queue_admission_wait_time_seconds`` (LocalQueue ``namespace``/``name``) ->
  ``histogram_quantile`` p50/p90/p95, the mean (sum / count) and the buckets themselves;
* ``kueue_evicted_workloads_total{reason}`` -> evictions per ClusterQueue and reason;
* ``kueue_preempted_workloads_total{reason, preempting_cluster_queue}`` -> preemptions made.

Series of Kueue's follower replicas are left out, as the sync's metrics are. A value that is NaN
(no observation in the hour), infinite or not a number is skipped and counted, never stored; a
series without its queue label likewise. Writing is idempotent (one row per cluster, scope, queue
and hour, replaced when read again) and resumable: ``fill_hours`` commits day by day and
``resume=True`` starts after the newest hour already stored in the range.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction

from core.timewindows import floor_time
from fleet.models import Cluster
from quotas.constants import KUEUE_REPLICA_FILTER
from servicelevels.choices import MetricsScope
from servicelevels.models import QueueMetricsHour

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
CHUNK = timedelta(days=1)
CQ_WAIT = "kueue_admission_wait_time_seconds"
LQ_WAIT = "kueue_local_queue_admission_wait_time_seconds"
ADMITTED = "kueue_admitted_workloads_total"
EVICTED = "kueue_evicted_workloads_total"
PREEMPTED = "kueue_preempted_workloads_total"
QUANTILES = {"wait_seconds_p50": 0.5, "wait_seconds_p90": 0.9, "wait_seconds_p95": 0.95}
_F = f"{{{KUEUE_REPLICA_FILTER}}}"
_CQ = "cluster_queue"
_LQ = "namespace, name"


def queries() -> dict[str, str]:
    """Name -> PromQL, evaluated at each hour end."""
    out = {
        "cq_admitted": f"sum by ({_CQ}) (increase({ADMITTED}{_F}[1h]))",
        "cq_evicted": f"sum by ({_CQ}, reason) (increase({EVICTED}{_F}[1h]))",
        "cq_preempted": (
            f"sum by (preempting_cluster_queue, reason) (increase({PREEMPTED}{_F}[1h]))"
        ),
    }
    for prefix, metric, by in (("cq", CQ_WAIT, _CQ), ("lq", LQ_WAIT, _LQ)):
        out[f"{prefix}_buckets"] = f"sum by ({by}, le) (increase({metric}_bucket{_F}[1h]))"
        out[f"{prefix}_sum"] = f"sum by ({by}) (increase({metric}_sum{_F}[1h]))"
        out[f"{prefix}_count"] = f"sum by ({by}) (increase({metric}_count{_F}[1h]))"
        for name, q in QUANTILES.items():
            out[f"{prefix}_{name}"] = (
                f"histogram_quantile({q}, sum by ({by}, le) (increase({metric}_bucket{_F}[1h])))"
            )
    return out


@dataclass
class FillResult:
    hours_written: int = 0
    series_read: int = 0
    skipped: int = 0
    skip_reasons: Counter[str] = field(default_factory=Counter)

    def skip(self, reason: str) -> None:
        self.skipped += 1
        self.skip_reasons[reason] += 1


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _moment(value: Any) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(value), tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


Key = tuple[str, str, datetime]  # scope, queue name, hour start


def parse_answers(
    answers: Mapping[str, list[dict[str, Any]]], result: FillResult
) -> dict[Key, dict]:
    """Range-query answers -> field values per (scope, queue, hour). Pure."""
    hours: dict[Key, dict[str, Any]] = {}

    def entry(scope: str, name: str, end: datetime) -> dict[str, Any]:
        return hours.setdefault((scope, name, end - HOUR), {})

    for query, series_list in answers.items():
        prefix, _, what = query.partition("_")
        scope = MetricsScope.CLUSTER_QUEUE if prefix == "cq" else MetricsScope.LOCAL_QUEUE
        for series in series_list:
            result.series_read += 1
            labels = series.get("metric") or {}
            if what == "preempted":
                name = labels.get("preempting_cluster_queue") or ""
            elif scope == MetricsScope.CLUSTER_QUEUE:
                name = labels.get("cluster_queue") or ""
            else:
                ns, lq = labels.get("namespace") or "", labels.get("name") or ""
                name = f"{ns}/{lq}" if ns and lq else ""
            if not name:
                result.skip("no_queue_label")
                continue
            for point in series.get("values") or []:
                end = _moment(point[0]) if isinstance(point, list | tuple) and point else None
                value = _number(point[1]) if end is not None and len(point) > 1 else None
                if end is None or value is None:
                    result.skip("not_a_number")
                    continue
                row = entry(scope, name, end)
                if what == "admitted":
                    row["admissions"] = round(value)
                elif what == "evicted":
                    reason = labels.get("reason") or "Other"
                    row.setdefault("evictions", {})[reason] = round(value)
                elif what == "preempted":
                    reason = labels.get("reason") or "Other"
                    row.setdefault("preemptions_made", {})[reason] = round(value)
                elif what == "buckets":
                    le = labels.get("le")
                    if le is None:
                        result.skip("no_le_label")
                        continue
                    row.setdefault("wait_buckets", {})[le] = value
                elif what == "sum":
                    row["wait_seconds_sum"] = value
                elif what == "count":
                    row["wait_count"] = value
                    if scope == MetricsScope.LOCAL_QUEUE:
                        row["admissions"] = round(value)
                else:
                    row[what] = value
    for row in hours.values():
        if row.get("wait_count"):
            row["wait_seconds_mean"] = row.get("wait_seconds_sum", 0.0) / row["wait_count"]
        for name in ("evictions", "preemptions_made"):
            if name in row:
                row[name] = {k: v for k, v in sorted(row[name].items()) if v > 0}
    return hours


Query = Callable[[str, datetime, datetime, int], list[dict[str, Any]]]


def fill_hours(
    cluster: Cluster,
    start: datetime,
    end: datetime,
    query_range: Query,
    *,
    resume: bool = False,
    progress: Callable[[datetime], None] | None = None,
) -> FillResult:
    """Read and store the hours ``(start, end]`` (whole UTC hours), one day per transaction."""
    result = FillResult()
    first = floor_time(start, 3600)
    last = floor_time(end, 3600)
    if resume:
        newest = (
            QueueMetricsHour.objects.filter(cluster=cluster, hour__gte=first, hour__lt=last)
            .order_by("-hour")
            .values_list("hour", flat=True)
            .first()
        )
        if newest is not None:
            first = newest + HOUR
    chunk_start = first
    while chunk_start < last:
        chunk_end = min(chunk_start + CHUNK, last)
        answers = {
            name: query_range(promql, chunk_start + HOUR, chunk_end, 3600)
            for name, promql in queries().items()
        }
        hours = parse_answers(answers, result)
        _write(cluster, hours, chunk_start, chunk_end)
        result.hours_written += len(hours)
        if progress is not None:
            progress(chunk_end)
        chunk_start = chunk_end
    if result.skipped:
        logger.info(
            "Kueue metrics hours for %s: skipped %d values (%s)",
            cluster.name,
            result.skipped,
            dict(result.skip_reasons),
        )
    return result


def _write(cluster: Cluster, hours: dict[Key, dict], start: datetime, end: datetime) -> None:
    rows = [
        QueueMetricsHour(cluster=cluster, scope=scope, name=name, hour=hour, **values)
        for (scope, name, hour), values in sorted(hours.items())
        if start <= hour < end
    ]
    with transaction.atomic():
        # A re-read hour replaces what was stored for it: the range is read whole again.
        QueueMetricsHour.objects.filter(cluster=cluster, hour__gte=start, hour__lt=end).delete()
        QueueMetricsHour.objects.bulk_create(rows, batch_size=1000)


def bucket_quantile(q: float, buckets: Mapping[str, float]) -> float | None:
    """``histogram_quantile`` of cumulative bucket counts {upper bound: count}, as Prometheus
    computes it: linear within the bucket, the lower bound of the first bucket 0, and the
    second-highest bound when the rank falls in the ``+Inf`` bucket. None without observations."""
    bounds: list[tuple[float, float]] = []
    for le, count in buckets.items():
        bound = _number(le) if le not in ("+Inf", "Inf") else math.inf
        if bound is None and le not in ("+Inf", "Inf"):
            continue
        bounds.append((bound if bound is not None else math.inf, float(count)))
    bounds.sort()
    if not bounds or bounds[-1][0] != math.inf:
        return None
    total = bounds[-1][1]
    if total <= 0:
        return None
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for index, (bound, count) in enumerate(bounds):
        if count >= rank:
            if bound == math.inf:
                return bounds[index - 1][0] if index > 0 else None
            if index == 0 and bound <= 0:
                return bound
            if count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (
                count - previous_count
            )
        previous_bound, previous_count = bound, count
    return None
