"""A hand-worked hour of usage and quota samples for the rollup tests, and what its rollups
must hold.

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

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest

from fleet.choices import ActivitySource
from fleet.models import Cluster
from ledger.models import GpuUsage, HourlyRollup
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


def build_scenario() -> SimpleNamespace:
    """The hour of the module docstring, written to the database (no rollups yet)."""
    cluster = Cluster.objects.create(name="test", display_name="Test cluster")
    world = _queues_and_workloads(cluster)
    _usage(world)
    _samples(world)
    return world


def _queues_and_workloads(cluster: Cluster) -> SimpleNamespace:
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
    return SimpleNamespace(
        cluster=cluster,
        alpha=alpha,
        beta=beta,
        cq_a=cq_a,
        cq_b=cq_b,
        cq_c=cq_c,
        lq_a=lq_a,
        lq_b=lq_b,
        train=train,
        infer=infer,
        mig_job=mig_job,
    )


def _usage(world: SimpleNamespace) -> None:
    cluster, alpha, beta = world.cluster, world.alpha, world.beta
    cq_a, cq_b, lq_a, lq_b = world.cq_a, world.cq_b, world.lq_a, world.lq_b
    train, infer, mig_job = world.train, world.infer, world.mig_job
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


def _samples(world: SimpleNamespace) -> None:
    cq_a, cq_b, cq_c = world.cq_a, world.cq_b, world.cq_c
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


def snapshot() -> list[tuple]:
    fields = ["scope", "key", "hour", "flavor", "gpu_model", "team_id", "cluster_queue_id"]
    fields += ["workload_id", *ALL_FIGURES, "windows"]
    return sorted(HourlyRollup.objects.values_list(*fields))


def snapshot_hour(hour: datetime) -> list[tuple]:
    return [row for row in snapshot() if row[2] == hour]
