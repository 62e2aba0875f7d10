"""``serving.dcgm``: a serving workload's SM_ACTIVE from its own pods' per-window usage rows,
worked out by hand, and the Serving read taking it before the namespace join.

Hour H = 10:00-11:00, windows of 15 minutes (0.25 h) ending 10:15, 10:30, 10:45 and 11:00.
Namespace ``chat`` holds two Deployments and a training pod:

- ``chat/alpha``, pods alpha-1 (1 GPU at SM 0.8 all hour; also windows ending 10:00 and 11:15,
  outside the hour, at SM 1.0) and alpha-2 (1 GPU at SM 0.4 for two windows, no telemetry for
  two): active 0.8 + 0.2 = 1.0 GPU-h, telemetry 1.0 + 0.5 = 1.5 GPU-h.
  A third pod, alpha-3, has no usage row (it is not counted, alpha keeps its figures).
- ``chat/beta``, pod beta-1 with 2 GPUs at SM 0.1: active 0.2, telemetry 2.0.
- ``chat/train-0`` (no serving telemetry) at SM 0.9: not any deployment's.
- ``other/delta``, pod delta-1 with no usage row: None. A pod named beta-1 in ``other`` at
  SM 1.0 shares both the namespace and the pod name with the pods asked for, not the pair.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from core.ranges import covered_hours
from fleet.choices import ActivitySource
from fleet.models import Cluster
from ledger.models import GpuUsage
from serving.collector import write_hour
from serving.dcgm import attach_activity, pod_activity
from serving.deployments import deployment
from serving.ingest import ServingFigures
from serving.models import ServingWorkload

H = datetime(2026, 11, 9, 10, tzinfo=UTC)
QUARTER = timedelta(minutes=15)
ENDS = [H + QUARTER * n for n in range(1, 5)]


def usage(cluster, end, namespace, pod, gpu_key, sm):
    return GpuUsage(
        cluster=cluster,
        window_start=end - QUARTER,
        window_end=end,
        gpu_key=gpu_key,
        namespace=namespace,
        pod=pod,
        node_name="node-1",
        flavor="h100",
        gpu_model="H100",
        allocated=True,
        gpus=1.0,
        capacity_gpus=1.0,
        sm_active=sm,
        activity=sm,
        activity_source=ActivitySource.SM_ACTIVE if sm is not None else ActivitySource.NONE,
    )


@pytest.fixture
def cluster(db):
    cluster = Cluster.objects.create(name="east")
    rows = []
    for end in ENDS:
        rows.append(usage(cluster, end, "chat", "alpha-1", "n1/GPU-a1", 0.8))
        rows.append(usage(cluster, end, "chat", "beta-1", "n1/GPU-b1", 0.1))
        rows.append(usage(cluster, end, "chat", "beta-1", "n1/GPU-b2", 0.1))
        rows.append(usage(cluster, end, "chat", "train-0", "n1/GPU-t0", 0.9))
        rows.append(usage(cluster, end, "other", "beta-1", "n2/GPU-x", 1.0))
    for end, sm in zip(ENDS, (0.4, 0.4, None, None), strict=True):
        rows.append(usage(cluster, end, "chat", "alpha-2", "n1/GPU-a2", sm))
    for end in (H, H + timedelta(hours=1) + QUARTER):
        rows.append(usage(cluster, end, "chat", "alpha-1", "n1/GPU-a1", 1.0))
    GpuUsage.objects.bulk_create(rows)
    return cluster


def figures(*pods):
    return ServingFigures(
        server_kind="vllm", replicas_seen=len(pods), replica_hours=1.0, seconds_with_data=3600,
        gpu_hours=float(len(pods)), pods=tuple(pods),
    )  # fmt: skip


def test_each_workload_gets_its_own_pods_activity(cluster):
    found = {
        ("chat", "Deployment", "alpha"): figures(
            ("chat", "alpha-1"), ("chat", "alpha-2"), ("chat", "alpha-3")
        ),
        ("chat", "Deployment", "beta"): figures(("chat", "beta-1")),
        ("other", "Deployment", "delta"): figures(("other", "delta-1")),
    }

    attach_activity(cluster, H, found)

    alpha, beta, delta = found.values()
    assert (alpha.active_gpu_hours, alpha.telemetry_gpu_hours) == (
        pytest.approx(1.0),
        pytest.approx(1.5),
    )
    assert (beta.active_gpu_hours, beta.telemetry_gpu_hours) == (
        pytest.approx(0.2),
        pytest.approx(2.0),
    )
    assert (delta.active_gpu_hours, delta.telemetry_gpu_hours) == (None, None)


def test_only_the_pairs_asked_for_and_the_hours_windows_count(cluster):
    activity = pod_activity(cluster, H, {("chat", "beta-1"), ("other", "delta-1")})

    # ("other", "beta-1") matches each column's filter but is not a pair asked for.
    assert activity == {("chat", "beta-1"): (pytest.approx(0.2), pytest.approx(2.0))}
    assert pod_activity(cluster, H, set()) == {}
    # The next hour holds only the window ending 11:15.
    assert pod_activity(cluster, H + timedelta(hours=1), {("chat", "alpha-1")}) == {
        ("chat", "alpha-1"): (pytest.approx(0.25), pytest.approx(0.25))
    }


def test_the_serving_page_reads_each_deployments_own_sm_active(cluster):
    """Two deployments in one namespace: no namespace rollup could join either, yet each has
    its own SM_ACTIVE from the hour the collector wrote."""
    found = {
        ("chat", "Deployment", "alpha"): figures(("chat", "alpha-1"), ("chat", "alpha-2")),
        ("chat", "Deployment", "beta"): figures(("chat", "beta-1")),
    }
    attach_activity(cluster, H, found)
    write_hour(cluster, H, found)
    now = H + timedelta(hours=1, minutes=20)

    with time_machine.travel(now, tick=False):
        span = covered_hours(H, now, now)
        alpha = deployment(ServingWorkload.objects.get(name="alpha"), span)
        beta = deployment(ServingWorkload.objects.get(name="beta"), span)

    assert alpha.sm_active == pytest.approx(1.0 / 1.5)
    assert alpha.sm_active_hours == 1
    assert beta.sm_active == pytest.approx(0.1)
