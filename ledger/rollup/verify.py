"""Check rollups against the usage rows they come from, and rebuild ranges (``manage.py rollup``).

The check recomputes, per hour, the fleet's capacity, allocated, telemetry, active and idle
GPU-hours, the same per namespace, and the fleet's quota GPU-hours, straight from ``GpuUsage``
and ``ClusterQueueSample`` rows and without the rollup code: one GROUP BY per window (the window's
length is taken in Python), summed over the hour. It then compares them with the hour's
``HourlyRollup`` rows. A rollup that is missing, stale or was edited shows up as differences.

An hour whose usage rows were pruned (``completeness.usage_gone``) cannot be checked: its rollup
is all that is left, so it is reported as not verifiable, and neither a repair nor a rebuild
touches it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q, Sum

from core.mig import gpu_resource_q, gpu_share
from core.timewindows import ensure_aware, hour_floor
from fleet.models import Cluster
from ledger.choices import RollupScope
from ledger.figures import BY_NAME, sum_q, thresholds
from ledger.models import GpuUsage, HourlyRollup
from ledger.rollup.completeness import usage_gone
from ledger.rollup.groups import UNATTRIBUTED
from ledger.rollup.hour import HOUR, roll_up_hour
from ledger.rollup.pending import sync_horizon, waited_gpu_hours
from quotas.models import ClusterQueueSample

USAGE_CHECKED = (
    "capacity_gpu_hours",
    "allocated_gpu_hours",
    "telemetry_gpu_hours",
    "active_gpu_hours",
    "idle_gpu_hours",
)
QUOTA_CHECKED = (
    "nominal_gpu_hours",
    "borrowed_gpu_hours",
    "lent_gpu_hours",
    "pending_gpu_hours",
)
# Figure → (sample field) for the quota figures, as ``window_seconds`` × value / 3600;
# pending_gpu_hours comes from the Workloads' waiting intervals (``ledger.rollup.pending``).
QUOTA_SOURCES = {
    "nominal_gpu_hours": "nominal",
    "borrowed_gpu_hours": "borrowed",
    "lent_gpu_hours": "lent",
}
# Sums over the same rows in another order differ in the last bits only.
RELATIVE_TOLERANCE = 1e-6
ABSOLUTE_TOLERANCE = 1e-9

Totals = dict[tuple[str, str], dict[str, float]]


@dataclass
class HourCheck:
    """One hour's verdict: differences (empty when it agrees), or why it cannot be checked."""

    hour: datetime
    differences: list[str] = field(default_factory=list)
    unverifiable: str = ""

    @property
    def differs(self) -> bool:
        return bool(self.differences)


@dataclass
class Rebuilt:
    rolled_up: list[datetime] = field(default_factory=list)
    rows: int = 0
    kept: list[tuple[datetime, str]] = field(default_factory=list)


def hours_of(start: datetime, end: datetime) -> Iterator[datetime]:
    """Every hour that touches ``[start, end)``, oldest first."""
    hour = hour_floor(ensure_aware(start))
    end = ensure_aware(end)
    while hour < end:
        yield hour
        hour += HOUR


def _usage(cluster: Cluster, hour: datetime) -> Q:
    return Q(cluster_id=cluster.pk, window_end__gt=hour, window_end__lte=hour + HOUR)


def usage_totals(cluster: Cluster, hour: datetime) -> Totals:
    """The checked figures of the hour, by (scope, key), from the usage and sample rows alone."""
    totals: Totals = defaultdict(lambda: defaultdict(float))
    limits = thresholds()
    checked = ("allocated_gpu_hours", "telemetry_gpu_hours", "active_gpu_hours", "idle_gpu_hours")
    sums = {
        name: Sum(expression, filter=rows)
        for name in checked
        for expression, rows in [sum_q(BY_NAME[name], limits)]
    }
    allocated = BY_NAME["allocated_gpu_hours"].rows.q(limits)
    usage = GpuUsage.objects.filter(_usage(cluster, hour)).order_by()
    fleet = totals[(RollupScope.FLEET, cluster.name)]
    per_window = usage.values("window_start", "window_end").annotate(
        capacity_gpu_hours=Sum("capacity_gpus"), **sums
    )
    for start, end, *values in per_window.values_list("window_start", "window_end", *USAGE_CHECKED):
        hours = (end - start).total_seconds() / 3600
        for figure, value in zip(USAGE_CHECKED, values, strict=True):
            fleet[figure] += (value or 0.0) * hours
    per_namespace = (
        usage.filter(allocated).values("window_start", "window_end", "namespace").annotate(**sums)
    )
    for start, end, name, *values in per_namespace.values_list(
        "window_start", "window_end", "namespace", *sums
    ):
        hours = (end - start).total_seconds() / 3600
        namespace = totals[(RollupScope.NAMESPACE, name or UNATTRIBUTED)]
        for figure, value in zip(sums, values, strict=True):
            namespace[figure] += (value or 0.0) * hours
    samples = ClusterQueueSample.objects.filter(
        gpu_resource_q(),
        cluster_queue__cluster_id=cluster.pk,
        sampled_at__gt=hour,
        sampled_at__lte=hour + HOUR,
    ).values_list("resource", "window_seconds", *QUOTA_SOURCES.values())
    for resource, window_seconds, *values in samples:
        # In GPUs, counted here in Python: whole GPUs 1 each, MIG instances slices/7.
        share = gpu_share(resource) or 0.0
        for figure, value in zip(QUOTA_SOURCES, values, strict=True):
            fleet[figure] += float(value or 0) * share * window_seconds / 3600
    for _row, gpu_hours in waited_gpu_hours(cluster, hour, sync_horizon(cluster.pk)):
        fleet["pending_gpu_hours"] += gpu_hours
    return totals


def rollup_totals(cluster: Cluster, hour: datetime) -> Totals:
    """The same figures as the hour's fleet and namespace rollup rows say (summed over splits)."""
    totals: Totals = defaultdict(lambda: defaultdict(float))
    figures = (*USAGE_CHECKED, *QUOTA_CHECKED)
    rows = HourlyRollup.objects.filter(
        cluster_id=cluster.pk,
        hour=hour,
        scope__in=[RollupScope.FLEET, RollupScope.NAMESPACE],
    ).values_list("scope", "key", *figures)
    for scope, key, *values in rows:
        target = totals[(scope, key)]
        for figure, value in zip(figures, values, strict=True):
            target[figure] += value
    return totals


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= ABSOLUTE_TOLERANCE + RELATIVE_TOLERANCE * max(abs(a), abs(b))


def compare(expected: Totals, actual: Totals) -> list[str]:
    """Every figure where the rollup (``actual``) disagrees with the usage rows (``expected``)."""
    differences = []
    for scope, key in sorted(set(expected) | set(actual)):
        wanted = expected.get((scope, key), {})
        found = actual.get((scope, key), {})
        figures = USAGE_CHECKED if scope == RollupScope.FLEET else USAGE_CHECKED[1:]
        if scope == RollupScope.FLEET:
            figures = (*figures, *QUOTA_CHECKED)
        for figure in figures:
            usage, rollup = wanted.get(figure, 0.0), found.get(figure, 0.0)
            if not _close(usage, rollup):
                differences.append(
                    f"{scope} {key}: {figure} is {rollup:.6f} in the rollup, "
                    f"{usage:.6f} from the usage rows"
                )
    return differences


def verify_hour(cluster: Cluster, hour: datetime) -> HourCheck:
    check = HourCheck(hour=hour)
    check.unverifiable = usage_gone(cluster.pk, hour)
    if check.unverifiable:
        return check
    expected = usage_totals(cluster, hour)
    actual = rollup_totals(cluster, hour)
    if expected and not actual:
        check.differences.append("no rollup rows, though the hour has usage rows")
    else:
        check.differences = compare(expected, actual)
    return check


def verify_range(cluster: Cluster, start: datetime, end: datetime) -> list[HourCheck]:
    """One ``HourCheck`` per hour of the range that has usage, samples or rollup rows."""
    return [
        verify_hour(cluster, hour) for hour in hours_of(start, end) if _has_anything(cluster, hour)
    ]


def _has_anything(cluster: Cluster, hour: datetime) -> bool:
    return (
        GpuUsage.objects.filter(_usage(cluster, hour)).exists()
        or HourlyRollup.objects.filter(cluster_id=cluster.pk, hour=hour).exists()
        or ClusterQueueSample.objects.filter(
            cluster_queue__cluster_id=cluster.pk, sampled_at__gt=hour, sampled_at__lte=hour + HOUR
        ).exists()
    )


def rebuild_hours(cluster: Cluster, hours: Iterable[datetime]) -> Rebuilt:
    """Roll up again every one of ``hours`` that still has its usage rows.

    Idempotent: the rows of an hour are replaced as a whole. Hours with nothing in them are left
    out; hours whose usage was pruned are kept as they are and listed in ``kept``.
    """
    rebuilt = Rebuilt()
    for hour in hours:
        if not _has_anything(cluster, hour):
            continue
        reason = usage_gone(cluster.pk, hour)
        if reason:
            rebuilt.kept.append((hour, reason))
            continue
        rebuilt.rows += roll_up_hour(cluster.pk, hour)
        rebuilt.rolled_up.append(hour)
    return rebuilt
