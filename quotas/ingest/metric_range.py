"""Kueue's gauges over a range of windows (range answers) -> one ``MetricFigures`` per window.

The same figures as ``route_answers`` + ``read_window`` give for each window's vector items, with
the same checks and the same skip counts, read series by series: a series' labels are looked at
once, not once per window, and no vector item is made per point. A deep-backfilled hour reads
1,000 ClusterQueues' gauges over 60 windows this way (``ledger.deep.backfill``).

Input: the matrix answers to ``quotas.constants.QUOTA_METRIC_QUERIES`` (Kueue's, or Volcano's
or KAI's in Kueue's shape) by query name. Malformed
matrix items and points are skipped and counted in the ``stats`` given (as ``split_matrix``
counts them); the figures' own skips are counted in each window's ``MetricFigures.stats``.
Pure: no database, no network.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from core.mig import GPU_RESOURCE, gpu_share
from fleet.ingest import IngestStats
from fleet.ingest.answers import matrix_points
from quotas.constants import KUEUE_ANSWERS
from quotas.ingest.metrics import PER_FLAVOR_INPUTS, PER_QUEUE_INPUTS, MetricFigures

_Points = list[tuple[float, Any]]
# The window of a timestamp, made on first use.
_At = Callable[[float], MetricFigures]


def read_range(
    answers: Mapping[str, list[dict]], stats: IngestStats | None = None
) -> dict[float, MetricFigures]:
    """Each window's figures by its timestamp (only timestamps that have points)."""
    series = _series_by_input(answers, stats)
    windows: dict[float, MetricFigures] = {}

    def at(ts: float) -> MetricFigures:
        figures = windows.get(ts)
        if figures is None:
            figures = windows[ts] = MetricFigures()
        return figures

    for name in PER_FLAVOR_INPUTS:
        for labels, points in series.get(name, []):
            _read_per_flavor(name, labels, points, at)
    for name in PER_QUEUE_INPUTS:
        if name == "pending_workloads":
            _read_pending_workloads(series.get(name, []), at)
            continue
        for labels, points in series.get(name, []):
            _read_per_queue(name, labels, points, at)
    for labels, points in series.get("info", []):
        queue = str(labels.get("cluster_queue") or "")
        parent = str(labels.get("parent_cohort") or "")
        for figures, _number in _numbers(points, at):
            if queue:
                figures.cohorts[queue] = parent
    return dict(sorted(windows.items()))


def _series_by_input(
    answers: Mapping[str, list[dict]], stats: IngestStats | None
) -> dict[str, list[tuple[Mapping[str, Any], _Points]]]:
    """Each series' labels and points, by the ``build_metric_samples`` input it feeds (as
    ``route_answers`` routes vector items); series of no input are left out, as it leaves them."""
    by_input: dict[str, list[tuple[Mapping[str, Any], _Points]]] = defaultdict(list)
    for name, items in answers.items():
        current: Mapping[str, Any] | None = None
        points: _Points = []
        for labels, ts, raw in matrix_points(items, stats):
            if labels is not current:
                current, points = labels, []
                target = (
                    "info"
                    if name == "info"
                    else KUEUE_ANSWERS.get(str(labels.get("__name__", "")), "")
                )
                if target:
                    by_input[target].append((labels, points))
            points.append((ts, raw))
    return by_input


def _numbers(points: _Points, at: _At) -> Iterator[tuple[MetricFigures, float]]:
    """Each point's window and number, counted as read; a NaN (no sample) and a value that is not
    a number (malformed) are left out and counted."""
    for ts, raw in points:
        figures = at(ts)
        figures.stats.records_read += 1
        try:
            number = float(raw)
        except (TypeError, ValueError):
            figures.stats.skip("kueue_malformed_value")
            continue
        if math.isnan(number):
            figures.stats.skip("kueue_nan")
            continue
        yield figures, number


def _read_per_flavor(name: str, labels: Mapping[str, Any], points: _Points, at: _At) -> None:
    queue = str(labels.get("cluster_queue") or "")
    flavor = str(labels.get("flavor") or "")
    resource = str(labels.get("resource") or GPU_RESOURCE)
    cohort = str(labels.get("cohort") or "")
    key = (queue, flavor, resource)
    # The series' labels decide for every one of its points.
    unusable = (
        "kueue_missing_labels"
        if not (queue and flavor)
        else "kueue_not_a_gpu_resource"
        if gpu_share(resource) is None
        else ""
    )
    for figures, number in _numbers(points, at):
        if unusable:
            figures.stats.skip(unusable)
        else:
            figures.cohorts.setdefault(queue, cohort)
            getattr(figures, name)[key] = number


def _read_per_queue(name: str, labels: Mapping[str, Any], points: _Points, at: _At) -> None:
    queue = str(labels.get("cluster_queue") or "")
    for figures, number in _numbers(points, at):
        if queue:
            getattr(figures, name)[queue] = number
        else:
            figures.stats.skip("kueue_missing_labels")


def _read_pending_workloads(series: list[tuple[Mapping[str, Any], _Points]], at: _At) -> None:
    """``kueue_pending_workloads`` summed over its statuses per queue and window, as
    ``route_answers`` sums it; a value that is not a number is one malformed item."""
    summed: dict[float, dict[str, float]] = defaultdict(dict)
    for labels, points in series:
        queue = str(labels.get("cluster_queue") or "")
        for ts, raw in points:
            try:
                number = float(raw)
            except (TypeError, ValueError):
                stats = at(ts).stats
                stats.records_read += 1
                stats.skip("kueue_malformed_value")
                continue
            by_queue = summed[ts]
            by_queue[queue] = by_queue.get(queue, 0.0) + number
    for ts, by_queue in summed.items():
        figures = at(ts)
        for queue, number in by_queue.items():
            figures.stats.records_read += 1
            if math.isnan(number):
                figures.stats.skip("kueue_nan")
                continue
            if queue:
                figures.pending_workloads[queue] = number
            else:
                figures.stats.skip("kueue_missing_labels")
