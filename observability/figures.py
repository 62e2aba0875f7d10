"""The product's figures as Prometheus gauges, per cluster, team and ClusterQueue
(README "Metrics").

Nothing is derived here: GPUs now are ``ledger.now.figures_now`` over each cluster's newest
collected window (the pages' "now"), GPU-hours of the last complete hour are the read layer's
(``HourlyRollup.objects...figures``) over that hour (docs/architecture.md "Read layer").

Labels are bounded: per cluster, the ``GPULEDGER_METRICS_MAX_TEAMS`` teams and
``GPULEDGER_METRICS_MAX_CLUSTER_QUEUES`` ClusterQueues holding the most GPUs now (then the most
active GPU-hours, then by name) get series of their own; the others are summed under
``(other)``. GPUs held by no team or queue are ``(unattributed)``, as in the rollups. There is
no series per GPU, node or workload.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from prometheus_client.core import GaugeMetricFamily

from core.timewindows import hour_floor
from fleet.models import Cluster
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.now import figures_now, latest_windows
from ledger.range_figures import Figures
from ledger.rollup.groups import UNATTRIBUTED
from quotas.models import ClusterQueue, Team

OTHER = "(other)"
HOUR = timedelta(hours=1)


@dataclass
class GroupFigures:
    allocated: float = 0.0
    idle: float = 0.0
    active_hours: float = 0.0

    def add(self, other: GroupFigures) -> None:
        self.allocated += other.allocated
        self.idle += other.idle
        self.active_hours += other.active_hours


@dataclass(frozen=True)
class Dimension:
    """Teams or ClusterQueues: the label (and metric prefix), the usage field, the rollup scope
    and the cap."""

    label: str
    field: str
    scope: str
    noun: str

    def cap(self) -> int:
        if self.scope == RollupScope.TEAM:
            return int(settings.GPULEDGER_METRICS_MAX_TEAMS)
        return int(settings.GPULEDGER_METRICS_MAX_CLUSTER_QUEUES)

    def names(self) -> dict[int, str]:
        model = Team if self.scope == RollupScope.TEAM else ClusterQueue
        return dict(model.objects.values_list("pk", "name"))


TEAMS = Dimension("team", "team_id", RollupScope.TEAM, "team")
QUEUES = Dimension("cluster_queue", "cluster_queue_id", RollupScope.CLUSTER_QUEUE, "ClusterQueue")


def bounded(groups: dict[str, GroupFigures], cap: int) -> dict[str, GroupFigures]:
    """The ``cap`` groups holding the most GPUs now (then the most active GPU-hours, then by
    name) as they are, the rest summed under ``(other)``."""
    ranked = sorted(
        groups.items(), key=lambda item: (-item[1].allocated, -item[1].active_hours, item[0])
    )
    kept = dict(ranked[:cap])
    if len(ranked) > cap:
        other = kept.setdefault(OTHER, GroupFigures())
        for _, figures in ranked[cap:]:
            other.add(figures)
    return kept


def _per_group(
    dimension: Dimension,
    now_rows: list[dict[str, Any]],
    hour_start: datetime,
    now: datetime,
    clusters: dict[int, str],
) -> dict[str, dict[str, GroupFigures]]:
    """cluster name → group name → its figures now (summed from ``now_rows``, the figures
    per cluster, team and queue) and in the last complete hour."""
    names = dimension.names()
    found: defaultdict[str, defaultdict[str, GroupFigures]] = defaultdict(
        lambda: defaultdict(GroupFigures)
    )
    for row in now_rows:
        group_id = row[dimension.field]
        if group_id is None and not row["allocated"]:
            # Free GPUs belong to no group: nothing is unattributed unless something is held.
            continue
        group = names.get(group_id, UNATTRIBUTED) if group_id is not None else UNATTRIBUTED
        figures = found[clusters.get(row["cluster_id"], str(row["cluster_id"]))][group]
        figures.allocated += float(row["allocated"] or 0.0)
        figures.idle += float(row["idle"] or 0.0)
    hour_rows: dict[tuple[int, str], Figures] = (
        HourlyRollup.objects.for_scope(dimension.scope)
        .covering(hour_start, hour_start + HOUR, now=now)
        .figures(group_by=("cluster_id", "key"), names=("active_gpu_hours",))
    )
    for (cluster_id, key), figures_of_hour in hour_rows.items():
        of_group = found[clusters.get(cluster_id, str(cluster_id))][key or UNATTRIBUTED]
        of_group.active_hours += figures_of_hour.active_gpu_hours
    return {cluster: dict(groups) for cluster, groups in found.items()}


def _families(dimension: Dimension, per_cluster: dict[str, dict[str, GroupFigures]]) -> list[Any]:
    labels = ["cluster", dimension.label]
    allocated = GaugeMetricFamily(
        f"gpuledger_{dimension.label}_allocated_gpus",
        f"GPUs held by running pods now (the newest collected window), per {dimension.noun}.",
        labels=labels,
    )
    idle = GaugeMetricFamily(
        f"gpuledger_{dimension.label}_idle_gpus",
        f"GPUs held now whose SM activity is below the idle threshold, per {dimension.noun}.",
        labels=labels,
    )
    active = GaugeMetricFamily(
        f"gpuledger_{dimension.label}_active_gpu_hours",
        f"Active GPU-hours (SM activity x GPU-hours) of the last complete hour, per "
        f"{dimension.noun}.",
        labels=labels,
    )
    for cluster in sorted(per_cluster):
        for group, figures in sorted(bounded(per_cluster[cluster], dimension.cap()).items()):
            allocated.add_metric([cluster, group], figures.allocated)
            idle.add_metric([cluster, group], figures.idle)
            active.add_metric([cluster, group], figures.active_hours)
    return [allocated, idle, active]


def figures(now: datetime) -> Iterable[GaugeMetricFamily]:
    """Every figure family: per cluster, per team, per ClusterQueue."""
    clusters = dict(Cluster.objects.values_list("pk", "name"))
    windows = latest_windows()
    hour_start = hour_floor(now) - HOUR

    window_end = GaugeMetricFamily(
        "gpuledger_figures_window_end_timestamp_seconds",
        "End of the cluster's newest collected window, which the figures now describe (Unix time).",
        labels=["cluster"],
    )
    capacity = GaugeMetricFamily(
        "gpuledger_cluster_capacity_gpus",
        "Physical GPUs of the cluster in its newest collected window (MIG by slices).",
        labels=["cluster"],
    )
    allocated = GaugeMetricFamily(
        "gpuledger_cluster_allocated_gpus",
        "GPUs held by running pods now, per cluster.",
        labels=["cluster"],
    )
    idle = GaugeMetricFamily(
        "gpuledger_cluster_idle_gpus",
        "GPUs held now whose SM activity is below the idle threshold, per cluster.",
        labels=["cluster"],
    )
    for cluster_id, end in sorted(windows.items()):
        window_end.add_metric([clusters.get(cluster_id, str(cluster_id))], end.timestamp())
    # One scan of the newest windows, by cluster, team and queue; the coarser groups are sums of
    # these rows (the figures are sums), so a scrape reads each window once, not three times.
    now_rows = figures_now(windows, group_by=("cluster_id", "team_id", "cluster_queue_id"))
    totals: defaultdict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for row in now_rows:
        total = totals[row["cluster_id"]]
        total[0] += float(row["capacity"] or 0.0)
        total[1] += float(row["allocated"] or 0.0)
        total[2] += float(row["idle"] or 0.0)
    for cluster_id, (gpus, held, held_idle) in sorted(totals.items()):
        name = [clusters.get(cluster_id, str(cluster_id))]
        capacity.add_metric(name, gpus)
        allocated.add_metric(name, held)
        idle.add_metric(name, held_idle)
    families: list[GaugeMetricFamily] = [window_end, capacity, allocated, idle]
    for dimension in (TEAMS, QUEUES):
        families += _families(dimension, _per_group(dimension, now_rows, hour_start, now, clusters))
    return families
