"""Kueue's own Prometheus metrics -> ClusterQueue samples, for windows the API server never saw.

Input: one window's answers to ``quotas.constants.KUEUE_QUERIES`` (Prometheus vector items), or
to ``VOLCANO_QUERIES`` / ``KAI_QUERIES``, which ask those schedulers' queue gauges in Kueue's
shape (docs/prometheus.md "Volcano and KAI Scheduler quota metrics"): the same series names and
labels, so the same reading serves them; their synced ClusterQueues give the cohorts
(``samples_of(queues=...)``).
Output: the same ``QueueSampleRow`` the sync builds from ClusterQueue status
(``build_gpu_queue_samples``), one per ClusterQueue, flavor and GPU resource (whole GPUs, and
each MIG resource in its own instances):

* ``nominal`` / ``borrowing_limit`` / ``lending_limit`` from the quota gauges; ``+Inf`` means
  the limit is unset (None), as in the API;
* ``total`` from ``kueue_cluster_queue_resource_usage`` (admitted, like ``flavorsUsage``),
  ``reserved`` from ``…_resource_reservation`` (like ``flavorsReservation``; usage when absent);
* ``borrowed`` = usage above nominal, per flavor and resource (what Kueue's status reports);
* ``lent``: inferred per direct cohort exactly as for the API's samples (``attribute_lending``);
  the cohort comes from ``kueue_cluster_queue_info{parent_cohort}`` where exported (v0.18+),
  else from the ``cohort`` label of the resource gauges; ``""`` is a standalone queue;
* ``pending_demand`` (``…_resource_pending``, v0.18+), ``pending_workloads`` (both statuses of
  ``kueue_pending_workloads``) and ``admitted_workloads`` (``kueue_admitted_active_workloads``)
  are per queue, so they go on the queue's first flavor, as the sync puts pending demand; one
  the scheduler does not export (``samples_of(unknown=...)``: Volcano's and KAI's pending
  demand, KAI's counts) is None on every row, unknown rather than 0.

A series without ``cluster_queue`` or ``flavor``, or with a value that is not a number, is
skipped and counted (``stats``), and so is a NaN (no sample). A queue with no nominal series has
no row: without a quota there is nothing to sample. Pure: no database, no network.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from core.mig import GPU_RESOURCE, gpu_share
from fleet.ingest.rows import IngestStats
from quotas.constants import KUEUE_ANSWERS
from quotas.ingest.fields import ZERO
from quotas.ingest.rows import QueueSampleRow
from quotas.ingest.samples import attribute_lending

# Series read and skipped (with why) from one window's Kueue answers: the collector's counters.
MetricStats = IngestStats


# The inputs of ``build_metric_samples`` per (queue, flavor, resource) and per queue, in the
# order they are read (a queue's cohort comes from the first gauge that names it).
PER_FLAVOR_INPUTS = ("nominal", "borrowing_limit", "lending_limit", "usage", "reservation")
PER_QUEUE_INPUTS = ("resource_pending", "pending_workloads", "admitted_workloads")


@dataclass
class MetricFigures:
    """One window's Kueue gauges, read and checked: what ``samples_of`` builds samples from."""

    nominal: dict[tuple[str, str, str], float] = field(default_factory=dict)
    borrowing_limit: dict[tuple[str, str, str], float] = field(default_factory=dict)
    lending_limit: dict[tuple[str, str, str], float] = field(default_factory=dict)
    usage: dict[tuple[str, str, str], float] = field(default_factory=dict)
    reservation: dict[tuple[str, str, str], float] = field(default_factory=dict)
    resource_pending: dict[str, float] = field(default_factory=dict)
    pending_workloads: dict[str, float] = field(default_factory=dict)
    admitted_workloads: dict[str, float] = field(default_factory=dict)
    # ClusterQueue -> direct cohort ("" = standalone), as the metrics name it.
    cohorts: dict[str, str] = field(default_factory=dict)
    stats: MetricStats = field(default_factory=MetricStats)


@dataclass
class KueueMetricsWindow:
    """What Kueue's metrics say about the ClusterQueues in one window."""

    samples: list[QueueSampleRow]
    # ClusterQueue -> direct cohort ("" = standalone), as the metrics name it.
    cohorts: dict[str, str]
    stats: MetricStats


def route_answers(answers: Mapping[str, Sequence[object]]) -> dict[str, list[object]]:
    """The answers to ``quotas.constants.KUEUE_QUERIES``, split by metric name into the inputs
    of ``build_metric_samples``; ``kueue_pending_workloads`` is summed over its statuses."""
    routed: dict[str, list[object]] = defaultdict(list)
    pending: dict[str, float] = defaultdict(float)
    for name, items in answers.items():
        for item in items:
            metric = item.get("metric") if isinstance(item, dict) else None
            metric_name = metric.get("__name__", "") if isinstance(metric, dict) else ""
            target = "info" if name == "info" else KUEUE_ANSWERS.get(str(metric_name), "")
            if target == "pending_workloads" and isinstance(item, dict):
                value = item.get("value")
                try:
                    number = float(value[1])  # type: ignore[index]
                except (TypeError, ValueError, IndexError):
                    routed["pending_workloads"].append(item)
                    continue
                pending[str(metric.get("cluster_queue") or "")] += number  # type: ignore[union-attr]
                continue
            routed[target or "unknown"].append(item)
    for queue, count in pending.items():
        routed["pending_workloads"].append(
            {"metric": {"cluster_queue": queue}, "value": [0, repr(count)]}
        )
    return dict(routed)


def _value(item: object, stats: MetricStats) -> tuple[dict, float] | None:
    """(labels, value) of one vector item; None (counted) when unusable or NaN."""
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        stats.skip("kueue_malformed_item")
        return None
    value = item.get("value")
    if not isinstance(value, list | tuple) or len(value) != 2:
        stats.skip("kueue_malformed_value")
        return None
    try:
        number = float(value[1])
    except (TypeError, ValueError):
        stats.skip("kueue_malformed_value")
        return None
    if math.isnan(number):
        stats.skip("kueue_nan")
        return None
    return item["metric"], number


@functools.lru_cache(maxsize=4096)
def _decimal(number: float) -> Decimal | None:
    """The value as a Decimal; None for +Inf (an unset limit), and for -Inf. Cached: a window's
    gauges repeat a few quotas and usages over thousands of series and windows."""
    if math.isinf(number):
        return None
    try:
        return Decimal(repr(number))
    except InvalidOperation:
        return None


def _labelled(
    items: Sequence[object], stats: MetricStats, needed: tuple[str, ...]
) -> Iterator[tuple[Mapping[str, Any], tuple[str, ...], float]]:
    """Each readable item's labels, the values of its ``needed`` labels and its number; items
    without one of those labels are skipped and counted."""
    for item in items:
        stats.records_read += 1
        parsed = _value(item, stats)
        if parsed is None:
            continue
        labels, number = parsed
        key = tuple(str(labels.get(name) or "") for name in needed)
        if not all(key):
            stats.skip("kueue_missing_labels")
            continue
        yield labels, key, number


def _per_flavor(
    items: Sequence[object], stats: MetricStats, cohorts: dict[str, str]
) -> dict[tuple[str, str, str], float]:
    """(queue, flavor, resource) -> value; a series without ``resource`` is whole GPUs (the
    query asked for GPU resources only), one of a MIG resource of no known profile is skipped."""
    found: dict[tuple[str, str, str], float] = {}
    for labels, (queue, flavor), number in _labelled(items, stats, ("cluster_queue", "flavor")):
        resource = str(labels.get("resource") or GPU_RESOURCE)
        if gpu_share(resource) is None:
            stats.skip("kueue_not_a_gpu_resource")
            continue
        cohorts.setdefault(queue, str(labels.get("cohort") or ""))
        found[(queue, flavor, resource)] = number
    return found


def _per_queue(items: Sequence[object], stats: MetricStats) -> dict[str, float]:
    return {queue: number for _, (queue,), number in _labelled(items, stats, ("cluster_queue",))}


def _count(number: float | None) -> int:
    if number is None or math.isinf(number) or number < 0:
        return 0
    return round(number)


def build_metric_samples(
    answers: Mapping[str, Sequence[object]],
    *,
    flavor_order: Mapping[str, Sequence[str]] | None = None,
    cohort_quota: Mapping[tuple[str, str], Decimal] | None = None,
    queues: Mapping[str, str] | None = None,
    unknown: frozenset[str] = frozenset(),
) -> KueueMetricsWindow:
    """One window's ClusterQueue samples from Kueue's metrics (see the module docstring).

    ``flavor_order``: a queue's flavors in its ``resourceGroups`` order (from the stored
    ClusterQueue), so per-queue figures land on the flavor Kueue tries first; queues not in it
    use the sorted flavor names. ``cohort_quota``: (cohort, flavor) -> the cohort's own quota.
    ``queues``, ``unknown``: as for ``samples_of``.
    """
    return samples_of(
        read_window(answers),
        flavor_order=flavor_order,
        cohort_quota=cohort_quota,
        queues=queues,
        unknown=unknown,
    )


def read_window(answers: Mapping[str, Sequence[object]]) -> MetricFigures:
    """One window's answers (``route_answers``), read and checked; ``quotas.ingest.metric_range``
    reads a range answer's windows to the same figures."""
    figures = MetricFigures()
    stats, cohorts = figures.stats, figures.cohorts
    for name in PER_FLAVOR_INPUTS:
        getattr(figures, name).update(_per_flavor(answers.get(name, []), stats, cohorts))
    for name in PER_QUEUE_INPUTS:
        getattr(figures, name).update(_per_queue(answers.get(name, []), stats))
    for item in answers.get("info", []):
        stats.records_read += 1
        parsed = _value(item, stats)
        if parsed is None:
            continue
        labels, _ = parsed
        queue = labels.get("cluster_queue") or ""
        if queue:
            cohorts[str(queue)] = str(labels.get("parent_cohort") or "")
    return figures


def samples_of(
    figures: MetricFigures,
    *,
    flavor_order: Mapping[str, Sequence[str]] | None = None,
    cohort_quota: Mapping[tuple[str, str], Decimal] | None = None,
    queues: Mapping[str, str] | None = None,
    unknown: frozenset[str] = frozenset(),
    borrows: bool = True,
) -> KueueMetricsWindow:
    """The window's samples from its read figures (``build_metric_samples``).

    ``unknown``: the per-queue inputs (``PER_QUEUE_INPUTS``) the scheduler's metrics do not
    export (``quotas.constants.QUOTA_METRIC_UNEXPORTED``): their sample figures are None,
    unknown, on every row, not 0.

    ``borrows``: False for a source whose queues have nothing to borrow from
    (``quotas.constants.QUOTA_METRIC_NO_BORROWING``: a namespace's ResourceQuota): usage above
    the nominal quota (a hard limit lowered under running pods) is over quota, not borrowed, as
    the live translation reads it.

    ``queues``: for a scheduler whose metrics name no cohort (Volcano, KAI), its synced
    ClusterQueues and their cohorts (``quotas.store.samples.synced_cohorts``): only those queues
    are sampled (its metrics cover parent queues too, which are Cohorts) and each is placed in
    its synced cohort.
    """
    if queues is not None:
        figures = _only(figures, queues)
    nominal, borrowing, lending = figures.nominal, figures.borrowing_limit, figures.lending_limit
    usage, reservation = figures.usage, figures.reservation
    pending, pending_count = figures.resource_pending, figures.pending_workloads
    admitted_count, cohorts, stats = figures.admitted_workloads, figures.cohorts, figures.stats
    flavors_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    for queue, flavor, resource in nominal:
        flavors_of[(queue, resource)].add(flavor)
    order = flavor_order or {}
    samples: list[QueueSampleRow] = []
    for queue, resource in sorted(flavors_of, key=lambda k: (k[0], k[1] != GPU_RESOURCE, k[1])):
        known = list(
            dict.fromkeys(f for f in order.get(queue, ()) if f in flavors_of[(queue, resource)])
        )
        flavors = known + sorted(flavors_of[(queue, resource)] - set(known))
        # Per-queue figures go on the first flavor of whole GPUs (the pending demand is in GPUs);
        # a queue with MIG quota only has its counts on its first MIG flavor, no demand there.
        whole = (queue, GPU_RESOURCE) in flavors_of
        for index, flavor in enumerate(flavors):
            key = (queue, flavor, resource)
            quota = _decimal(nominal[key]) or ZERO
            used = _decimal(usage.get(key, 0.0)) or ZERO
            reserved = _decimal(reservation[key]) or ZERO if key in reservation else used
            first = index == 0 and (resource == GPU_RESOURCE or not whole)
            if first and not whole and any(s.cluster_queue_name == queue for s in samples):
                first = False
            demand = (_decimal(pending.get(queue, 0.0)) or ZERO) if first and whole else ZERO
            samples.append(
                QueueSampleRow(
                    cluster_queue_name=queue,
                    flavor_name=flavor,
                    resource=resource,
                    total=used,
                    reserved=reserved,
                    borrowed=max(ZERO, used - quota) if borrows else ZERO,
                    lent=ZERO,
                    nominal=quota,
                    borrowing_limit=_decimal(borrowing[key]) if key in borrowing else None,
                    lending_limit=_decimal(lending[key]) if key in lending else None,
                    pending_demand=demand,
                    pending_workloads=_count(pending_count.get(queue)) if first else 0,
                    admitted_workloads=_count(admitted_count.get(queue)) if first else 0,
                )
            )
    _leave_unknown(samples, unknown)
    cohort_of = {queue: cohort for queue, cohort in cohorts.items() if cohort}
    # Lending is inferred per resource: borrowed MIG instances are lent by MIG quota of the same
    # profile. The cohorts' own pools are known for whole GPUs only.
    for resource in sorted({sample.resource for sample in samples}):
        same = [sample for sample in samples if sample.resource == resource]
        pools = (cohort_quota or {}) if resource == GPU_RESOURCE else {}
        attribute_lending(same, cohort_of, pools)
    return KueueMetricsWindow(samples=samples, cohorts=cohorts, stats=stats)


# A per-queue input -> the sample figure it gives.
_QUEUE_FIGURES = {
    "resource_pending": "pending_demand",
    "pending_workloads": "pending_workloads",
    "admitted_workloads": "admitted_workloads",
}


def _leave_unknown(samples: list[QueueSampleRow], unknown: frozenset[str]) -> None:
    """The figures of the ``unknown`` inputs as None on every sample."""
    figures = [_QUEUE_FIGURES[name] for name in sorted(unknown) if name in _QUEUE_FIGURES]
    for sample in samples:
        for figure in figures:
            setattr(sample, figure, None)


def _only(figures: MetricFigures, queues: Mapping[str, str]) -> MetricFigures:
    """The figures of ``queues`` only, each queue in its cohort from ``queues``."""
    kept = MetricFigures(stats=figures.stats, cohorts=dict(queues))
    for name in PER_FLAVOR_INPUTS:
        found = getattr(figures, name)
        getattr(kept, name).update({key: v for key, v in found.items() if key[0] in queues})
    for name in PER_QUEUE_INPUTS:
        found = getattr(figures, name)
        getattr(kept, name).update({key: v for key, v in found.items() if key in queues})
    return kept
