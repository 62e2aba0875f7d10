"""Three teams sharing one cohort, with real rollup rows, "now" figures and held GPUs.

Teams (cluster "test", cohort "grove", flavor h100):

- aspen (display "Aspen Team"): led by ``lead_a``; ClusterQueue cq-aspen, LocalQueue
  ns-aspen/lq-aspen, workloads aspen-train (admitted, holds GPU 0 of node-1) and aspen-victim
  (preempted by birch-serve; Kueue's message names the preemptor path /grove/cq-birch).
- birch (display "Birch Team"): led by ``lead_b``; cq-birch, ns-birch/lq-birch, workloads
  birch-serve (admitted, borrowing, holds GPU 1 of node-1) and birch-victim (preempted by
  aspen-train).
- cedar: led by nobody; cq-cedar, ns-cedar/lq-cedar, workload cedar-job.

Every hour of ``HOURS`` (the three complete hours before now) has rollups at every scope. Per
hour: aspen 5.25 GPU-hours allocated, birch 13.375, cedar 3.125, so birch's figures over the
three hours (40.125 allocated, 22.125 borrowed) appear nowhere but next to birch: not in the
fleet totals (65.25, 25.875), nor in the other teams' sums seen by aspen's lead (49.5, 25.875).

Users: ``lead_a``, ``lead_b``, ``staff`` (staff, not superuser), ``finance`` (in the finance
group), ``superuser`` (for the admin).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from core.timewindows import floor_time
from tests.databases import kept_for_the_module
from tests.pages.conftest import _usage

HOURS_BACK = 3
GPU = "nvidia.com/gpu"

# Per-hour figures of each team (and so of its queue, LocalQueue, namespace and workload).
PER_HOUR = {
    "aspen": {
        "allocated_gpu_hours": 5.25,
        "telemetry_gpu_hours": 5.25,
        "active_gpu_hours": 3.5,
        "idle_gpu_hours": 0.75,
        "busy_not_working_gpu_hours": 0.5,
        "gpu_util_gpu_hours": 4.0,
        "gpu_util_covered_gpu_hours": 5.25,
        "nominal_gpu_hours": 8.0,
        "lent_gpu_hours": 2.5,
    },
    "birch": {
        "allocated_gpu_hours": 13.375,
        "telemetry_gpu_hours": 13.375,
        "active_gpu_hours": 9.625,
        "idle_gpu_hours": 2.125,
        "busy_not_working_gpu_hours": 1.875,
        "gpu_util_gpu_hours": 11.0,
        "gpu_util_covered_gpu_hours": 13.375,
        "nominal_gpu_hours": 6.0,
        "borrowed_gpu_hours": 7.375,
    },
    "cedar": {
        "allocated_gpu_hours": 3.125,
        "telemetry_gpu_hours": 3.125,
        "active_gpu_hours": 1.25,
        "idle_gpu_hours": 0.625,
        "busy_not_working_gpu_hours": 0.25,
        "gpu_util_gpu_hours": 2.0,
        "gpu_util_covered_gpu_hours": 3.125,
        "nominal_gpu_hours": 4.0,
        "borrowed_gpu_hours": 1.25,
        "lent_gpu_hours": 4.0,
    },
}


def total(team: str, name: str) -> float:
    """A team's figure summed over the fixture's hours."""
    return PER_HOUR[team].get(name, 0.0) * HOURS_BACK


def birch_markers() -> list[str]:
    """What may only appear where birch is visible: its names, and its figures over the range
    (exact, as the API writes them; per hour, as charts plot them; rounded, as pages show them).
    """
    allocated = total("birch", "allocated_gpu_hours")
    borrowed = total("birch", "borrowed_gpu_hours")
    per_hour = PER_HOUR["birch"]["allocated_gpu_hours"]
    return [
        "birch",
        f"{allocated:g}",
        f"{borrowed:g}",
        f"{per_hour:g}",
        f"{allocated:.1f}",
        f"{borrowed:.1f}",
    ]


@dataclass
class World:
    now: datetime
    hours: list[datetime]
    cluster: Any
    cohort: Any
    teams: dict[str, Any]
    queues: dict[str, Any]
    local_queues: dict[str, Any]
    workloads: dict[str, Any]
    node: Any
    gpus: list[Any]
    users: dict[str, Any]
    # Team name → its serving deployment (in the team's namespace).
    serving: dict[str, Any] = field(default_factory=dict)

    @property
    def start(self) -> datetime:
        return self.hours[0]

    @property
    def end(self) -> datetime:
        return self.hours[-1] + timedelta(hours=1)


def _rollups(world: World) -> list[Any]:
    from ledger.choices import RollupScope
    from ledger.models import HourlyRollup

    cluster = world.cluster
    rows = []

    def row(scope: str, key: str, hour: datetime, figures: dict[str, float], **links: Any):
        rows.append(
            HourlyRollup(
                cluster=cluster,
                scope=scope,
                key=key,
                hour=hour,
                flavor="h100",
                gpu_model="H100",
                windows=60,
                peak_allocated_gpus=figures.get("allocated_gpu_hours", 0.0),
                **figures,
                **links,
            )
        )

    fleet: dict[str, float] = {}
    for figures in PER_HOUR.values():
        for name, value in figures.items():
            fleet[name] = fleet.get(name, 0.0) + value
    for hour in world.hours:
        for name, figures in PER_HOUR.items():
            team, queue = world.teams[name], world.queues[name]
            workload = world.workloads[f"{name}-main"]
            row(RollupScope.TEAM, name, hour, figures, team=team)
            row(
                RollupScope.CLUSTER_QUEUE, queue.name, hour, figures, team=team, cluster_queue=queue
            )
            row(
                RollupScope.LOCAL_QUEUE,
                f"ns-{name}/lq-{name}",
                hour,
                figures,
                team=team,
                cluster_queue=queue,
            )
            row(RollupScope.NAMESPACE, f"ns-{name}", hour, figures)
            row(
                RollupScope.WORKLOAD,
                f"ns-{name}/{workload.name}",
                hour,
                figures,
                team=team,
                cluster_queue=queue,
                workload=workload,
            )
        capacity = {**fleet, "capacity_gpu_hours": 32.0}
        row(RollupScope.COHORT, "grove", hour, fleet)
        row(RollupScope.FLEET, cluster.name, hour, capacity)
        row(RollupScope.FLAVOR, "h100", hour, capacity)
        row(RollupScope.NODE, "node-1", hour, capacity)
    HourlyRollup.objects.bulk_create(rows)
    return rows


def build_world() -> World:
    """The world of the module docstring, written to the database."""
    from django.contrib.auth import get_user_model

    from fleet.models import Cluster

    now = floor_time(timezone.now(), settings.GPULEDGER_COLLECT_SECONDS)
    last_hour = floor_time(now, 3600)
    hours = [last_hour - timedelta(hours=back) for back in range(HOURS_BACK, 0, -1)]
    cluster = Cluster.objects.create(name="test", display_name="Test cluster")
    user_model = get_user_model()
    users = {
        "lead_a": user_model.objects.create_user("lead-a", password="x"),
        "lead_b": user_model.objects.create_user("lead-b", password="x"),
        "staff": user_model.objects.create_user("staff", password="x", is_staff=True),
        "finance": user_model.objects.create_user("finance", password="x"),
        "superuser": user_model.objects.create_superuser("root", password="x"),
    }
    users["finance"].groups.add(
        Group.objects.get_or_create(name=settings.GPULEDGER_FINANCE_GROUP)[0]
    )
    world = World(
        now=now,
        hours=hours,
        cluster=cluster,
        cohort=None,
        teams={},
        queues={},
        local_queues={},
        workloads={},
        node=None,
        gpus=[],
        users=users,
    )
    _queues_and_workloads(world)
    _preemptions(world)
    _admission_records(world)
    _held_gpus(world)
    _rollups(world)
    _serving(world)
    return world


def _serving(world: World) -> None:
    from serving.models import ServingHour, ServingWorkload

    for name in ("aspen", "birch"):
        workload = ServingWorkload.objects.create(
            cluster=world.cluster, namespace=f"ns-{name}", kind="Deployment", name=f"{name}-model"
        )
        ServingHour.objects.create(
            workload=workload,
            cluster=world.cluster,
            hour=world.hours[-1],
            server_kind="vllm",
            replicas_seen=1,
            replica_hours=1.0,
            seconds_with_data=3600,
            gpu_hours=1.0,
            output_tokens_per_second=100.0,
        )
        world.serving[name] = workload


def _queues_and_workloads(world: World) -> None:
    from ledger.models import RateCard
    from quotas.choices import WorkloadState
    from quotas.models import (
        ClusterQueue,
        ClusterQueueQuota,
        ClusterQueueSample,
        Cohort,
        LocalQueue,
        ResourceFlavor,
        Team,
        TeamNamespace,
        Workload,
    )

    cluster, now, users = world.cluster, world.now, world.users
    teams, queues, local_queues, workloads = (
        world.teams,
        world.queues,
        world.local_queues,
        world.workloads,
    )
    cohort = world.cohort = Cohort.objects.create(cluster=cluster, name="grove")
    ResourceFlavor.objects.create(cluster=cluster, name="h100", gpu_model="H100")
    RateCard.objects.create(
        kind="allocated",
        price_per_gpu_hour=Decimal("1.00"),
        effective_from=world.hours[0] - timedelta(days=1),
    )
    sampled = now - timedelta(minutes=1)
    for name, lead, nominal, borrowed, lent in (
        ("aspen", users["lead_a"], 8, 0, 2),
        ("birch", users["lead_b"], 6, 3, 0),
        ("cedar", None, 4, 0, 1),
    ):
        team = Team.objects.create(name=name, display_name=f"{name.title()} Team")
        if lead is not None:
            team.leads.add(lead)
        queue = ClusterQueue.objects.create(
            cluster=cluster,
            name=f"cq-{name}",
            team=team,
            cohort=cohort,
            cohort_name="grove",
            reclaim_within_cohort="Any",
        )
        ClusterQueueQuota.objects.create(
            cluster_queue=queue, flavor_name="h100", resource=GPU, nominal=Decimal(nominal)
        )
        ClusterQueueSample.objects.create(
            cluster_queue=queue,
            flavor_name="h100",
            resource=GPU,
            sampled_at=sampled,
            window_seconds=60,
            total=nominal + borrowed - lent,
            borrowed=borrowed,
            lent=lent,
            nominal=nominal,
        )
        local = LocalQueue.objects.create(
            cluster=cluster,
            namespace=f"ns-{name}",
            name=f"lq-{name}",
            cluster_queue=queue,
            cluster_queue_name=queue.name,
        )
        TeamNamespace.objects.create(team=team, cluster=cluster, namespace=f"ns-{name}")
        main = {"aspen": "aspen-train", "birch": "birch-serve", "cedar": "cedar-job"}[name]
        workloads[f"{name}-main"] = Workload.objects.create(
            cluster=cluster,
            namespace=f"ns-{name}",
            name=main,
            queue_name=local.name,
            local_queue=local,
            cluster_queue=queue,
            state=WorkloadState.ADMITTED,
            requested_gpus=4,
            admitted_gpus=4,
            admitted_at=now - timedelta(hours=5),
            observed_at=now - timedelta(hours=6),
            borrowing=name == "birch",
            borrowed_gpus=3 if name == "birch" else 0,
            flavors={GPU: "h100"},
        )
        if name != "cedar":
            workloads[f"{name}-victim"] = Workload.objects.create(
                cluster=cluster,
                namespace=f"ns-{name}",
                name=f"{name}-victim",
                queue_name=local.name,
                local_queue=local,
                cluster_queue=queue,
                state=WorkloadState.PENDING,
                requested_gpus=2,
                observed_at=now - timedelta(hours=4),
            )
        teams[name], queues[name], local_queues[name] = team, queue, local


def _preemptions(world: World) -> None:
    from quotas.choices import TransitionKind
    from quotas.models import WorkloadTransition

    workloads = world.workloads
    preempted = world.now - timedelta(hours=2)
    WorkloadTransition.objects.bulk_create(
        [
            WorkloadTransition(
                workload=workloads["aspen-victim"],
                kind=TransitionKind.PREEMPTED,
                at=preempted,
                reason="InCohortReclamation",
                message=(
                    "Preempted to accommodate a workload (UID: u-1, JobUID: j-1) due to "
                    "reclamation within the cohort; preemptor path: /grove/cq-birch; "
                    "preemptee path: /grove/cq-aspen"
                ),
                preemptor_uid="u-1",
                preemptor_path="/grove/cq-birch",
                preemptor=workloads["birch-main"],
            ),
            WorkloadTransition(
                workload=workloads["birch-victim"],
                kind=TransitionKind.PREEMPTED,
                at=preempted,
                reason="InCohortReclamation",
                preemptor_path="/grove/cq-aspen",
                preemptor=workloads["aspen-main"],
            ),
        ]
    )


def _admission_records(world: World) -> None:
    """Admission records (queue service levels): each main workload admitted after a short
    wait; each victim preempted by the other team's main workload (cq-birch's preemption of
    aspen-victim names birch), then waiting again."""
    from servicelevels.models import AdmissionRecord

    now, workloads, queues = world.now, world.workloads, world.queues
    rows = []
    for name, other, wait in (("aspen", "birch", 5), ("birch", "aspen", 7)):
        main, victim, preemptor = (
            workloads[f"{name}-main"],
            workloads[f"{name}-victim"],
            workloads[f"{other}-main"],
        )
        common = {
            "cluster": world.cluster,
            "cluster_queue": queues[name],
            "cluster_queue_name": queues[name].name,
            "team": world.teams[name],
            "cohort_name": "grove",
            "gpus": 1.0,
        }
        rows.append(
            AdmissionRecord(
                workload=main,
                workload_uid=f"uid-{main.name}",
                namespace=main.namespace,
                workload_name=main.name,
                queued_at=now - timedelta(hours=2, minutes=wait),
                admitted_at=now - timedelta(hours=2),
                running_at=now - timedelta(hours=2) + timedelta(seconds=30),
                **common,
            )
        )
        rows.append(
            AdmissionRecord(
                workload=victim,
                workload_uid=f"uid-{victim.name}",
                namespace=victim.namespace,
                workload_name=victim.name,
                queued_at=now - timedelta(hours=3),
                admitted_at=now - timedelta(hours=2, minutes=50),
                running_at=now - timedelta(hours=2, minutes=45),
                evicted_at=now - timedelta(hours=2),
                eviction_reason="Preempted",
                preemption_reason="InCohortReclamation",
                preempted_by=preemptor,
                preempted_by_path=f"{preemptor.namespace}/{preemptor.name}",
                preempting_cluster_queue_name=queues[other].name,
                **common,
            )
        )
        rows.append(
            AdmissionRecord(
                workload=victim,
                workload_uid=f"uid-{victim.name}",
                namespace=victim.namespace,
                workload_name=victim.name,
                attempt=2,
                queued_at=now - timedelta(hours=2),
                **common,
            )
        )
    AdmissionRecord.objects.bulk_create(rows)


def _held_gpus(world: World) -> None:
    """Node-1's two GPUs, held by aspen's and birch's main workloads, and the collection run
    that saw them."""
    from fleet.choices import IngestSource, IngestStatus
    from fleet.models import Gpu, IngestRun, Node
    from ledger.models import GpuUsage

    cluster, now, teams, queues, workloads = (
        world.cluster,
        world.now,
        world.teams,
        world.queues,
        world.workloads,
    )
    node = world.node = Node.objects.create(
        cluster=cluster,
        name="node-1",
        gpu_product="NVIDIA-H100-80GB-HBM3",
        flavor="h100",
        gpu_capacity=2,
        gpu_allocatable=2,
    )
    gpus = world.gpus = [
        Gpu.objects.create(
            cluster=cluster,
            node=node,
            host=node.name,
            uuid=f"GPU-node-1-{index}",
            index=index,
            model_name=node.gpu_product,
        )
        for index in range(2)
    ]
    holders = []
    for gpu, name in zip(gpus, ("aspen", "birch"), strict=True):
        workload = workloads[f"{name}-main"]
        holders.append(
            _usage(
                cluster,
                now,
                gpu,
                allocated=True,
                pod=f"{workload.name}-0",
                activity=0.02,
                gpu_util=90.0,
                team=teams[name],
                cluster_queue=queues[name],
                workload=workload,
                namespace=f"ns-{name}",
            )
        )
    GpuUsage.objects.bulk_create(holders)
    IngestRun.objects.create(
        cluster=cluster,
        source=IngestSource.DCGM,
        status=IngestStatus.SUCCESS,
        # Whole seconds: a fraction such as 40.125 s would read as one of birch's figures.
        started_at=timezone.now().replace(microsecond=0) - timedelta(seconds=10),
        finished_at=timezone.now().replace(microsecond=0) - timedelta(seconds=5),
        window_start=now - timedelta(seconds=60),
        window_end=now,
    )


@pytest.fixture(scope="module")
def shared_world(django_db_setup: None, django_db_blocker: Any) -> Iterator[World]:
    """The world, built once for the tests of a module."""
    with kept_for_the_module(django_db_blocker):
        yield build_world()


@pytest.fixture
def world(shared_world: World, db: None) -> World:
    """The world as built: its rows are the module's, each test's own changes are rolled back
    after it, and its objects are copies the test may change."""
    return copy.deepcopy(shared_world)


@pytest.fixture
def client_of(world):
    """A signed-in client for one of the world's users, by key."""

    def make(user: str) -> Client:
        client = Client()
        client.force_login(world.users[user])
        return client

    return make


# Headless Chromium, as the page tests drive it (tests/pages/conftest.py).
from tests.pages.conftest import (  # noqa: E402, F401
    browser_login,
    browser_type_launch_args,
    console_errors,
)
