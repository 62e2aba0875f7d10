"""The DCGM activity of a serving workload's own GPUs in one hour, from the per-window usage.

A serving hour names the workload's pods (``ServingFigures.pods``); the per-window usage rows
(``ledger.models.GpuUsage``) name the pod that held each GPU in each window. Summing the rows
of those pods over the hour's windows (``window_end`` in ``(hour, hour + 1 h]``, as the hourly
rollups take them) gives the workload's active and telemetry GPU-hours with the figure rules of
``ledger.figures`` (``active_gpu_hours``: activity x GPU-hours of allocated GPUs with telemetry;
``telemetry_gpu_hours``: their GPU-hours), so its SM_ACTIVE is the same reading as every other
page's (docs/architecture.md "Serving deployments"). Two deployments in one namespace each get
their own GPUs' activity.

A workload none of whose pods has a usage row in the hour (the hour is older than the per-window
retention, or its windows were not collected) keeps both figures None, and the Serving pages
fall back to its namespace's hourly rollups (``serving.deployments``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from django.db.models import ExpressionWrapper, F, FloatField, Sum, Value

from fleet.models import Cluster
from ledger.figures import BY_NAME, sum_q, thresholds
from ledger.models import GpuUsage
from ledger.rollup.portable import WindowSeconds
from serving.ingest import PodKey, ServingFigures, WorkloadKey

HOUR = timedelta(hours=1)
FIGURES = ("active_gpu_hours", "telemetry_gpu_hours")


def pod_activity(
    cluster: Cluster, hour: datetime, pods: set[PodKey]
) -> dict[PodKey, tuple[float, float]]:
    """(active, telemetry) GPU-hours per pod of ``pods`` in the hour starting at ``hour``; pods
    without a usage row in it are left out."""
    if not pods:
        return {}
    limits = thresholds()
    window_hours = WindowSeconds(F("window_end"), F("window_start")) / Value(3600.0)
    sums = {}
    for name in FIGURES:
        expression, rows = sum_q(BY_NAME[name], limits)
        gpus = F(expression) if isinstance(expression, str) else expression
        sums[name] = Sum(
            ExpressionWrapper(gpus * window_hours, output_field=FloatField()), filter=rows
        )
    found = (
        GpuUsage.objects.filter(
            cluster_id=cluster.pk,
            window_end__gt=hour,
            window_end__lte=hour + HOUR,
            allocated=True,
            namespace__in={namespace for namespace, _ in pods},
            pod__in={pod for _, pod in pods},
        )
        .order_by()
        .values("namespace", "pod")
        .annotate(**sums)
        .values_list("namespace", "pod", *FIGURES)
    )
    activity: dict[PodKey, tuple[float, float]] = {}
    for namespace, pod, active, telemetry in found:
        if (namespace, pod) in pods:  # the filter above is on each column alone
            activity[(namespace, pod)] = (active or 0.0, telemetry or 0.0)
    return activity


def attach_activity(
    cluster: Cluster, hour: datetime, figures: Mapping[WorkloadKey, ServingFigures]
) -> None:
    """Fill in each workload's ``active_gpu_hours`` and ``telemetry_gpu_hours`` from its pods'
    usage rows in the hour (one query for the whole hour); None where no pod of it has one."""
    activity = pod_activity(cluster, hour, {pod for f in figures.values() for pod in f.pods})
    for values in figures.values():
        held = [activity[pod] for pod in values.pods if pod in activity]
        if held:
            values.active_gpu_hours = sum(active for active, _ in held)
            values.telemetry_gpu_hours = sum(telemetry for _, telemetry in held)
