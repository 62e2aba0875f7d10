"""Detail time series read live from a cluster's Prometheus
(docs/architecture.md "Time model and storage").

Raw series stay in Prometheus: the node, GPU and workload charts ask it for the range they show
(``live_series``, at most ``LIVE_MAX_POINTS`` points per series) and fall back to the stored
collection windows when it cannot answer (``read_live`` logs why, the chart says so). A
``LiveSeries`` breaks its line where samples are missing: no telemetry is a gap, never 0.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from core.ranges import CUSTOM, TimeRange
from fleet.choices import PodLabelStyle
from fleet.constants import DCGM_METRICS
from fleet.models import Cluster, Gpu
from quotas.models import Allocation, Workload

logger = logging.getLogger(__name__)

# Prometheus range queries: at most this many points per series.
LIVE_MAX_POINTS = 720
# Pods of one workload named in a live query's selector (a regex alternation).
MAX_LIVE_PODS = 64
# The recent part of a workload's activity chart is read live from Prometheus when configured.
WORKLOAD_LIVE_SPAN = timedelta(hours=6)

# Where a node's or GPU's chart got its lines (shown in its title).
SOURCE_LIVE = "live from Prometheus"
SOURCE_STORED = "stored windows"

T = TypeVar("T")


@dataclass
class LiveSeries:
    """One line of a detail chart: times and values, None where samples are missing."""

    name: str
    x: list[datetime] = field(default_factory=list)
    y: list[float | None] = field(default_factory=list)


def with_gaps(points: list[tuple[datetime, float | None]], step: timedelta | None) -> LiveSeries:
    """Points in time order; a gap wider than 1.5 steps becomes a null (a visible break).

    Without a known step (stored windows, whose length is a collector setting that may have
    changed), the smallest spacing between the points is the step.
    """
    if step is None:
        spacings = [b[0] - a[0] for a, b in zip(points, points[1:], strict=False) if b[0] > a[0]]
        step = min(spacings) if spacings else timedelta(hours=1)
    series = LiveSeries("")
    previous: datetime | None = None
    for moment, value in points:
        if previous is not None and moment - previous > step * 1.5:
            series.x.append(previous + step)
            series.y.append(None)
        series.x.append(moment)
        series.y.append(value)
        previous = moment
    return series


def read_live(what: str, read: Callable[[], T]) -> tuple[T | None, str]:
    """``(result, "")``, or ``(None, why)`` when Prometheus (or its secret) cannot be read."""
    try:
        return read(), ""
    except Exception as exc:  # PrometheusError, or a secret that cannot be read
        logger.warning("%s: Prometheus range query failed: %s", what, exc)
        return None, str(exc)


def unavailable_notice(error: str, instead: str) -> str:
    """What a chart says when Prometheus did not answer and it shows ``instead``."""
    return f"Prometheus could not be queried ({error}); showing {instead}."


def promql_string(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def live_step(time_range: TimeRange) -> int:
    seconds = max(60, math.ceil(time_range.seconds / LIVE_MAX_POINTS))
    return int(math.ceil(seconds / 60.0) * 60)


def live_series(
    cluster: Cluster, promql: str, time_range: TimeRange, key_labels: tuple[str, ...], scale: float
) -> dict[tuple[str, ...], LiveSeries]:
    """Range query against the cluster's Prometheus; raises fleet.prometheus.PrometheusError."""
    from fleet.prometheus import PrometheusClient

    step = live_step(time_range)
    with PrometheusClient.for_cluster(cluster) as client:
        result = client.query_range(promql, time_range.start, time_range.end, step)
    series: dict[tuple[str, ...], LiveSeries] = {}
    for item in result:
        labels = item.get("metric", {})
        key = tuple(str(labels.get(name, "")) for name in key_labels)
        points = []
        for stamp, raw in item.get("values", []):
            value = float(raw)
            moment = datetime.fromtimestamp(float(stamp), tz=time_range.start.tzinfo)
            points.append((moment, None if not math.isfinite(value) else round(value * scale, 3)))
        series[key] = with_gaps(points, timedelta(seconds=step))
    return series


def host_selector(host: str) -> tuple[str, str]:
    """dcgm-exporter names the host label `Hostname` up to 4.8.x and `hostname` after."""
    quoted = promql_string(host)
    return f'Hostname="{quoted}"', f'hostname="{quoted}"'


def pod_selectors(workload: Workload, style: str) -> list[str]:
    """Label selectors for the workload's pods on DCGM series, per the cluster's label style."""
    pods = sorted(
        set(
            Allocation.objects.filter(workload=workload)
            .values_list("pod", flat=True)
            .order_by()[:MAX_LIVE_PODS]
        )
    )
    if not pods:
        return []
    namespace = promql_string(workload.namespace)
    pattern = "|".join(promql_string(re.escape(pod)) for pod in pods)
    selectors = []
    if style in (PodLabelStyle.AUTO, PodLabelStyle.EXPORTED):
        selectors.append(f'exported_namespace="{namespace}",exported_pod=~"{pattern}"')
    if style in (PodLabelStyle.AUTO, PodLabelStyle.PLAIN):
        selectors.append(f'namespace="{namespace}",pod=~"{pattern}"')
    return selectors


def live_workload_points(
    workload: Workload, metric: str, start: datetime, time_range: TimeRange
) -> dict[str, list[tuple[datetime, float | None]]]:
    """Per-GPU values of the workload's pods from its cluster's Prometheus over (start, end].

    Keyed like stored rows (``host/UUID/GI``) where the GPU is known, so live points continue the
    stored lines. SM_ACTIVE falls back to GR_ENGINE_ACTIVE per series, as collection does.
    Raises ``fleet.prometheus.PrometheusError`` when Prometheus cannot answer.
    """
    selectors = pod_selectors(workload, workload.cluster.pod_label_style)
    if not selectors:
        return {}
    names = (
        [DCGM_METRICS["sm_active"], DCGM_METRICS["gr_engine_active"]]
        if metric == "sm_active"
        else [DCGM_METRICS["pipe_tensor_active"]]
    )
    promql = " or ".join(
        f"max by (UUID, GPU_I_ID) ({' or '.join(f'{name}{{{sel}}}' for sel in selectors)})"
        for name in names
    )
    window = TimeRange(start, time_range.end, CUSTOM)
    series = live_series(workload.cluster, promql, window, ("UUID", "GPU_I_ID"), 1.0)
    known = {
        (gpu.uuid, gpu.gi_id): gpu.key
        for gpu in Gpu.objects.filter(
            cluster=workload.cluster, uuid__in={uuid for uuid, _ in series}
        )
    }
    return {
        known.get((uuid, gi_id), f"?/{uuid}/{gi_id}"): list(zip(found.x, found.y, strict=True))
        for (uuid, gi_id), found in series.items()
    }
