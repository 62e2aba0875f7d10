"""Hourly rollups: every figure per scope against a hand-worked hour, idempotence, pruning.

The scenario (hour H0 = 12:00-13:00 UTC, 60 s windows ending 12:01, 12:02 and 13:00; the window
ending on 13:00 is hour 12's):

node-1, flavor h100 (5 GPUs of capacity), per window:
  r1  gpu0  ns-a/train-0  team alpha, cq-a, lq-a, workload ns-a/train   SM 0.8, tensor 0.4, util 90
  r2  gpu1  ns-a/train-1  same queue/workload                           SM 0.1, tensor 0.05, util 80
                                                                        (busy but not working)
  r3  gpu2  ns-b/infer-0  team beta, cq-b, lq-b, workload ns-b/infer    SM 0.005 (idle), util 0
  r4a gpu3  ns-b/infer-1  time-sliced, 0.5 GPU, carries the capacity    SM 0.6, tensor 0.3, util 70
  r4b gpu3  ns-c/notebook time-sliced, 0.5 GPU, no team / queue         SM 0.6, tensor 0.3, util 70
  r5  gpu4  unallocated                                                 SM 0.0 (not idle: not held)
  r6  (no DCGM series) ns-a/train-2, 2 GPUs, no telemetry, windows 12:01 and 12:02 only
node-2, flavor a100-mig:
  r7  MIG 3g (3/7) ns-b/mig-job-0  team beta, cq-b, lq-b, workload ns-b/mig-job
      GR_ENGINE_ACTIVE 0.5 (fallback, no SM_ACTIVE), util 60
  r8  MIG 4g (4/7) unallocated, no telemetry
ClusterQueue samples (nvidia.com/gpu) at 12:01, 12:02, 13:00:
  cq-a h100 nominal 4, borrowed 2, 2, 0          (team alpha, Cohort row "research")
  cq-b h100 nominal 4, lent 2, 2, 0              (team beta, implicit cohort "research" by name)
  cq-c l4   nominal 1                            (no team, no cohort: a standalone queue)
Waiting Workloads (pending_gpu_hours), created 12:00, quota reserved 12:03:
  ns-b/wait-b  cq-b lq-b  1 GPU    ns-c/wait-c  cq-c (no LocalQueue)  3 GPUs
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.db import connection
from django.db.models import Sum

from fleet.choices import ActivitySource
from fleet.models import Cluster
from ledger import rollup
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup
from ledger.rollup import (
    NO_COHORT,
    UNATTRIBUTED,
    hours_touched,
    prune_rollups,
    prune_usage,
    roll_up_hour,
    roll_up_range,
)
from quotas.choices import TransitionKind, WorkloadState
from quotas.models import (
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Team,
    Workload,
    WorkloadTransition,
)

H0 = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
H1 = H0 + timedelta(hours=1)
MINUTE = timedelta(minutes=1)
W = 60 / 3600  # GPU-hours of one GPU over one 60 s window
GPU = "nvidia.com/gpu"
H0_WINDOWS = [H0 + MINUTE, H0 + 2 * MINUTE, H1]
H1_WINDOWS = [H1 + MINUTE, H1 + 2 * MINUTE]
H100 = ("h100", "NVIDIA H100 80GB HBM3")
A100 = ("a100-mig", "NVIDIA A100-SXM4-40GB")
L4 = ("l4", "NVIDIA-L4")  # no usage: quota rows take ResourceFlavor.gpu_model

USAGE_FIGURES = [
    "capacity_gpu_hours",
    "allocated_gpu_hours",
    "telemetry_gpu_hours",
    "active_gpu_hours",
    "idle_gpu_hours",
    "shared_gpu_hours",
    "fallback_gpu_hours",
    "tensor_active_gpu_hours",
    "tensor_covered_gpu_hours",
    "gpu_util_gpu_hours",
    "gpu_util_covered_gpu_hours",
    "busy_not_working_gpu_hours",
]
QUOTA_FIGURES = [
    "nominal_gpu_hours",
    "borrowed_gpu_hours",
    "lent_gpu_hours",
    "pending_gpu_hours",
]
ALL_FIGURES = [*USAGE_FIGURES, *QUOTA_FIGURES, "peak_allocated_gpus"]

# Hand-worked usage of H0 per set of rows (3 windows; r6 in 2 of them).
# r1 + r2 + r6 (team alpha, ns-a, cq-a, lq-a, ns-a/train):
ALPHA_H100 = {
    "allocated_gpu_hours": (1 + 1) * 3 * W + 2 * 2 * W,
    "telemetry_gpu_hours": 2 * 3 * W,
    "active_gpu_hours": (0.8 + 0.1) * 3 * W,
    "tensor_active_gpu_hours": (0.4 + 0.05) * 3 * W,
    "tensor_covered_gpu_hours": 2 * 3 * W,
    "gpu_util_gpu_hours": (0.9 + 0.8) * 3 * W,
    "gpu_util_covered_gpu_hours": 2 * 3 * W,
    "busy_not_working_gpu_hours": 1 * 3 * W,
    "peak_allocated_gpus": 1 + 1 + 2,
}
# r3 + r4a (team beta, ns-b, cq-b, lq-b, ns-b/infer):
BETA_H100 = {
    "allocated_gpu_hours": (1 + 0.5) * 3 * W,
    "telemetry_gpu_hours": (1 + 0.5) * 3 * W,
    "active_gpu_hours": (0.005 + 0.6 * 0.5) * 3 * W,
    "idle_gpu_hours": 1 * 3 * W,
    "shared_gpu_hours": 0.5 * 3 * W,
    "tensor_active_gpu_hours": (0.0 + 0.3 * 0.5) * 3 * W,
    "tensor_covered_gpu_hours": (1 + 0.5) * 3 * W,
    "gpu_util_gpu_hours": (0.0 + 0.7 * 0.5) * 3 * W,
    "gpu_util_covered_gpu_hours": (1 + 0.5) * 3 * W,
    "peak_allocated_gpus": 1.5,
}
# r4b (ns-c/notebook, no team, queue or workload):
NOTEBOOK_H100 = {
    "allocated_gpu_hours": 0.5 * 3 * W,
    "telemetry_gpu_hours": 0.5 * 3 * W,
    "active_gpu_hours": 0.6 * 0.5 * 3 * W,
    "shared_gpu_hours": 0.5 * 3 * W,
    "tensor_active_gpu_hours": 0.3 * 0.5 * 3 * W,
    "tensor_covered_gpu_hours": 0.5 * 3 * W,
    "gpu_util_gpu_hours": 0.7 * 0.5 * 3 * W,
    "gpu_util_covered_gpu_hours": 0.5 * 3 * W,
    "peak_allocated_gpus": 0.5,
}
# r7 (MIG 3g, ns-b/mig-job, GR_ENGINE fallback):
MIG_A100 = {
    "allocated_gpu_hours": 3 / 7 * 3 * W,
    "telemetry_gpu_hours": 3 / 7 * 3 * W,
    "active_gpu_hours": 0.5 * 3 / 7 * 3 * W,
    "fallback_gpu_hours": 3 / 7 * 3 * W,
    "gpu_util_gpu_hours": 0.6 * 3 / 7 * 3 * W,
    "gpu_util_covered_gpu_hours": 3 / 7 * 3 * W,
    "peak_allocated_gpus": 3 / 7,
}
# All of node-1 / flavor h100: r1..r6, with capacity of gpu0..gpu4.
FLEET_H100 = {
    "capacity_gpu_hours": 5 * 3 * W,
    "allocated_gpu_hours": 4 * 3 * W + 2 * 2 * W,
    "telemetry_gpu_hours": 4 * 3 * W,
    "active_gpu_hours": (0.8 + 0.1 + 0.005 + 0.6 * 0.5 + 0.6 * 0.5) * 3 * W,
    "idle_gpu_hours": 1 * 3 * W,
    "shared_gpu_hours": 1 * 3 * W,
    "tensor_active_gpu_hours": (0.4 + 0.05 + 0.0 + 0.3 * 0.5 + 0.3 * 0.5) * 3 * W,
    "tensor_covered_gpu_hours": 4 * 3 * W,
    "gpu_util_gpu_hours": (0.9 + 0.8 + 0.0 + 0.7 * 0.5 + 0.7 * 0.5) * 3 * W,
    "gpu_util_covered_gpu_hours": 4 * 3 * W,
    "busy_not_working_gpu_hours": 1 * 3 * W,
    "peak_allocated_gpus": 1 + 1 + 1 + 0.5 + 0.5 + 2,
}
FLEET_A100 = {**MIG_A100, "capacity_gpu_hours": (3 / 7 + 4 / 7) * 3 * W}
# Quota of H0 from the samples.
CQ_A_QUOTA = {"nominal_gpu_hours": 4 * 3 * W, "borrowed_gpu_hours": (2 + 2 + 0) * W}
CQ_B_QUOTA = {
    "nominal_gpu_hours": 4 * 3 * W,
    "lent_gpu_hours": (2 + 2 + 0) * W,
    "pending_gpu_hours": 1 * 3 * W,
}
CQ_C_QUOTA = {"nominal_gpu_hours": 1 * 3 * W, "pending_gpu_hours": 3 * 3 * W}
# The waiting Workloads: 3 minutes each.
WAIT_B = {"pending_gpu_hours": 1 * 3 * W}
WAIT_C = {"pending_gpu_hours": 3 * 3 * W}
RESEARCH_QUOTA = {
    "nominal_gpu_hours": (4 + 4) * 3 * W,
    "borrowed_gpu_hours": 4 * W,
    "lent_gpu_hours": 4 * W,
    "pending_gpu_hours": 3 * W,
}


def usage_row(cluster: Cluster, end: datetime, gpu_key: str, **fields: object) -> GpuUsage:
    sm = fields.pop("sm", None)
    gr = fields.pop("gr", None)
    flavor, gpu_model = fields.pop("flavor", H100)
    if sm is not None:
        activity, source = sm, ActivitySource.SM_ACTIVE
    elif gr is not None:
        activity, source = gr, ActivitySource.GR_ENGINE_ACTIVE
    else:
        activity, source = None, ActivitySource.NONE
    values: dict[str, object] = {
        "allocated": True,
        "gpus": 1.0,
        "capacity_gpus": 1.0,
        "node_name": "node-1",
    }
    values.update(fields)
    return GpuUsage(
        cluster=cluster,
        window_start=end - MINUTE,
        window_end=end,
        gpu_key=gpu_key,
        flavor=flavor,
        gpu_model=gpu_model,
        sm_active=sm,
        gr_engine_active=gr,
        activity=activity,
        activity_source=source,
        **values,
    )


def sample(cq: ClusterQueue, flavor: str, at: datetime, **values: int) -> ClusterQueueSample:
    return ClusterQueueSample(
        cluster_queue=cq,
        flavor_name=flavor,
        sampled_at=at,
        window_seconds=60,
        **{name: Decimal(value) for name, value in values.items()},
    )


@pytest.fixture
def scenario(cluster):
    alpha = Team.objects.create(name="alpha")
    beta = Team.objects.create(name="beta")
    research = Cohort.objects.create(cluster=cluster, name="research")
    cq_a = ClusterQueue.objects.create(
        cluster=cluster, name="cq-a", team=alpha, cohort=research, cohort_name="research"
    )
    cq_b = ClusterQueue.objects.create(
        cluster=cluster, name="cq-b", team=beta, cohort_name="research"
    )
    cq_c = ClusterQueue.objects.create(cluster=cluster, name="cq-c")
    lq_a = LocalQueue.objects.create(
        cluster=cluster,
        namespace="ns-a",
        name="lq-a",
        cluster_queue=cq_a,
        cluster_queue_name="cq-a",
    )
    lq_b = LocalQueue.objects.create(
        cluster=cluster,
        namespace="ns-b",
        name="lq-b",
        cluster_queue=cq_b,
        cluster_queue_name="cq-b",
    )
    train = Workload.objects.create(
        cluster=cluster, namespace="ns-a", name="train", cluster_queue=cq_a, local_queue=lq_a
    )
    infer = Workload.objects.create(
        cluster=cluster, namespace="ns-b", name="infer", cluster_queue=cq_b, local_queue=lq_b
    )
    mig_job = Workload.objects.create(
        cluster=cluster, namespace="ns-b", name="mig-job", cluster_queue=cq_b, local_queue=lq_b
    )
    # Pending: two Workloads that waited from 12:00 until their quota was reserved at 12:03.
    ClusterQueueQuota.objects.create(cluster_queue=cq_b, flavor_name="h100", resource=GPU)
    ClusterQueueQuota.objects.create(cluster_queue=cq_c, flavor_name="l4", resource=GPU)
    for namespace, name, queue, local, gpus in (
        ("ns-b", "wait-b", cq_b, lq_b, 1),
        ("ns-c", "wait-c", cq_c, None, 3),
    ):
        waited = Workload.objects.create(
            cluster=cluster,
            namespace=namespace,
            name=name,
            cluster_queue=queue,
            local_queue=local,
            requested_gpus=gpus,
            observed_at=H0,
            state=WorkloadState.ADMITTED,
            quota_reserved_at=H0 + 3 * MINUTE,
        )
        WorkloadTransition.objects.create(
            workload=waited, kind=TransitionKind.QUOTA_RESERVED, at=H0 + 3 * MINUTE
        )
    ResourceFlavor.objects.create(cluster=cluster, name="h100", gpu_model="NVIDIA-H100-80GB-HBM3")
    ResourceFlavor.objects.create(cluster=cluster, name="l4", gpu_model="NVIDIA-L4")

    a = {"team": alpha, "cluster_queue": cq_a, "local_queue": lq_a, "workload": train}
    b = {"team": beta, "cluster_queue": cq_b, "local_queue": lq_b, "workload": infer}
    mig = {"team": beta, "cluster_queue": cq_b, "local_queue": lq_b, "workload": mig_job}
    rows = []
    for index, end in enumerate(H0_WINDOWS):
        rows += [
            usage_row(cluster, end, "n1/g0/", namespace="ns-a", pod="train-0", sm=0.8,
                      pipe_tensor_active=0.4, gpu_util=90, **a),
            usage_row(cluster, end, "n1/g1/", namespace="ns-a", pod="train-1", sm=0.1,
                      pipe_tensor_active=0.05, gpu_util=80, **a),
            usage_row(cluster, end, "n1/g2/", namespace="ns-b", pod="infer-0", sm=0.005,
                      pipe_tensor_active=0.0, gpu_util=0, **b),
            usage_row(cluster, end, "n1/g3/", namespace="ns-b", pod="infer-1", sm=0.6,
                      pipe_tensor_active=0.3, gpu_util=70, gpus=0.5, shared=True, **b),
            usage_row(cluster, end, "n1/g3/", namespace="ns-c", pod="notebook", sm=0.6,
                      pipe_tensor_active=0.3, gpu_util=70, gpus=0.5, capacity_gpus=0.0,
                      shared=True),
            usage_row(cluster, end, "n1/g4/", allocated=False, sm=0.0, gpu_util=0),
            usage_row(cluster, end, "n2/g0/1", node_name="node-2", namespace="ns-b",
                      pod="mig-job-0", flavor=A100, gr=0.5, gpu_util=60, gpus=3 / 7,
                      capacity_gpus=3 / 7, **mig),
            usage_row(cluster, end, "n2/g0/2", node_name="node-2", flavor=A100,
                      allocated=False, gpus=4 / 7, capacity_gpus=4 / 7),
        ]  # fmt: skip
        if index < 2:
            rows.append(
                usage_row(cluster, end, "", namespace="ns-a", pod="train-2", gpus=2.0,
                          capacity_gpus=0.0, **a)
            )  # fmt: skip
    for end in H1_WINDOWS:
        rows += [
            usage_row(cluster, end, "n1/g0/", namespace="ns-a", pod="train-0", sm=0.8,
                      pipe_tensor_active=0.4, gpu_util=90, **a),
            usage_row(cluster, end, "n1/g4/", allocated=False, sm=0.0, gpu_util=0),
        ]  # fmt: skip
    # The window ending on 12:00 is hour 11's.
    rows.append(usage_row(cluster, H0, "n1/g0/", namespace="ns-a", pod="train-0", sm=0.8, **a))
    GpuUsage.objects.bulk_create(rows)

    samples = [sample(cq_a, "h100", H0, nominal=4, borrowed=9)]
    for end, moved in zip(H0_WINDOWS, [2, 2, 0], strict=True):
        samples += [
            sample(cq_a, "h100", end, nominal=4, borrowed=moved),
            sample(cq_b, "h100", end, nominal=4, lent=moved, pending_demand=1),
            sample(cq_c, "l4", end, nominal=1, pending_demand=3),
        ]
    # Not GPUs: never in GPU-hours.
    samples.append(
        ClusterQueueSample(
            cluster_queue=cq_a,
            flavor_name="h100",
            resource="cpu",
            sampled_at=H0_WINDOWS[0],
            nominal=Decimal(100),
            borrowed=Decimal(50),
        )
    )
    samples.append(sample(cq_a, "h100", H1_WINDOWS[0], nominal=4, borrowed=9))
    ClusterQueueSample.objects.bulk_create(samples)
    return SimpleNamespace(
        cluster=cluster,
        alpha=alpha,
        beta=beta,
        cq_a=cq_a,
        cq_b=cq_b,
        cq_c=cq_c,
        train=train,
        infer=infer,
        mig_job=mig_job,
    )


def rollup_row(scope: str, key: str, flavor: tuple[str, str], hour: datetime = H0) -> HourlyRollup:
    return HourlyRollup.objects.get(
        scope=scope, key=key, hour=hour, flavor=flavor[0], gpu_model=flavor[1]
    )


def assert_figures(row: HourlyRollup, windows: int, *parts: dict[str, float]) -> None:
    """Every figure of the row equals the hand-worked parts; figures no part names are 0."""
    expected = dict.fromkeys(ALL_FIGURES, 0.0)
    for part in parts:
        expected.update(part)
    actual = {figure: getattr(row, figure) for figure in ALL_FIGURES}
    assert actual == pytest.approx(expected, rel=1e-9, abs=1e-12), row
    assert row.windows == windows


def keys_of(scope: str, hour: datetime = H0) -> set[tuple[str, str]]:
    return set(HourlyRollup.objects.filter(scope=scope, hour=hour).values_list("key", "flavor"))


def test_fleet_rows_hold_hand_worked_figures_per_flavor(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.FLEET) == {("test", "h100"), ("test", "a100-mig"), ("test", "l4")}
    h100 = rollup_row(RollupScope.FLEET, "test", H100)
    assert_figures(h100, 3, FLEET_H100, RESEARCH_QUOTA)
    assert_figures(rollup_row(RollupScope.FLEET, "test", A100), 3, FLEET_A100)
    assert_figures(rollup_row(RollupScope.FLEET, "test", L4), 3, CQ_C_QUOTA)
    assert (h100.team_id, h100.cluster_queue_id, h100.workload_id) == (None, None, None)


def test_node_and_flavor_rows_carry_capacity(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.NODE) == {("node-1", "h100"), ("node-2", "a100-mig")}
    assert_figures(rollup_row(RollupScope.NODE, "node-1", H100), 3, FLEET_H100)
    assert_figures(rollup_row(RollupScope.NODE, "node-2", A100), 3, FLEET_A100)
    assert keys_of(RollupScope.FLAVOR) == {("h100", "h100"), ("a100-mig", "a100-mig"), ("l4", "l4")}
    assert_figures(rollup_row(RollupScope.FLAVOR, "h100", H100), 3, FLEET_H100, RESEARCH_QUOTA)
    assert_figures(rollup_row(RollupScope.FLAVOR, "a100-mig", A100), 3, FLEET_A100)
    assert_figures(rollup_row(RollupScope.FLAVOR, "l4", L4), 3, CQ_C_QUOTA)


def test_team_rows_split_usage_and_quota_with_an_unattributed_bucket(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.TEAM) == {
        ("alpha", "h100"),
        ("beta", "h100"),
        ("beta", "a100-mig"),
        (UNATTRIBUTED, "h100"),
        (UNATTRIBUTED, "l4"),
    }
    alpha = rollup_row(RollupScope.TEAM, "alpha", H100)
    assert_figures(alpha, 3, ALPHA_H100, CQ_A_QUOTA)
    assert alpha.team == scenario.alpha
    beta = rollup_row(RollupScope.TEAM, "beta", H100)
    assert_figures(beta, 3, BETA_H100, CQ_B_QUOTA)
    assert beta.team == scenario.beta
    assert_figures(rollup_row(RollupScope.TEAM, "beta", A100), 3, MIG_A100)
    unattributed = rollup_row(RollupScope.TEAM, UNATTRIBUTED, H100)
    assert_figures(unattributed, 3, NOTEBOOK_H100)
    assert unattributed.team_id is None
    assert_figures(rollup_row(RollupScope.TEAM, UNATTRIBUTED, L4), 3, CQ_C_QUOTA)


def test_cohort_rows_sum_member_queues_including_implicit_cohorts(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.COHORT) == {
        ("research", "h100"),
        ("research", "a100-mig"),
        (UNATTRIBUTED, "h100"),
        (NO_COHORT, "l4"),
    }
    research_usage = {
        figure: ALPHA_H100.get(figure, 0.0) + BETA_H100.get(figure, 0.0) for figure in USAGE_FIGURES
    }
    # Per window: r1 + r2 + r6 + r3 + r4a = 1 + 1 + 2 + 1 + 0.5 in the first two windows.
    research_usage["peak_allocated_gpus"] = 5.5
    assert_figures(
        rollup_row(RollupScope.COHORT, "research", H100), 3, research_usage, RESEARCH_QUOTA
    )
    assert_figures(rollup_row(RollupScope.COHORT, "research", A100), 3, MIG_A100)
    assert_figures(rollup_row(RollupScope.COHORT, UNATTRIBUTED, H100), 3, NOTEBOOK_H100)
    assert_figures(rollup_row(RollupScope.COHORT, NO_COHORT, L4), 3, CQ_C_QUOTA)


def test_cluster_queue_rows_join_usage_with_quota_samples(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.CLUSTER_QUEUE) == {
        ("cq-a", "h100"),
        ("cq-b", "h100"),
        ("cq-b", "a100-mig"),
        ("cq-c", "l4"),
        (UNATTRIBUTED, "h100"),
    }
    cq_a = rollup_row(RollupScope.CLUSTER_QUEUE, "cq-a", H100)
    assert_figures(cq_a, 3, ALPHA_H100, CQ_A_QUOTA)
    assert (cq_a.cluster_queue, cq_a.team) == (scenario.cq_a, scenario.alpha)
    cq_b = rollup_row(RollupScope.CLUSTER_QUEUE, "cq-b", H100)
    assert_figures(cq_b, 3, BETA_H100, CQ_B_QUOTA)
    assert (cq_b.cluster_queue, cq_b.team) == (scenario.cq_b, scenario.beta)
    assert_figures(rollup_row(RollupScope.CLUSTER_QUEUE, "cq-b", A100), 3, MIG_A100)
    cq_c = rollup_row(RollupScope.CLUSTER_QUEUE, "cq-c", L4)
    assert_figures(cq_c, 3, CQ_C_QUOTA)
    assert (cq_c.cluster_queue, cq_c.team) == (scenario.cq_c, None)
    assert_figures(rollup_row(RollupScope.CLUSTER_QUEUE, UNATTRIBUTED, H100), 3, NOTEBOOK_H100)


def test_namespace_local_queue_and_workload_rows_are_keyed_namespace_slash_name(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    assert keys_of(RollupScope.NAMESPACE) == {
        ("ns-a", "h100"),
        ("ns-b", "h100"),
        ("ns-b", "a100-mig"),
        ("ns-c", "h100"),
        ("ns-c", "l4"),
    }
    assert_figures(rollup_row(RollupScope.NAMESPACE, "ns-a", H100), 3, ALPHA_H100)
    assert_figures(rollup_row(RollupScope.NAMESPACE, "ns-b", H100), 3, BETA_H100, WAIT_B)
    assert_figures(rollup_row(RollupScope.NAMESPACE, "ns-c", L4), 0, WAIT_C)
    assert_figures(rollup_row(RollupScope.NAMESPACE, "ns-b", A100), 3, MIG_A100)
    assert_figures(rollup_row(RollupScope.NAMESPACE, "ns-c", H100), 3, NOTEBOOK_H100)

    assert keys_of(RollupScope.LOCAL_QUEUE) == {
        ("ns-a/lq-a", "h100"),
        ("ns-b/lq-b", "h100"),
        ("ns-b/lq-b", "a100-mig"),
        (UNATTRIBUTED, "h100"),
        (UNATTRIBUTED, "l4"),
    }
    assert_figures(rollup_row(RollupScope.LOCAL_QUEUE, "ns-b/lq-b", H100), 3, BETA_H100, WAIT_B)
    assert_figures(rollup_row(RollupScope.LOCAL_QUEUE, UNATTRIBUTED, L4), 0, WAIT_C)
    lq_a = rollup_row(RollupScope.LOCAL_QUEUE, "ns-a/lq-a", H100)
    assert_figures(lq_a, 3, ALPHA_H100)
    assert (lq_a.cluster_queue, lq_a.team) == (scenario.cq_a, scenario.alpha)
    assert_figures(rollup_row(RollupScope.LOCAL_QUEUE, "ns-b/lq-b", A100), 3, MIG_A100)

    assert keys_of(RollupScope.WORKLOAD) == {
        ("ns-a/train", "h100"),
        ("ns-b/infer", "h100"),
        ("ns-b/mig-job", "a100-mig"),
        ("ns-b/wait-b", "h100"),
        ("ns-c/wait-c", "l4"),
        (UNATTRIBUTED, "h100"),
    }
    # A Workload that only waited has a row of its own, with zeros but its pending GPU-hours.
    wait_b = rollup_row(RollupScope.WORKLOAD, "ns-b/wait-b", H100)
    assert_figures(wait_b, 0, WAIT_B)
    assert (wait_b.cluster_queue, wait_b.team) == (scenario.cq_b, scenario.beta)
    assert_figures(rollup_row(RollupScope.WORKLOAD, "ns-c/wait-c", L4), 0, WAIT_C)
    train = rollup_row(RollupScope.WORKLOAD, "ns-a/train", H100)
    assert_figures(train, 3, ALPHA_H100)
    assert (train.workload, train.cluster_queue, train.team) == (
        scenario.train,
        scenario.cq_a,
        scenario.alpha,
    )
    assert_figures(rollup_row(RollupScope.WORKLOAD, "ns-b/infer", H100), 3, BETA_H100)
    mig_job = rollup_row(RollupScope.WORKLOAD, "ns-b/mig-job", A100)
    assert_figures(mig_job, 3, MIG_A100)
    assert mig_job.workload == scenario.mig_job
    notebook = rollup_row(RollupScope.WORKLOAD, UNATTRIBUTED, H100)
    assert_figures(notebook, 3, NOTEBOOK_H100)
    assert notebook.workload_id is None


def test_window_ending_on_the_hour_belongs_to_the_hour_before(scenario):
    roll_up_hour(scenario.cluster.pk, H1)

    # Hour 13 holds only the windows ending 13:01 and 13:02: gpu0 (held) and gpu4 (free).
    assert_figures(
        rollup_row(RollupScope.FLEET, "test", H100, hour=H1),
        2,
        {
            "capacity_gpu_hours": 2 * 2 * W,
            "allocated_gpu_hours": 1 * 2 * W,
            "telemetry_gpu_hours": 1 * 2 * W,
            "active_gpu_hours": 0.8 * 2 * W,
            "tensor_active_gpu_hours": 0.4 * 2 * W,
            "tensor_covered_gpu_hours": 1 * 2 * W,
            "gpu_util_gpu_hours": 0.9 * 2 * W,
            "gpu_util_covered_gpu_hours": 1 * 2 * W,
            "peak_allocated_gpus": 1,
            "nominal_gpu_hours": 4 * 1 * W,
            "borrowed_gpu_hours": 9 * 1 * W,
        },
    )
    assert keys_of(RollupScope.FLEET, hour=H1) == {("test", "h100")}


def test_allocated_gpus_without_telemetry_are_no_data_never_idle(cluster):
    end = H0 + MINUTE
    GpuUsage.objects.bulk_create(
        [usage_row(cluster, end, "", namespace="ns", pod="p", gpus=4.0, capacity_gpus=0.0)]
    )

    roll_up_hour(cluster.pk, H0)

    row = rollup_row(RollupScope.NAMESPACE, "ns", H100)
    assert row.allocated_gpu_hours == pytest.approx(4 * W)
    assert (row.telemetry_gpu_hours, row.idle_gpu_hours, row.active_gpu_hours) == (0, 0, 0)
    assert row.telemetry_coverage == 0
    assert row.utilization is None


def test_idle_and_busy_thresholds_come_from_settings(scenario, settings):
    settings.GPULEDGER_IDLE_THRESHOLD = 0.2
    settings.GPULEDGER_BUSY_GPU_UTIL = 55
    settings.GPULEDGER_BUSY_SM_ACTIVE = 0.9

    roll_up_hour(scenario.cluster.pk, H0)

    h100 = rollup_row(RollupScope.FLEET, "test", H100)
    # Below 0.2: r2 (0.1) and r3 (0.005); r5 (0.0) is not held.
    assert h100.idle_gpu_hours == pytest.approx((1 + 1) * 3 * W)
    # GPU_UTIL ≥ 55 and SM < 0.9: r1 (90, 0.8), r2 (80, 0.1), r4a + r4b (70, 0.6); r3 has 0.
    assert h100.busy_not_working_gpu_hours == pytest.approx((1 + 1 + 0.5 + 0.5) * 3 * W)
    # r7 has GPU_UTIL 60 but no SM_ACTIVE (GR_ENGINE_ACTIVE 0.5 only): never busy-not-working.
    assert rollup_row(RollupScope.FLEET, "test", A100).busy_not_working_gpu_hours == 0


def test_usage_figures_of_every_scope_sum_to_the_fleet(scenario):
    roll_up_hour(scenario.cluster.pk, H0)

    def totals(scope: str, figures: list[str]) -> dict[str, float]:
        found = HourlyRollup.objects.filter(scope=scope, hour=H0).aggregate(
            **{figure: Sum(figure) for figure in figures}
        )
        return {figure: found[figure] or 0.0 for figure in figures}

    usage = [figure for figure in USAGE_FIGURES if figure != "capacity_gpu_hours"]
    fleet_usage = totals(RollupScope.FLEET, usage)
    assert fleet_usage["allocated_gpu_hours"] > 0
    for scope in ("team", "namespace", "cohort", "cluster_queue", "local_queue", "workload"):
        assert totals(scope, usage) == pytest.approx(fleet_usage, rel=1e-9), scope
    for scope in ("node", "flavor"):
        assert totals(scope, USAGE_FIGURES) == pytest.approx(
            totals(RollupScope.FLEET, USAGE_FIGURES), rel=1e-9
        )
    fleet_quota = totals(RollupScope.FLEET, QUOTA_FIGURES)
    assert fleet_quota["nominal_gpu_hours"] > 0
    for scope in ("team", "cohort", "cluster_queue", "flavor"):
        assert totals(scope, QUOTA_FIGURES) == pytest.approx(fleet_quota, rel=1e-9), scope
    fleet_pending = totals(RollupScope.FLEET, ["pending_gpu_hours"])
    assert fleet_pending["pending_gpu_hours"] > 0
    for scope in ("namespace", "local_queue", "workload"):
        assert totals(scope, ["pending_gpu_hours"]) == pytest.approx(fleet_pending), scope


def snapshot() -> list[tuple]:
    fields = ["scope", "key", "hour", "flavor", "gpu_model", "team_id", "cluster_queue_id"]
    fields += ["workload_id", *ALL_FIGURES, "windows"]
    return sorted(HourlyRollup.objects.values_list(*fields))


def test_rerunning_an_hour_changes_nothing(scenario):
    first = roll_up_hour(scenario.cluster.pk, H0)
    before = snapshot()

    again = roll_up_hour(scenario.cluster.pk, H0)

    assert again == first == HourlyRollup.objects.count()
    assert snapshot() == before


def test_a_late_window_re_rolls_its_hour_only(scenario):
    roll_up_range(scenario.cluster.pk, H0, H1 + MINUTE)
    hour_one = snapshot_hour(H1)
    late = H0 + 3 * MINUTE
    GpuUsage.objects.bulk_create(
        [usage_row(scenario.cluster, late, "n1/g0/", namespace="ns-a", pod="train-0", sm=0.2)]
    )

    for hour in hours_touched([late]):
        roll_up_hour(scenario.cluster.pk, hour)

    fleet = rollup_row(RollupScope.FLEET, "test", H100)
    assert fleet.allocated_gpu_hours == pytest.approx(16 * W + 1 * W)
    assert fleet.active_gpu_hours == pytest.approx(4.515 * W + 0.2 * W)
    assert fleet.windows == 4
    assert snapshot_hour(H1) == hour_one


def snapshot_hour(hour: datetime) -> list[tuple]:
    return [row for row in snapshot() if row[2] == hour]


def test_a_group_gone_from_usage_loses_its_row_on_re_roll(scenario):
    roll_up_hour(scenario.cluster.pk, H0)
    GpuUsage.objects.filter(namespace="ns-c").delete()

    roll_up_hour(scenario.cluster.pk, H0)

    assert ("ns-c", "h100") not in keys_of(RollupScope.NAMESPACE)
    assert (UNATTRIBUTED, "h100") not in keys_of(RollupScope.WORKLOAD)


def test_rolling_up_one_cluster_leaves_other_clusters_alone(scenario):
    other = Cluster.objects.create(name="other")
    GpuUsage.objects.bulk_create([usage_row(other, H0 + MINUTE, "x/g0/", namespace="ns-a")])
    roll_up_hour(other.pk, H0)
    theirs = list(HourlyRollup.objects.filter(cluster=other).values_list("pk", flat=True))

    roll_up_hour(scenario.cluster.pk, H0)

    assert list(HourlyRollup.objects.filter(cluster=other).values_list("pk", flat=True)) == theirs
    fleet = rollup_row(RollupScope.FLEET, "test", H100)
    assert fleet.allocated_gpu_hours == pytest.approx(16 * W)


def test_roll_up_range_covers_every_hour_touching_the_range(scenario):
    written = roll_up_range(scenario.cluster.pk, H0 + 30 * MINUTE, H1)
    assert set(HourlyRollup.objects.values_list("hour", flat=True)) == {H0}
    assert written == HourlyRollup.objects.count()

    written = roll_up_range(scenario.cluster.pk, H0, H1 + timedelta(seconds=1))

    assert set(HourlyRollup.objects.values_list("hour", flat=True)) == {H0, H1}
    assert written == HourlyRollup.objects.count()


def test_hours_touched_puts_a_window_in_the_hour_of_its_start():
    ends = [
        H0 + MINUTE,
        H1,  # (12:59, 13:00] is hour 12's
        H0 + 30 * MINUTE,
        H1 + timedelta(microseconds=1),
        H1 + timedelta(hours=2),
    ]

    assert hours_touched(ends) == [H0, H1, H1 + timedelta(hours=1)]


def test_hours_touched_refuses_naive_times():
    with pytest.raises(ValueError, match="naive"):
        hours_touched([datetime(2025, 3, 10, 12, 1)])  # noqa: DTZ001


@pytest.mark.skipif(
    connection.vendor == "postgresql",
    reason="PostgreSQL drops whole days of usage: tests/ledger/test_partitions.py",
)
def test_prune_usage_drops_old_usage_and_samples_in_batches_and_keeps_rollups(
    scenario, monkeypatch
):
    monkeypatch.setattr(rollup.prune, "PRUNE_BATCH_SIZE", 4)
    roll_up_range(scenario.cluster.pk, H0, H1 + MINUTE)
    rollups = snapshot()

    deleted = prune_usage(H1)

    # Usage ending before 13:00: 9 rows at 12:01, 9 at 12:02, 1 at 12:00.
    # Samples before 13:00: 1 at 12:00, 3 + cpu at 12:01, 3 at 12:02.
    assert deleted == (9 + 9 + 1) + (1 + 4 + 3)
    assert set(GpuUsage.objects.values_list("window_end", flat=True)) == {H1, *H1_WINDOWS}
    assert set(ClusterQueueSample.objects.values_list("sampled_at", flat=True)) == {
        H1,
        H1_WINDOWS[0],
    }
    assert snapshot() == rollups


def test_prune_rollups_drops_only_hours_before_the_cut(scenario, monkeypatch):
    monkeypatch.setattr(rollup.prune, "PRUNE_BATCH_SIZE", 3)
    roll_up_range(scenario.cluster.pk, H0, H1 + MINUTE)
    hour_one = snapshot_hour(H1)
    old = HourlyRollup.objects.filter(hour=H0).count()
    assert old > 0

    deleted = prune_rollups(H1)

    assert deleted == old
    assert snapshot() == hour_one
    assert GpuUsage.objects.filter(window_end__lte=H1).count() == 9 + 9 + 8 + 1


def random_hour(cluster: Cluster, rng: random.Random, mixed_lengths: bool) -> None:
    """Usage and queue samples around H0 with every case the figures distinguish, at random."""
    teams = [Team.objects.create(name=f"team-{index}") for index in range(3)]
    cohort = Cohort.objects.create(cluster=cluster, name="research")
    queues = [
        ClusterQueue.objects.create(cluster=cluster, name="cq-0", team=teams[0], cohort=cohort),
        ClusterQueue.objects.create(
            cluster=cluster, name="cq-1", team=teams[1], cohort_name="research"
        ),
        ClusterQueue.objects.create(cluster=cluster, name="cq-2", team=teams[2], cohort_name="ml"),
        ClusterQueue.objects.create(cluster=cluster, name="cq-3"),
    ]
    local_queues = [
        LocalQueue.objects.create(
            cluster=cluster,
            namespace=f"ns-{index}",
            name="lq",
            cluster_queue=queue,
            cluster_queue_name=queue.name,
        )
        for index, queue in enumerate(queues)
    ]
    local_queues.append(
        LocalQueue.objects.create(
            cluster=cluster, namespace="ns-x", name="lq", cluster_queue_name="gone"
        )
    )
    workloads = [
        Workload.objects.create(
            cluster=cluster,
            namespace=local_queue.namespace,
            name=f"job-{index}",
            cluster_queue=local_queue.cluster_queue,
            local_queue=local_queue,
        )
        for index, local_queue in enumerate(local_queues * 2)
    ]
    ResourceFlavor.objects.create(cluster=cluster, name="a100", gpu_model="NVIDIA-A100")

    def holder() -> dict[str, object]:
        if rng.random() < 0.15:  # a pod outside Kueue
            return {"namespace": rng.choice(["ns-0", "notebooks", ""])}
        workload = rng.choice(workloads)
        fields: dict[str, object] = {
            "namespace": workload.namespace,
            "workload": workload,
            "local_queue": workload.local_queue,
            "cluster_queue": workload.cluster_queue,
            "team": workload.cluster_queue.team if workload.cluster_queue else None,
        }
        if rng.random() < 0.1:  # attribution that disagrees with the workload's own
            fields["team"] = rng.choice([*teams, None])
        return fields

    slots = [
        {
            "gpu_key": f"g{index}",
            "node_name": rng.choice(["node-1", "node-2", "node-3", ""]),
            "flavor": rng.choice([H100, A100, ("", ""), ("h100", "NVIDIA-H100-PCIE")]),
            "gpus": rng.choice([1.0, 1.0, 0.5, 3 / 7, 2.0]),
            "holder": holder(),
        }
        for index in range(30)
    ]
    ends = [H0 + minutes * MINUTE for minutes in (1, 2, 3, 5, 8, 13, 21, 60)]
    rows = []
    for end in [H0, *ends, H1 + MINUTE]:
        for slot in slots:
            if rng.random() < 0.15:
                continue
            if rng.random() < 0.1:
                slot["holder"] = holder()  # a new pod from this window on
            allocated = rng.random() < 0.8
            telemetry = rng.choice(["sm", "sm", "sm", "gr", "none"])
            sm = rng.choice([0.0, 0.005, 0.1, 0.15, 0.5, 0.9])
            fields: dict[str, object] = {
                "node_name": slot["node_name"],
                "flavor": slot["flavor"],
                "allocated": allocated,
                "gpus": slot["gpus"],
                "capacity_gpus": rng.choice([slot["gpus"], slot["gpus"], 0.0]),
                "shared": rng.random() < 0.2,
                "pipe_tensor_active": rng.choice([None, 0.0, 0.3]),
                "gpu_util": rng.choice([None, 0.0, 45.0, 50.0, 95.0]),
                **(slot["holder"] if allocated else {}),
            }
            if telemetry == "sm":
                fields["sm"] = sm
            elif telemetry == "gr":
                fields["gr"] = sm
            row = usage_row(cluster, end, slot["gpu_key"], pod=slot["gpu_key"], **fields)
            if mixed_lengths and rng.random() < 0.2:
                row.window_start = end - 2 * MINUTE
            rows.append(row)
    GpuUsage.objects.bulk_create(rows)

    samples = []
    for end in ends:
        for queue in queues:
            for flavor in ("h100", "a100", "l4"):
                if rng.random() < 0.7:
                    samples.append(
                        sample(
                            queue,
                            flavor,
                            end,
                            nominal=rng.randint(0, 8),
                            borrowed=rng.randint(0, 2),
                            lent=rng.randint(0, 2),
                            pending_demand=rng.randint(0, 3),
                        )
                    )
    ClusterQueueSample.objects.bulk_create(samples)


def rollups_by_identity() -> dict[tuple, tuple]:
    return {row[:5]: row[5:] for row in snapshot()}


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the fast path is PostgreSQL's; SQLite has one path"
)
@pytest.mark.parametrize("mixed_lengths", [False, True], ids=["one-length", "mixed-lengths"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_postgresql_fast_path_writes_the_figures_of_the_portable_path(
    cluster, monkeypatch, seed, mixed_lengths
):
    # Given a random hour (and windows of two lengths ending together, in one variant)
    random_hour(cluster, random.Random(seed), mixed_lengths)

    # When the hour is rolled up by each path
    fast_written = roll_up_hour(cluster.pk, H0)
    fast = rollups_by_identity()
    monkeypatch.setattr(rollup.postgres, "FAST_PATH_VENDORS", ())
    portable_written = roll_up_hour(cluster.pk, H0)
    portable = rollups_by_identity()

    # Then both wrote the same rows with the same figures (sums may differ in the last bits)
    assert fast_written == portable_written == len(portable) > 50
    assert fast.keys() == portable.keys()
    for identity, values in portable.items():
        # team, queue and workload ids, then the figures, then windows
        assert fast[identity][:3] == values[:3], identity
        assert fast[identity][-1] == values[-1], identity
        figures = zip(ALL_FIGURES, values[3:-1], fast[identity][3:-1], strict=True)
        for name, expected, actual in figures:
            assert math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-12), (identity, name)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="only the fast path changes them")
def test_the_fast_path_gives_back_the_planner_settings_of_the_callers_transaction(scenario):
    def current() -> tuple[str, ...]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('work_mem'), current_setting('enable_sort')")
            return cursor.fetchone()

    before = current()

    roll_up_range(scenario.cluster.pk, H0, H1 + MINUTE)  # inside the test's transaction

    assert current() == before
