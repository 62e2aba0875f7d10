"""The quota pages' scenario and the helpers their tests share.

The data is a small Kueue scenario built with the ORM (``build_world``), modelled on the Kueue
fixtures: cohort "research" with team-a (team alpha, borrowing 4 H100) and team-b (team beta,
lending 4 H100), a preemption of team-a's a5 by team-b's c1, hourly rollups for the last 48 hours
and per-window usage for a1's two GPUs. Expected numbers are computed from the created rows.
``conftest.py`` builds it once per test module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.urls import reverse

from core.timewindows import floor_time
from fleet.choices import IngestSource, IngestStatus
from fleet.models import Cluster, Gpu, IngestRun, Node
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup
from quotas.choices import TransitionKind, WorkloadState
from quotas.models import (
    Allocation,
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    Team,
    Workload,
    WorkloadTransition,
)

NOW = datetime(2026, 8, 22, 12, 0, 30, tzinfo=UTC)
ROLLUP_HOURS = 48
BORROWING_HOURS = 5  # team-a borrowed in the newest 5 hours
# 25, and one for the queue service-level section a page gained: the team's wait objectives, or
# the workload's admission attempts (a constant, whatever the data size); one more for the team
# page's serving deployments (its serving hours; a team with deployments reads five more, the
# same for any number: tests/serving/test_deployments.py).
MAX_PAGE_QUERIES = 27
MAX_CHART_QUERIES = 12


@dataclass
class World:
    now: datetime
    cluster: Any
    alpha: Team
    beta: Team
    cohort: Cohort
    cq_a: ClusterQueue
    cq_b: ClusterQueue
    wl: dict[str, Workload]
    hours: list[datetime]
    lead: Any
    beta_lead: Any
    gpus: list[Gpu] = field(default_factory=list)
    usage: list[GpuUsage] = field(default_factory=list)


def _hourly(world_hours: list[datetime], start: datetime, end: datetime) -> list[datetime]:
    return [hour for hour in world_hours if start <= hour < end]


def _teams_and_queues(
    cluster, lead_user, beta_lead
) -> tuple[Team, Team, Cohort, ClusterQueue, ClusterQueue]:
    """Teams alpha (led by ``lead_user``) and beta, cohort "research" and its two queues."""
    alpha = Team.objects.create(name="alpha", display_name="Alpha", cost_center="CC-1")
    beta = Team.objects.create(name="beta", display_name="Beta")
    alpha.leads.add(lead_user)
    beta.leads.add(beta_lead)
    cohort = Cohort.objects.create(
        cluster=cluster,
        name="research",
        resource_groups=[
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]}
                ],
            }
        ],
    )
    cq_a = ClusterQueue.objects.create(
        cluster=cluster,
        name="team-a",
        team=alpha,
        cohort=cohort,
        cohort_name="research",
        reclaim_within_cohort="Any",
        weighted_share=118,
    )
    cq_b = ClusterQueue.objects.create(
        cluster=cluster,
        name="team-b",
        team=beta,
        cohort=cohort,
        cohort_name="research",
        reclaim_within_cohort="LowerPriority",
        weighted_share=0,
    )
    return alpha, beta, cohort, cq_a, cq_b


def _quotas_and_samples(cq_a: ClusterQueue, cq_b: ClusterQueue, minute: datetime) -> None:
    """The queues' quotas (one on memory, which no page counts) and their newest samples."""
    gpu = "nvidia.com/gpu"
    ClusterQueueQuota.objects.bulk_create(
        [
            ClusterQueueQuota(
                cluster_queue=cq_a,
                flavor_name="h100",
                resource=gpu,
                position=0,
                nominal=Decimal(16),
                borrowing_limit=Decimal(8),
                lending_limit=Decimal(8),
            ),
            ClusterQueueQuota(
                cluster_queue=cq_a,
                flavor_name="a100",
                resource=gpu,
                position=1,
                nominal=Decimal(8),
                borrowing_limit=None,
                lending_limit=Decimal(0),
            ),
            ClusterQueueQuota(
                cluster_queue=cq_a,
                flavor_name="h100",
                resource="memory",
                position=0,
                nominal=Decimal(4096 * 2**30),
                borrowing_limit=None,
                lending_limit=None,
            ),
            ClusterQueueQuota(
                cluster_queue=cq_b,
                flavor_name="h100",
                resource=gpu,
                position=0,
                nominal=Decimal(8),
                borrowing_limit=Decimal(8),
                lending_limit=Decimal(4),
            ),
        ]
    )
    sample = {"resource": gpu, "window_seconds": 60}
    ClusterQueueSample.objects.bulk_create(
        [
            ClusterQueueSample(
                cluster_queue=cq_a,
                flavor_name="h100",
                sampled_at=minute - timedelta(minutes=1),
                total=20,
                borrowed=4,
                lent=0,
                nominal=16,
                pending_demand=12,
                **sample,
            ),
            # Older than the newest: must not count.
            ClusterQueueSample(
                cluster_queue=cq_a,
                flavor_name="h100",
                sampled_at=minute - timedelta(minutes=5),
                total=18,
                borrowed=2,
                nominal=16,
                **sample,
            ),
            ClusterQueueSample(
                cluster_queue=cq_b,
                flavor_name="h100",
                sampled_at=minute - timedelta(minutes=1),
                total=2,
                borrowed=0,
                lent=4,
                nominal=8,
                pending_demand=4,
                **sample,
            ),
            # Too old to describe "now".
            ClusterQueueSample(
                cluster_queue=cq_b,
                flavor_name="a100",
                sampled_at=minute - timedelta(hours=2),
                total=0,
                lent=7,
                nominal=0,
                **sample,
            ),
        ]
    )


def _workloads(
    cluster, cq_a: ClusterQueue, cq_b: ClusterQueue, now: datetime
) -> dict[str, Workload]:
    """team-a's a1 to a5 (a2 borrows; a5 was preempted by c1), team-b's b1, b2 and c1."""
    gpu = "nvidia.com/gpu"

    def workload(name: str, queue: ClusterQueue, **fields: Any) -> Workload:
        namespace = "team-a" if queue == cq_a else "team-b"
        return Workload.objects.create(
            cluster=cluster, namespace=namespace, name=name, cluster_queue=queue, **fields
        )

    return {
        "a1": workload(
            "job-llama-pretrain",
            cq_a,
            state=WorkloadState.ADMITTED,
            requested_gpus=8,
            admitted_gpus=8,
            flavors={gpu: "h100"},
            priority=500,
            priority_class_name="research-default",
            observed_at=now - timedelta(hours=10),
            admitted_at=now - timedelta(hours=10),
            owner_kind="Job",
            owner_name="llama-pretrain",
        ),
        "a2": workload(
            "jobset-mixtral-ft",
            cq_a,
            state=WorkloadState.ADMITTED,
            requested_gpus=12,
            admitted_gpus=12,
            flavors={gpu: "h100"},
            priority=500,
            borrowing=True,
            borrowed_gpus=4,
            observed_at=now - timedelta(hours=3),
            admitted_at=now - timedelta(hours=2),
            pod_sets=[
                {
                    "name": "workers",
                    "count": 3,
                    "gpus_per_pod": 4,
                    "template": {"spec": {"terminationGracePeriodSeconds": 60}},
                }
            ],
        ),
        "a3": workload(
            "job-llama-eval",
            cq_a,
            state=WorkloadState.PENDING,
            requested_gpus=8,
            priority=500,
            state_reason="Pending",
            state_message=(
                "insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"
            ),
            pending_position=1,
            observed_at=now - timedelta(hours=3),
        ),
        "a5": workload(
            "job-lr-sweep",
            cq_a,
            state=WorkloadState.PENDING,
            requested_gpus=4,
            priority=100,
            state_message="preempted, waiting for quota",
            pending_position=2,
            observed_at=now - timedelta(hours=22),
        ),
        "a4": workload(
            "job-tokenizer-bench",
            cq_a,
            state=WorkloadState.SUCCEEDED,
            requested_gpus=8,
            admitted_gpus=8,
            observed_at=now - timedelta(hours=40),
            finished_at=now - timedelta(hours=30),
        ),
        "b1": workload(
            "job-vit-ablation",
            cq_b,
            state=WorkloadState.ADMITTED,
            requested_gpus=2,
            admitted_gpus=2,
            flavors={gpu: "h100"},
            priority=500,
            observed_at=now - timedelta(hours=4),
            admitted_at=now - timedelta(hours=4),
        ),
        "b2": workload(
            "job-ddp-smoke",
            cq_b,
            state=WorkloadState.PENDING,
            requested_gpus=4,
            priority=1000,
            observed_at=now - timedelta(hours=1),
        ),
        "c1": workload(
            "job-protein-fold",
            cq_b,
            state=WorkloadState.ADMITTED,
            requested_gpus=8,
            admitted_gpus=8,
            flavors={gpu: "h100"},
            priority=500,
            observed_at=now - timedelta(hours=7),
            admitted_at=now - timedelta(hours=6) + timedelta(seconds=31),
        ),
    }


def _transitions(wl: dict[str, Workload], now: datetime) -> None:
    """a5's life up to its preemption by c1 six hours ago, c1's admission, a1's start."""
    preempted_at = now - timedelta(hours=6)
    WorkloadTransition.objects.bulk_create(
        [
            WorkloadTransition(
                workload=wl["a5"], kind=TransitionKind.CREATED, at=now - timedelta(hours=22)
            ),
            WorkloadTransition(
                workload=wl["a5"],
                kind=TransitionKind.ADMITTED,
                at=now - timedelta(hours=21),
                reason="Admitted",
            ),
            WorkloadTransition(
                workload=wl["a5"],
                kind=TransitionKind.EVICTED,
                at=preempted_at,
                reason="Preempted",
                message="Preempted to accommodate a workload due to reclamation within the cohort",
            ),
            WorkloadTransition(
                workload=wl["a5"],
                kind=TransitionKind.PREEMPTED,
                at=preempted_at,
                reason="InCohortReclamation",
                preemptor=wl["c1"],
                preemptor_path="/research/team-b",
            ),
            WorkloadTransition(
                workload=wl["a5"],
                kind=TransitionKind.REQUEUED,
                at=preempted_at + timedelta(seconds=30),
                reason="Preempted",
            ),
            WorkloadTransition(
                workload=wl["c1"],
                kind=TransitionKind.CREATED,
                at=now - timedelta(hours=7),
            ),
            WorkloadTransition(
                workload=wl["c1"],
                kind=TransitionKind.ADMITTED,
                at=preempted_at + timedelta(seconds=31),
                reason="Admitted",
            ),
            WorkloadTransition(
                workload=wl["a1"],
                kind=TransitionKind.CREATED,
                at=now - timedelta(hours=10),
            ),
            WorkloadTransition(
                workload=wl["a1"],
                kind=TransitionKind.ADMITTED,
                at=now - timedelta(hours=10) + timedelta(seconds=5),
                reason="Admitted",
            ),
            WorkloadTransition(
                workload=wl["a1"],
                kind=TransitionKind.PODS_READY,
                at=now - timedelta(hours=9),
                reason="Started",
            ),
        ]
    )


def _rollups(cluster, world: World) -> None:
    """Hourly rollups of the last ``ROLLUP_HOURS`` hours: teams, queues, a1 and a2."""
    last_hour = floor_time(world.now, 3600)
    rollups = []
    for n, hour in enumerate(world.hours, start=1):
        borrowing = hour >= last_hour - timedelta(hours=BORROWING_HOURS)
        common = {"cluster": cluster, "hour": hour, "windows": 60}
        rollups += _hour_rollups(world, n, borrowing, common)
    HourlyRollup.objects.bulk_create(rollups)


def _hour_rollups(
    world: World, n: int, borrowing: bool, common: dict[str, Any]
) -> list[HourlyRollup]:
    """The ``n``th hour's rollups; team-a borrows from team-b when ``borrowing``."""
    alpha, beta, cq_a, cq_b, wl = world.alpha, world.beta, world.cq_a, world.cq_b, world.wl
    return [
        HourlyRollup(
            scope=RollupScope.TEAM,
            key="alpha",
            team=alpha,
            flavor="h100",
            allocated_gpu_hours=20.0,
            nominal_gpu_hours=16.0,
            telemetry_gpu_hours=18.0,
            active_gpu_hours=9.0 + n / 10.0,
            idle_gpu_hours=1.5,
            borrowed_gpu_hours=4.0 if borrowing else 0.0,
            **common,
        ),
        HourlyRollup(
            scope=RollupScope.TEAM,
            key="alpha",
            team=alpha,
            flavor="a100",
            nominal_gpu_hours=8.0,
            **common,
        ),
        HourlyRollup(
            scope=RollupScope.TEAM,
            key="beta",
            team=beta,
            flavor="h100",
            allocated_gpu_hours=10.0,
            nominal_gpu_hours=8.0,
            telemetry_gpu_hours=10.0,
            active_gpu_hours=2.0,
            idle_gpu_hours=5.0,
            lent_gpu_hours=4.0 if borrowing else 0.0,
            **common,
        ),
        HourlyRollup(
            scope=RollupScope.CLUSTER_QUEUE,
            key="team-a",
            team=alpha,
            cluster_queue=cq_a,
            flavor="h100",
            allocated_gpu_hours=20.0,
            nominal_gpu_hours=16.0,
            telemetry_gpu_hours=18.0,
            active_gpu_hours=9.0,
            borrowed_gpu_hours=4.0 if borrowing else 0.0,
            pending_gpu_hours=12.0,
            **common,
        ),
        HourlyRollup(
            scope=RollupScope.CLUSTER_QUEUE,
            key="team-a",
            team=alpha,
            cluster_queue=cq_a,
            flavor="a100",
            nominal_gpu_hours=8.0,
            **common,
        ),
        HourlyRollup(
            scope=RollupScope.CLUSTER_QUEUE,
            key="team-b",
            team=beta,
            cluster_queue=cq_b,
            flavor="h100",
            allocated_gpu_hours=10.0,
            nominal_gpu_hours=8.0,
            lent_gpu_hours=4.0 if borrowing else 0.0,
            **common,
        ),
        HourlyRollup(
            scope=RollupScope.WORKLOAD,
            key="team-a/job-llama-pretrain",
            team=alpha,
            cluster_queue=cq_a,
            workload=wl["a1"],
            flavor="h100",
            allocated_gpu_hours=8.0,
            telemetry_gpu_hours=8.0,
            active_gpu_hours=6.0,
            tensor_active_gpu_hours=2.0,
            tensor_covered_gpu_hours=8.0,
            idle_gpu_hours=0.5,
            **common,
        ),
        HourlyRollup(
            scope=RollupScope.WORKLOAD,
            key="team-a/jobset-mixtral-ft",
            team=alpha,
            cluster_queue=cq_a,
            workload=wl["a2"],
            flavor="h100",
            allocated_gpu_hours=12.0,
            telemetry_gpu_hours=12.0,
            active_gpu_hours=1.2,
            tensor_active_gpu_hours=0.6,
            tensor_covered_gpu_hours=12.0,
            idle_gpu_hours=9.0,
            **common,
        ),
    ]


def _gpus_and_usage(cluster, world: World) -> None:
    """Two H100 nodes, a1's pods on one GPU of each, and their last 30 one-minute windows."""
    now, wl, cq_a, alpha = world.now, world.wl, world.cq_a, world.alpha
    minute = floor_time(now, 60)
    nodes = [
        Node.objects.create(cluster=cluster, name=f"gpu-node-h100-0{i}", gpu_product="H100")
        for i in (1, 2)
    ]
    gpus = [
        Gpu.objects.create(
            cluster=cluster,
            node=node,
            host=node.name,
            uuid=f"GPU-{node.name}-0",
            index=0,
            model_name="NVIDIA H100",
        )
        for node in nodes
    ]
    for index, (node, device) in enumerate(zip(nodes, gpus, strict=True)):
        allocation = Allocation.objects.create(
            cluster=cluster,
            namespace="team-a",
            pod=f"llama-pretrain-{index}",
            pod_uid=f"uid-{index}",
            node=node,
            node_name=node.name,
            gpus=4,
            workload=wl["a1"],
            started_at=now - timedelta(hours=9),
        )
        allocation.gpu_devices.add(device)
    usage = []
    for minutes in range(1, 31):
        end = minute - timedelta(minutes=minutes)
        for index, device in enumerate(gpus):
            usage.append(
                GpuUsage(
                    cluster=cluster,
                    window_start=end - timedelta(seconds=60),
                    window_end=end,
                    gpu=device,
                    gpu_key=device.key,
                    namespace="team-a",
                    pod=f"llama-pretrain-{index}",
                    workload=wl["a1"],
                    cluster_queue=cq_a,
                    team=alpha,
                    allocated=True,
                    gpus=1.0,
                    capacity_gpus=1.0,
                    activity=0.5 + index * 0.2,
                    sm_active=0.5 + index * 0.2,
                    pipe_tensor_active=0.1 + index * 0.1,
                    activity_source="sm_active",
                )
            )
    GpuUsage.objects.bulk_create(usage)
    world.gpus, world.usage = gpus, usage


def build_world(cluster, lead_user, beta_lead, now: datetime) -> World:
    """The scenario above, relative to ``now`` (a minute boundary is not required)."""
    minute = floor_time(now, 60)
    alpha, beta, cohort, cq_a, cq_b = _teams_and_queues(cluster, lead_user, beta_lead)
    _quotas_and_samples(cq_a, cq_b, minute)
    wl = _workloads(cluster, cq_a, cq_b, now)
    _transitions(wl, now)
    last_hour = floor_time(now, 3600)
    world = World(
        now=now,
        cluster=cluster,
        alpha=alpha,
        beta=beta,
        cohort=cohort,
        cq_a=cq_a,
        cq_b=cq_b,
        wl=wl,
        hours=[last_hour - timedelta(hours=offset) for offset in range(ROLLUP_HOURS, 0, -1)],
        lead=lead_user,
        beta_lead=beta_lead,
    )
    _rollups(cluster, world)
    _gpus_and_usage(cluster, world)
    IngestRun.objects.create(
        cluster=cluster,
        source=IngestSource.KUEUE,
        status=IngestStatus.SUCCESS,
        started_at=minute - timedelta(seconds=20),
        finished_at=minute - timedelta(seconds=10),
    )
    return world


def new_world(now: datetime) -> World:
    """``build_world`` on a new cluster "test", with its two leads: "lead" (team alpha) and
    "beta-lead" (team beta)."""
    users = get_user_model().objects
    return build_world(
        Cluster.objects.create(name="test", display_name="Test cluster"),
        users.create_user(username="lead", password="lead-password"),
        users.create_user(username="beta-lead", password="beta-password"),
        now,
    )


def grow(world: World, count: int) -> None:
    """More of everything the pages list or sum: teams, queues, workloads, samples, rollups."""
    minute = floor_time(world.now, 60)
    for i in range(count):
        team = Team.objects.create(name=f"extra-{i:03d}")
        queue = ClusterQueue.objects.create(
            cluster=world.cluster,
            name=f"extra-q-{i:03d}",
            team=team if i % 2 else world.alpha,
            cohort=world.cohort,
            cohort_name="research",
        )
        ClusterQueueQuota.objects.create(
            cluster_queue=queue, flavor_name="h100", resource="nvidia.com/gpu", nominal=2
        )
        ClusterQueueSample.objects.create(
            cluster_queue=queue,
            flavor_name="h100",
            sampled_at=minute - timedelta(minutes=1),
            total=3,
            borrowed=1,
            lent=1,
            nominal=2,
        )
        for state, borrowing in (
            (WorkloadState.ADMITTED, True),
            (WorkloadState.PENDING, False),
            (WorkloadState.ADMITTED, False),
        ):
            workload = Workload.objects.create(
                cluster=world.cluster,
                namespace="team-a",
                name=f"extra-{i:03d}-{state}-{borrowing}",
                cluster_queue=world.cq_a if i % 3 == 0 else queue,
                state=state,
                requested_gpus=1,
                admitted_gpus=1 if state == WorkloadState.ADMITTED else 0,
                flavors={"nvidia.com/gpu": "h100"},
                borrowing=borrowing,
                borrowed_gpus=1 if borrowing else 0,
                observed_at=world.now - timedelta(hours=1),
                admitted_at=world.now - timedelta(minutes=30),
            )
            WorkloadTransition.objects.create(
                workload=workload,
                kind=TransitionKind.PREEMPTED,
                at=world.now - timedelta(hours=2, minutes=i),
                preemptor=world.wl["c1"],
            )
            HourlyRollup.objects.create(
                cluster=world.cluster,
                scope=RollupScope.WORKLOAD,
                key=f"team-a/{workload.name}",
                hour=world.hours[-1],
                workload=workload,
                allocated_gpu_hours=1,
            )
        for hour in world.hours[-3:]:
            HourlyRollup.objects.create(
                cluster=world.cluster,
                scope=RollupScope.CLUSTER_QUEUE,
                key=queue.name,
                hour=hour,
                cluster_queue=queue,
                team=queue.team,
                flavor="h100",
                allocated_gpu_hours=3,
                borrowed_gpu_hours=1,
                lent_gpu_hours=1,
            )
            HourlyRollup.objects.create(
                cluster=world.cluster,
                scope=RollupScope.TEAM,
                key=team.name,
                hour=hour,
                team=team,
                allocated_gpu_hours=3,
            )


def page_urls(world: World) -> dict[str, str]:
    cluster = world.cluster.name
    return {
        "team-list": reverse("dashboard:team-list"),
        "team": reverse("dashboard:team-detail", args=["alpha"]),
        "cohort-list": reverse("dashboard:cohort-list"),
        "cohort": reverse("dashboard:cohort-detail", args=[cluster, "research"]),
        "queue-list": reverse("dashboard:cluster-queue-list"),
        "queue": reverse("dashboard:cluster-queue-detail", args=[cluster, "team-a"]),
        "workload": reverse("dashboard:workload-detail", args=[world.wl["a1"].pk]),
    }


def chart_urls(world: World) -> dict[str, str]:
    cluster = world.cluster.name
    a1 = world.wl["a1"].pk
    return {
        "team-allocation": reverse("dashboard:team-chart-allocation", args=["alpha"]),
        "team-queues": reverse("dashboard:team-chart-queues", args=["alpha"]),
        "cohort-usage": reverse("dashboard:cohort-chart-usage", args=[cluster, "research"]),
        "cohort-borrowing": reverse("dashboard:cohort-chart-borrowing", args=[cluster, "research"]),
        "queue-usage": reverse("dashboard:cluster-queue-chart-usage", args=[cluster, "team-a"]),
        "queue-evictions": reverse(
            "dashboard:cluster-queue-chart-evictions", args=[cluster, "team-a"]
        ),
        "workload-timeline": reverse("dashboard:workload-chart-timeline", args=[a1]),
        "workload-activity": reverse("dashboard:workload-chart-activity", args=[a1]),
    }


def text(response) -> str:
    return response.content.decode()


def figure(response) -> dict[str, Any]:
    assert response.status_code == 200, response.content[:500]
    return json.loads(response.content)


def trace(fig: dict[str, Any], name: str) -> dict[str, Any]:
    matches = [t for t in fig["data"] if t["name"] == name]
    assert matches, [t["name"] for t in fig["data"]]
    return matches[0]


def range_hours(world: World, days: float) -> list[datetime]:
    end = floor_time(world.now, 60)
    start = end - timedelta(days=days)
    return _hourly(world.hours, floor_time(start, 3600), floor_time(end, 3600))


def rollup_sum(field_name: str, hours: list[datetime], **filters: Any) -> float:
    rows = HourlyRollup.objects.filter(hour__in=hours, **filters).values_list(field_name, flat=True)
    return sum(rows)


def finished_with_pods(world, cluster):
    """a4 finished 30 hours ago; its pods: 2 x 4 GPUs, one re-created when the first ended."""
    a4 = world.wl["a4"]
    a4.admitted_gpus = 0.0  # as the sync stores a finished workload: it holds nothing now
    a4.flavors = {"nvidia.com/gpu": "h100"}
    a4.save(update_fields=["admitted_gpus", "flavors"])
    for name, start, end in (("a", 40, 35), ("b", 39, 30), ("c", 35, 30)):
        Allocation.objects.create(
            cluster=cluster,
            namespace="team-a",
            pod=f"tokenizer-bench-{name}",
            node_name="gpu-node-1",
            gpus=4,
            workload=a4,
            started_at=world.now - timedelta(hours=start),
            ended_at=world.now - timedelta(hours=end),
        )
    return a4


def held_by_running_pods(workload: Workload) -> float:
    """GPUs the workload's pods hold in the newest window, summed here from the usage rows."""
    newest = GpuUsage.objects.order_by("-window_end").values_list("window_end", flat=True).first()
    rows = GpuUsage.objects.filter(window_end=newest, allocated=True, workload=workload)
    return sum(row.gpus for row in rows)
