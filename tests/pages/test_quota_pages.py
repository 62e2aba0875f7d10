"""Team, cohort, ClusterQueue and workload pages and their chart views (Django client).

The data is a small Kueue scenario built with the ORM (``build_world``), modelled on the Kueue
fixtures: cohort "research" with team-a (team alpha, borrowing 4 H100) and team-b (team beta,
lending 4 H100), a preemption of team-a's a5 by team-b's c1, hourly rollups for the last 48 hours
and per-window usage for a1's two GPUs. Expected numbers are computed from the created rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from core.timewindows import floor_time
from dashboard.templatetags.formatting import duration as fmt_duration
from dashboard.templatetags.formatting import figure as fmt
from fleet.choices import IngestSource, IngestStatus
from fleet.models import Gpu, IngestRun, Node
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup
from quotas.choices import SampleSource, TransitionKind, WorkloadState
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
from tests.pages.conftest import PrometheusStub

NOW = datetime(2026, 8, 22, 12, 0, 30, tzinfo=UTC)
ROLLUP_HOURS = 48
BORROWING_HOURS = 5  # team-a borrowed in the newest 5 hours
MAX_PAGE_QUERIES = 25
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
    gpus: list[Gpu] = field(default_factory=list)
    usage: list[GpuUsage] = field(default_factory=list)


def _hourly(world_hours: list[datetime], start: datetime, end: datetime) -> list[datetime]:
    return [hour for hour in world_hours if start <= hour < end]


def build_world(cluster, lead_user, beta_lead, now: datetime) -> World:
    """The scenario above, relative to ``now`` (a minute boundary is not required)."""
    minute = floor_time(now, 60)
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

    def workload(name: str, queue: ClusterQueue, **fields: Any) -> Workload:
        namespace = "team-a" if queue == cq_a else "team-b"
        return Workload.objects.create(
            cluster=cluster, namespace=namespace, name=name, cluster_queue=queue, **fields
        )

    wl = {
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

    last_hour = floor_time(now, 3600)
    hours = [last_hour - timedelta(hours=offset) for offset in range(ROLLUP_HOURS, 0, -1)]
    rollups = []
    for n, hour in enumerate(hours, start=1):
        borrowing = hour >= last_hour - timedelta(hours=BORROWING_HOURS)
        common = {"cluster": cluster, "hour": hour, "windows": 60}
        rollups += [
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
    HourlyRollup.objects.bulk_create(rollups)

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
    IngestRun.objects.create(
        cluster=cluster,
        source=IngestSource.KUEUE,
        status=IngestStatus.SUCCESS,
        started_at=minute - timedelta(seconds=20),
        finished_at=minute - timedelta(seconds=10),
    )
    return World(
        now=now,
        cluster=cluster,
        alpha=alpha,
        beta=beta,
        cohort=cohort,
        cq_a=cq_a,
        cq_b=cq_b,
        wl=wl,
        hours=hours,
        gpus=gpus,
        usage=usage,
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


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=True):
        yield NOW


@pytest.fixture
def beta_lead(db, django_user_model):
    return django_user_model.objects.create_user(username="beta-lead", password="beta-password")


@pytest.fixture
def world(frozen, cluster, lead_user, beta_lead) -> World:
    return build_world(cluster, lead_user, beta_lead, frozen)


@pytest.fixture
def beta_client(login_client, beta_lead):
    return login_client(beta_lead)


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


# --- Access, login, errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["team-list", "team", "cohort-list", "cohort", "queue-list", "queue", "workload"]
)
def test_every_page_redirects_anonymous_users_to_login(client, world, name):
    response = client.get(page_urls(world)[name])

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@pytest.mark.parametrize(
    "name",
    [
        "team-allocation",
        "team-queues",
        "cohort-usage",
        "cohort-borrowing",
        "queue-usage",
        "queue-evictions",
        "workload-timeline",
        "workload-activity",
    ],
)
def test_every_chart_answers_anonymous_users_with_401_json(client, world, name):
    response = client.get(chart_urls(world)[name])

    assert response.status_code == 401
    assert "error" in json.loads(response.content)


@pytest.mark.parametrize(
    "name", ["team-list", "team", "cohort-list", "cohort", "queue-list", "queue", "workload"]
)
def test_every_page_renders_for_staff(staff_client, world, name):
    response = staff_client.get(page_urls(world)[name])

    assert response.status_code == 200
    assert "<h1>" in text(response)


@pytest.mark.parametrize(
    "name",
    [
        "team-allocation",
        "team-queues",
        "cohort-usage",
        "cohort-borrowing",
        "queue-usage",
        "queue-evictions",
        "workload-timeline",
        "workload-activity",
    ],
)
def test_every_chart_has_a_title_axis_titles_and_a_legend(staff_client, world, name):
    fig = figure(staff_client.get(chart_urls(world)[name] + "?range=7d"))

    assert fig["layout"]["title"]["text"]
    assert fig["layout"]["xaxis"]["title"]["text"]
    assert fig["layout"]["yaxis"]["title"]["text"]
    assert fig["layout"]["showlegend"] is True
    assert fig["data"], "a chart with data in range has traces"
    assert fig["meta"]["empty"] is False


@pytest.mark.parametrize("name", ["team", "queue", "workload"])
def test_another_teams_lead_gets_403_on_team_queue_and_workload_pages(beta_client, world, name):
    response = beta_client.get(page_urls(world)[name])

    assert response.status_code == 403


@pytest.mark.parametrize(
    "name",
    ["team-allocation", "team-queues", "queue-usage", "queue-evictions", "workload-timeline"],
)
def test_another_teams_lead_gets_403_on_their_charts(beta_client, world, name):
    assert beta_client.get(chart_urls(world)[name]).status_code == 403


@pytest.mark.parametrize("name", ["team", "queue", "workload"])
def test_the_teams_own_lead_sees_its_pages(lead_client, world, name):
    assert lead_client.get(page_urls(world)[name]).status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "/teams/nobody/",
        "/teams/nobody/charts/allocation.json",
        "/cohorts/test/nowhere/",
        "/cohorts/other-cluster/research/",
        "/cohorts/test/nowhere/charts/usage.json",
        "/queues/test/no-such-queue/",
        "/queues/test/no-such-queue/charts/evictions.json",
        "/workloads/999999/",
        "/workloads/999999/charts/timeline.json",
    ],
)
def test_unknown_objects_are_404(staff_client, world, url):
    assert staff_client.get(url).status_code == 404


@pytest.mark.parametrize("name", ["team-list", "team", "cohort", "queue", "workload"])
@pytest.mark.parametrize(
    "query", ["range=fortnight", "start=yesterday", "start=2026-08-22&end=2026-08-01"]
)
def test_bad_range_parameters_are_400_pages(staff_client, world, name, query):
    response = staff_client.get(f"{page_urls(world)[name]}?{query}")

    assert response.status_code == 400
    assert "Bad request" in text(response)


@pytest.mark.parametrize(
    "name", ["team-allocation", "cohort-borrowing", "queue-evictions", "workload-activity"]
)
def test_bad_range_parameters_are_400_json_on_charts(staff_client, world, name):
    response = staff_client.get(chart_urls(world)[name] + "?range=forever")

    assert response.status_code == 400
    assert "range" in json.loads(response.content)["error"]


@pytest.mark.parametrize(
    "name,query",
    [
        ("team", "state=zombie"),
        ("team", "page=two"),
        ("team-list", "page=0"),
        ("queue", "page=-1"),
        ("cohort-list", "page=x"),
        ("queue-list", "page=1.5"),
    ],
)
def test_bad_filters_and_page_numbers_are_400(staff_client, world, name, query):
    assert staff_client.get(f"{page_urls(world)[name]}?{query}").status_code == 400


def test_a_page_number_past_the_end_shows_the_last_page(staff_client, world):
    response = staff_client.get(page_urls(world)["team-list"] + "?page=99")

    assert response.status_code == 200
    assert "beta" in text(response)


def test_bad_activity_metric_is_400(staff_client, world):
    response = staff_client.get(chart_urls(world)["workload-activity"] + "?metric=watts")

    assert response.status_code == 400
    assert "metric" in json.loads(response.content)["error"]


def test_charts_refuse_post(staff_client, world):
    assert staff_client.post(chart_urls(world)["team-allocation"]).status_code == 405
    assert staff_client.post(page_urls(world)["team"]).status_code == 405


# --- Teams --------------------------------------------------------------------------------------


def test_team_list_shows_range_figures_per_team(staff_client, world):
    hours = range_hours(world, 1)
    response = staff_client.get(page_urls(world)["team-list"])

    body = text(response)
    alpha_allocated = rollup_sum("allocated_gpu_hours", hours, scope="team", team=world.alpha)
    alpha_idle = rollup_sum("idle_gpu_hours", hours, scope="team", team=world.alpha)
    beta_idle = rollup_sum("idle_gpu_hours", hours, scope="team", team=world.beta)
    assert f">{fmt(alpha_allocated)}<" in body
    assert f">{fmt(alpha_idle)}<" in body
    assert f">{fmt(beta_idle)}<" in body
    total = alpha_allocated + rollup_sum(
        "allocated_gpu_hours", hours, scope="team", team=world.beta
    )
    assert response.context["stats"][0]["value"] == fmt(total)


def test_team_list_range_picker_changes_the_sums(staff_client, world):
    day = staff_client.get(page_urls(world)["team-list"] + "?range=24h").context["rows"]
    week = staff_client.get(page_urls(world)["team-list"] + "?range=7d").context["rows"]

    alpha_week = rollup_sum(
        "allocated_gpu_hours", range_hours(world, 7), scope="team", team=world.alpha
    )
    assert week[0]["allocated"] == fmt(alpha_week)
    assert day[0]["allocated"] != week[0]["allocated"]


def test_team_list_shows_a_lead_their_teams_and_the_others_summed(lead_client, world):
    response = lead_client.get(page_urls(world)["team-list"])
    body = text(response)

    assert reverse("dashboard:team-detail", args=["alpha"]) in body
    assert reverse("dashboard:team-detail", args=["beta"]) not in body
    assert "Beta" not in body
    hours = range_hours(world, 1)
    others = response.context["others"]
    assert others["label"] == "Other teams (1)"
    assert others["allocated"] == fmt(
        rollup_sum("allocated_gpu_hours", hours, scope="team", team=world.beta)
    )


@override_settings(GPULEDGER_TEAM_VISIBILITY="public")
def test_team_list_links_every_team_for_a_lead_when_teams_are_public(lead_client, world):
    response = lead_client.get(page_urls(world)["team-list"])
    body = text(response)

    assert reverse("dashboard:team-detail", args=["beta"]) in body
    assert response.context["others"] is None


def test_team_list_links_every_team_for_staff(staff_client, world):
    body = text(staff_client.get(page_urls(world)["team-list"]))

    assert reverse("dashboard:team-detail", args=["alpha"]) in body
    assert reverse("dashboard:team-detail", args=["beta"]) in body


def test_team_page_numbers_come_first_and_match_the_data(lead_client, world):
    response = lead_client.get(page_urls(world)["team"])
    stats = {s["testid"]: s for s in response.context["stats"] if s.get("testid")}

    holding = [w for w in world.wl.values() if w.cluster_queue == world.cq_a and w.is_holding]
    assert stats["stat-allocated-now"]["value"] == fmt(sum(w.admitted_gpus for w in holding))
    nominal = sum(
        q.nominal
        for q in ClusterQueueQuota.objects.filter(
            cluster_queue=world.cq_a, resource="nvidia.com/gpu"
        )
    )
    assert stats["stat-nominal"]["value"] == fmt(nominal)
    hours = range_hours(world, 1)
    active = rollup_sum("active_gpu_hours", hours, scope="team", team=world.alpha)
    telemetry = rollup_sum("telemetry_gpu_hours", hours, scope="team", team=world.alpha)
    assert stats["stat-utilization"]["value"] == f"{active / telemetry * 100:.1f}"
    idle = rollup_sum("idle_gpu_hours", hours, scope="team", team=world.alpha)
    assert stats["stat-idle"]["value"] == fmt(idle)
    # The newest sample (4 borrowed), not the older one (2).
    assert stats["stat-borrowed"]["value"] == "4"
    pending = [
        w for w in world.wl.values() if w.cluster_queue == world.cq_a and w.state == "pending"
    ]
    assert stats["stat-pending"]["value"] == fmt(sum(w.requested_gpus for w in pending))
    body = text(response)
    assert body.index('data-testid="stat-allocated-now"') < body.index(
        'data-testid="chart-allocation"'
    )


def test_team_page_lists_workloads_with_activity_idle_time_and_links(lead_client, world):
    response = lead_client.get(page_urls(world)["team"])
    rows = {
        f"{r['workload'].namespace}/{r['workload'].name}": r
        for r in response.context["workload_rows"]
    }

    hours = range_hours(world, 1)
    a2 = world.wl["a2"]
    active = rollup_sum("active_gpu_hours", hours, workload=a2)
    telemetry = rollup_sum("telemetry_gpu_hours", hours, workload=a2)
    tensor = rollup_sum("tensor_active_gpu_hours", hours, workload=a2)
    covered = rollup_sum("tensor_covered_gpu_hours", hours, workload=a2)
    idle = rollup_sum("idle_gpu_hours", hours, workload=a2)
    row = rows["team-a/jobset-mixtral-ft"]
    assert row["sm_active"] == f"{active / telemetry * 100:.1f}"
    assert row["tensor"] == f"{tensor / covered * 100:.1f}"
    assert row["idle_hours"] == fmt(idle / a2.admitted_gpus)
    assert row["age"] == fmt_duration((world.now - a2.observed_at).total_seconds())
    body = text(response)
    assert reverse("dashboard:workload-detail", args=[a2.pk]) in body
    assert "borrowing 4" in body
    # Holding workloads first, then pending ones.
    states = [r["workload"].state for r in response.context["workload_rows"]]
    assert states.index("pending") > states.index("admitted")
    # Finished 30 h ago: outside the last 24 h, inside the last 7 days.
    assert "team-a/job-tokenizer-bench" not in rows
    week = lead_client.get(page_urls(world)["team"] + "?range=7d").context["workload_rows"]
    assert "job-tokenizer-bench" in {r["workload"].name for r in week}


def test_team_page_state_filter_keeps_only_that_state(lead_client, world):
    rows = lead_client.get(page_urls(world)["team"] + "?state=pending").context["workload_rows"]

    expected = {
        w.name for w in world.wl.values() if w.cluster_queue == world.cq_a and w.state == "pending"
    }
    assert {r["workload"].name for r in rows} == expected


def test_team_page_chart_urls_carry_the_range(lead_client, world):
    body = text(lead_client.get(page_urls(world)["team"] + "?range=7d&state=all"))

    assert reverse("dashboard:team-chart-allocation", args=["alpha"]) + "?range=7d" in body
    assert "state=all" not in body.split("data-chart-url")[1].split(">")[0]


def test_team_allocation_chart_plots_hourly_means_and_shades_borrowing(lead_client, world):
    fig = figure(lead_client.get(chart_urls(world)["team-allocation"] + "?range=24h"))

    hours = range_hours(world, 1)
    allocated = trace(fig, "Allocated")
    assert len(allocated["x"]) == len(hours)
    expected = [
        rollup_sum("allocated_gpu_hours", [hour], scope="team", team=world.alpha) for hour in hours
    ]
    assert allocated["y"] == expected
    nominal = trace(fig, "Nominal quota")["y"]
    assert nominal[-1] == rollup_sum(
        "nominal_gpu_hours", [hours[-1]], scope="team", team=world.alpha
    )
    active = trace(fig, "Real use (SM_ACTIVE-weighted)")["y"]
    assert active[-1] == pytest.approx(
        rollup_sum("active_gpu_hours", [hours[-1]], scope="team", team=world.alpha)
    )
    # One run of consecutive borrowing hours: one shaded rectangle, named in the legend.
    assert fig["meta"]["borrowing_periods"] == 1
    shape = fig["layout"]["shapes"][0]
    borrowed_hours = [
        h
        for h in hours
        if rollup_sum("borrowed_gpu_hours", [h], scope="team", team=world.alpha) > 0
    ]
    # Centred on the hourly points: half an hour before the first, after the last.
    assert shape["x0"] == (borrowed_hours[0] - timedelta(minutes=30)).isoformat()
    assert shape["x1"] == (borrowed_hours[-1] + timedelta(minutes=30)).isoformat()
    assert trace(fig, "Borrowing period")


def test_team_allocation_chart_follows_the_range(lead_client, world):
    day = figure(lead_client.get(chart_urls(world)["team-allocation"] + "?range=24h"))
    week = figure(lead_client.get(chart_urls(world)["team-allocation"] + "?range=7d"))

    assert len(trace(week, "Allocated")["x"]) == 7 * 24
    assert len(trace(day, "Allocated")["x"]) == 24
    # Hours before the first rollup are gaps, never zeros.
    week_y = trace(week, "Allocated")["y"]
    assert week_y[0] is None
    assert sum(1 for v in week_y if v is not None) == len(range_hours(world, 7))


def test_team_queues_chart_draws_each_flavor_against_its_own_quota(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["team-queues"]))

    names = [t["name"] for t in fig["data"]]
    assert "team-a · h100 allocated" in names
    assert "team-a · a100 nominal" in names
    stacked = trace(fig, "team-a · h100 allocated")
    # Unstacked: a line reads against its own nominal, not on top of another flavor's area.
    assert not any(t.get("stackgroup") for t in fig["data"])
    hours = range_hours(world, 1)
    assert stacked["y"][-1] == rollup_sum(
        "allocated_gpu_hours",
        [hours[-1]],
        scope="cluster_queue",
        cluster_queue=world.cq_a,
        flavor="h100",
    )
    assert not any("team-b" in name for name in names)


def test_team_queues_chart_folds_many_series_into_other(staff_client, world):
    grow(world, 24)

    fig = figure(staff_client.get(chart_urls(world)["team-queues"]))

    allocated = [t for t in fig["data"] if t["name"].endswith(" allocated")]
    assert len(allocated) == 10 + 1
    assert allocated[-1]["name"] == "Other allocated"


# --- Cohorts ------------------------------------------------------------------------------------


def test_cohort_list_shows_members_quota_usage_and_borrowing(staff_client, world):
    response = staff_client.get(page_urls(world)["cohort-list"])
    row = response.context["rows"][0]

    nominal = sum(
        q.nominal
        for q in ClusterQueueQuota.objects.filter(
            cluster_queue__cohort=world.cohort, resource="nvidia.com/gpu"
        )
    )
    assert row["nominal"] == fmt(float(nominal) + 8)  # plus the shared a100 pool
    holding = [w for w in world.wl.values() if w.is_holding]
    assert row["usage"] == fmt(sum(w.admitted_gpus for w in holding))
    assert row["borrowed"] == "4"
    assert row["lent"] == "4"
    assert row["cohort"].members == 2
    assert reverse("dashboard:cohort-detail", args=["test", "research"]) in text(response)


def test_cohort_page_shows_members_borrowers_and_reclaim_estimate(staff_client, world):
    response = staff_client.get(page_urls(world)["cohort"])
    body = text(response)

    members = {row["queue"].name: row for row in response.context["member_rows"]}
    assert members["team-a"]["borrowed"] == "4"
    assert members["team-b"]["lent"] == "4"
    assert members["team-b"]["policy"] == "LowerPriority"
    borrowers = [row["workload"] for row in response.context["borrower_rows"]]
    assert borrowers == [world.wl["a2"]]
    assert "1 min" in body or "60 s" in body  # a2's grace from its pod template

    (lender,) = response.context["lenders"]
    assert (lender.queue, lender.flavor, lender.lent) == (world.cq_b, "h100", 4.0)
    # Inputs: b2 pending at 1000 beats a2 at 500; observed preemption -> admission is 31 s; a2's
    # pods have a 60 s grace period, which bounds the answer from below.
    assert lender.pending_priority == world.wl["b2"].priority
    assert [v.name for v in lender.estimate.victims] == ["team-a/jobset-mixtral-ft"]
    assert response.context["pace"]["admission_seconds"] == 31
    assert lender.estimate.seconds == max(31, 60)
    assert f"≈ {fmt_duration(60)}" in body
    assert "reclaimWithinCohort: LowerPriority" in body


def test_cohort_page_measures_eviction_pace_from_transitions(staff_client, world):
    pace = staff_client.get(page_urls(world)["cohort"]).context["pace"]

    evictions = WorkloadTransition.objects.filter(kind__in=["evicted", "preempted"]).count()
    assert pace["evictions"] == evictions
    assert pace["active_hours"] == 1
    assert pace["per_hour"] == evictions / 1


def test_cohort_page_hides_other_teams_workload_names_from_a_lead(beta_client, world):
    response = beta_client.get(page_urls(world)["cohort"])
    body = text(response)

    assert response.status_code == 200
    assert "jobset-mixtral-ft" not in body
    assert "a workload of another team" in body
    assert reverse("dashboard:workload-detail", args=[world.wl["a2"].pk]) not in body
    # Its own queue is linked; the other team's is summed as "Other members (1)", unnamed.
    assert reverse("dashboard:cluster-queue-detail", args=["test", "team-b"]) in body
    assert reverse("dashboard:cluster-queue-detail", args=["test", "team-a"]) not in body
    assert 'data-queue="team-a"' not in body
    assert "Other members (1)" in body


def test_cohort_page_with_never_policy_says_it_cannot_reclaim(staff_client, world):
    ClusterQueue.objects.filter(pk=world.cq_b.pk).update(reclaim_within_cohort="Never")

    response = staff_client.get(page_urls(world)["cohort"])

    (lender,) = response.context["lenders"]
    assert lender.estimate.status == "cannot"
    assert "Cannot reclaim" in text(response)


def test_cohort_usage_chart_stacks_members_against_nominal(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["cohort-usage"]))

    hours = range_hours(world, 1)
    team_a = trace(fig, "team-a")
    assert team_a["stackgroup"] == "usage"
    assert team_a["y"][-1] == rollup_sum(
        "allocated_gpu_hours", [hours[-1]], scope="cluster_queue", cluster_queue=world.cq_a
    )
    nominal = trace(fig, "Nominal quota (members)")
    assert nominal["y"][-1] == rollup_sum(
        "nominal_gpu_hours", [hours[-1]], scope="cluster_queue", cluster_queue__cohort=world.cohort
    )


def test_cohort_borrowing_chart_puts_lent_below_zero(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["cohort-borrowing"] + "?range=7d"))

    borrowed = trace(fig, "team-a borrowed")
    lent = trace(fig, "team-b lent")
    hours = range_hours(world, 7)
    assert sum(v or 0 for v in borrowed["y"]) == rollup_sum(
        "borrowed_gpu_hours", hours, scope="cluster_queue", cluster_queue=world.cq_a
    )
    assert sum(v or 0 for v in lent["y"]) == -rollup_sum(
        "lent_gpu_hours", hours, scope="cluster_queue", cluster_queue=world.cq_b
    )
    assert fig["layout"]["barmode"] == "relative"


# --- ClusterQueues ------------------------------------------------------------------------------


def test_queue_list_shows_a_lead_only_their_teams_queues(beta_client, world):
    response = beta_client.get(page_urls(world)["queue-list"])

    assert [row["queue"].name for row in response.context["rows"]] == ["team-b"]
    assert response.context["hidden"] == 1
    assert reverse("dashboard:cluster-queue-detail", args=["test", "team-a"]) not in text(response)


@override_settings(GPULEDGER_TEAM_VISIBILITY="public")
def test_queue_list_shows_every_queue_when_teams_are_public(beta_client, world):
    response = beta_client.get(page_urls(world)["queue-list"])
    rows = {row["queue"].name: row for row in response.context["rows"]}

    assert rows["team-a"]["nominal"] == fmt(16 + 8)
    assert rows["team-a"]["usage"] == fmt(
        world.wl["a1"].admitted_gpus + world.wl["a2"].admitted_gpus
    )
    assert rows["team-a"]["borrowed"] == "4"
    assert rows["team-a"]["quotas"][1]["borrowing_limit"] == "unlimited"
    body = text(response)
    assert reverse("dashboard:cluster-queue-detail", args=["test", "team-b"]) in body
    assert reverse("dashboard:cluster-queue-detail", args=["test", "team-a"]) in body


def test_queue_list_search_filters_by_name(staff_client, world):
    rows = staff_client.get(page_urls(world)["queue-list"] + "?q=team-b").context["rows"]

    assert [row["queue"].name for row in rows] == ["team-b"]


def test_queue_page_shows_unlimited_for_null_limits_and_0_for_zero(staff_client, world):
    response = staff_client.get(page_urls(world)["queue"])
    quotas = {(q["flavor"], q["resource"]): q for q in response.context["quota_rows"]}

    a100 = quotas[("a100", "nvidia.com/gpu")]
    assert a100["borrowing_limit"] == "unlimited"
    assert a100["lending_limit"] == "0"
    h100 = quotas[("h100", "nvidia.com/gpu")]
    assert (h100["nominal"], h100["borrowing_limit"], h100["lending_limit"]) == ("16", "8", "8")
    assert quotas[("h100", "memory")]["nominal"] == "4,096 GiB"


def test_queue_page_lists_pending_workloads_by_position_with_reason_and_wait(staff_client, world):
    response = staff_client.get(page_urls(world)["queue"])
    rows = response.context["pending_rows"]

    assert [row["workload"] for row in rows] == [world.wl["a3"], world.wl["a5"]]
    a3, a5 = rows
    assert a3["wait"] == fmt_duration((timezone.now() - world.wl["a3"].observed_at).total_seconds())
    # a5 was requeued after its preemption: it waits since the requeue, not since creation.
    requeued = WorkloadTransition.objects.get(workload=world.wl["a5"], kind="requeued").at
    assert a5["waiting_since"] == requeued
    assert a5["requeued"] is True
    assert "8 more needed" in text(response)


def test_queue_page_counts_evictions_in_range(staff_client, world):
    response = staff_client.get(page_urls(world)["queue"])
    stats = {s.get("testid"): s for s in response.context["stats"]}

    count = WorkloadTransition.objects.filter(
        workload__cluster_queue=world.cq_a, kind__in=["evicted", "preempted"]
    ).count()
    assert stats["stat-evictions"]["value"] == str(count)
    assert stats["stat-borrowed"]["value"] == "4"


def test_queue_usage_chart_plots_flavors_nominal_borrowed_and_pending(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["queue-usage"]))

    hours = range_hours(world, 1)
    filters = {"scope": "cluster_queue", "cluster_queue": world.cq_a}
    assert trace(fig, "Allocated h100")["y"][-1] == rollup_sum(
        "allocated_gpu_hours", [hours[-1]], flavor="h100", **filters
    )
    assert trace(fig, "Nominal quota")["y"][-1] == rollup_sum(
        "nominal_gpu_hours", [hours[-1]], **filters
    )
    assert trace(fig, "Borrowed")["y"][-1] == rollup_sum(
        "borrowed_gpu_hours", [hours[-1]], **filters
    )
    assert trace(fig, "Pending demand")["y"][-1] == rollup_sum(
        "pending_gpu_hours", [hours[-1]], **filters
    )
    assert len(fig["layout"]["shapes"]) == 1


def test_queue_evictions_chart_counts_per_hour_by_kind_and_reason(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["queue-evictions"]))

    preempted = trace(fig, "Preempted: InCohortReclamation")
    evicted = trace(fig, "Evicted: Preempted")
    at = WorkloadTransition.objects.get(workload=world.wl["a5"], kind="preempted").at
    assert preempted["x"] == [floor_time(at, 3600).isoformat()]
    assert preempted["y"] == [1]
    assert evicted["y"] == [1]


def test_queue_evictions_chart_is_empty_outside_the_range(staff_client, world):
    start = (world.now - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    end = (world.now - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")

    fig = figure(
        staff_client.get(chart_urls(world)["queue-evictions"] + f"?start={start}&end={end}")
    )

    assert fig["data"] == []
    assert fig["meta"]["empty"] is True


# --- Workloads ----------------------------------------------------------------------------------


def test_workload_page_shows_gpus_activity_transitions_and_pods(lead_client, world):
    a1 = world.wl["a1"]
    response = lead_client.get(reverse("dashboard:workload-detail", args=[a1.pk]) + "?range=24h")
    stats = {s.get("testid"): s for s in response.context["stats"]}
    body = text(response)

    assert stats["stat-gpus"]["value"] == fmt(a1.admitted_gpus)
    hours = range_hours(world, 1)
    active = rollup_sum("active_gpu_hours", hours, workload=a1)
    telemetry = rollup_sum("telemetry_gpu_hours", hours, workload=a1)
    assert stats["stat-sm"]["value"] == f"{active / telemetry * 100:.1f}"
    idle = rollup_sum("idle_gpu_hours", hours, workload=a1)
    assert stats["stat-idle"]["value"] == fmt(idle / a1.admitted_gpus)
    for allocation in Allocation.objects.filter(workload=a1):
        assert allocation.pod in body
        assert allocation.node_name in body
    assert "Pods ready" in body
    assert "Started" in body
    assert "stored collection windows" in body


def test_workload_page_opens_on_its_whole_life(staff_client, world):
    a4 = world.wl["a4"]  # finished 30 hours ago, first seen 40 hours ago

    response = staff_client.get(reverse("dashboard:workload-detail", args=[a4.pk]))

    time_range = response.context["time_range"]
    assert time_range.start == floor_time(a4.observed_at, 60)
    assert time_range.end == floor_time(a4.finished_at, 60) + timedelta(minutes=1)
    assert "Showing its whole life" in text(response)
    # Its charts ask for the same range.
    assert f"start={time_range.start:%Y-%m-%dT%H}%3A{time_range.start:%M}" in text(response)
    # The custom form stays shut: the page chose the range, not the user.
    assert 'range-custom" open' not in response.content.decode()


def test_workload_page_caps_a_long_life_at_30_days(staff_client, world):
    a1 = world.wl["a1"]
    a1.observed_at = world.now - timedelta(days=45)
    a1.save(update_fields=["observed_at"])

    response = staff_client.get(reverse("dashboard:workload-detail", args=[a1.pk]))

    time_range = response.context["time_range"]
    assert time_range.end - time_range.start == timedelta(days=30)
    assert "capped at its last 30 days" in text(response)


def test_an_explicit_range_still_wins_over_the_whole_life(staff_client, world):
    a4 = world.wl["a4"]

    response = staff_client.get(reverse("dashboard:workload-detail", args=[a4.pk]) + "?range=7d")

    assert response.context["time_range"].preset == "7d"
    assert "Showing its whole life" not in text(response)


def test_workload_page_links_the_preemptor_only_when_visible(staff_client, lead_client, world):
    url = reverse("dashboard:workload-detail", args=[world.wl["a5"].pk])
    preemptor_url = reverse("dashboard:workload-detail", args=[world.wl["c1"].pk])

    assert preemptor_url in text(staff_client.get(url))
    lead_body = text(lead_client.get(url))
    assert preemptor_url not in lead_body
    assert "a workload of another team" in lead_body


def test_workload_timeline_chart_draws_one_bar_per_phase(staff_client, world):
    a5 = world.wl["a5"]
    fig = figure(staff_client.get(reverse("dashboard:workload-chart-timeline", args=[a5.pk])))

    transitions = list(WorkloadTransition.objects.filter(workload=a5).order_by("at", "kind"))
    assert fig["meta"]["transitions"] == len(transitions)
    admitted = trace(fig, "Admitted")
    assert admitted["orientation"] == "h"
    admitted_at = next(t.at for t in transitions if t.kind == "admitted")
    evicted_at = next(t.at for t in transitions if t.kind == "evicted")
    assert admitted["base"] == [admitted_at.isoformat()]
    assert admitted["x"] == [(evicted_at - admitted_at).total_seconds() * 1000]
    pending = trace(fig, "Pending")
    assert len(pending["y"]) == 2  # created, then requeued
    assert "InCohortReclamation" in json.dumps(trace(fig, "Evicted")["customdata"])


def test_a_workload_without_transitions_shows_its_wait_since_creation(staff_client, world):
    waiting = world.wl["a1"]
    WorkloadTransition.objects.filter(workload=waiting).delete()
    fig = figure(staff_client.get(reverse("dashboard:workload-chart-timeline", args=[waiting.pk])))

    pending = trace(fig, "Pending")
    assert pending["base"] == [waiting.observed_at.isoformat()]
    assert fig["meta"]["transitions"] == 0


def test_workload_activity_chart_has_one_line_per_gpu_and_rollups_before_retention(
    staff_client, world
):
    a1 = world.wl["a1"]
    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])
    fig = figure(staff_client.get(url + "?range=24h&metric=sm_active"))

    per_gpu = [t for t in fig["data"] if t["name"] != "Workload mean (hourly rollup)"]
    assert len(per_gpu) == len(world.gpus)
    assert fig["meta"]["per_gpu"] is True
    first = min(u.window_end for u in world.usage)
    second_gpu = [u for u in world.usage if u.gpu == world.gpus[1]]
    expected = sum(u.activity for u in second_gpu) / len(second_gpu) * 100
    values = [v for t in per_gpu for v in t["y"] if v is not None]
    assert max(values) == pytest.approx(expected)
    rollup_hours = [
        h
        for h in range_hours(world, 1) + [floor_time(world.now, 3600)]
        if h < floor_time(first, 3600)
    ]
    older = trace(fig, "Workload mean (hourly rollup)")
    assert len(older["x"]) == len([h for h in rollup_hours if h in world.hours])
    assert fig["layout"]["yaxis"]["range"] == [0, 100]


def test_workload_activity_chart_shows_a_big_gang_as_mean_and_range(staff_client, world):
    a1 = world.wl["a1"]
    end = floor_time(world.now, 60) - timedelta(minutes=1)
    extra = [
        GpuUsage(
            cluster=world.cluster,
            window_start=end - timedelta(seconds=60),
            window_end=end,
            gpu_key=f"gpu-node-x/GPU-x-{i}/",
            namespace="team-a",
            pod=f"big-{i}",
            workload=a1,
            allocated=True,
            gpus=1.0,
            activity=i / 10.0,
        )
        for i in range(9)
    ]
    GpuUsage.objects.bulk_create(extra)
    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])

    fig = figure(staff_client.get(url))

    assert fig["meta"]["per_gpu"] is False
    gpus = len({u.gpu_key for u in world.usage} | {u.gpu_key for u in extra})
    assert fig["meta"]["gpus"] == gpus
    # The legend counts the GPUs held at once (the most in one window), not distinct GPUs seen.
    held: dict = {}
    for u in [*world.usage, *extra]:
        held[u.window_end] = held.get(u.window_end, 0.0) + u.gpus
    at_once = max(held.values())
    low, high = trace(fig, "Lowest GPU"), trace(fig, "Highest GPU")
    hour = floor_time(end - timedelta(seconds=1), 3600).isoformat()
    rows = [
        u
        for u in [*world.usage, *extra]
        if floor_time(u.window_end - timedelta(seconds=1), 3600).isoformat() == hour
    ]
    assert hour in low["x"]
    position = low["x"].index(hour)
    assert low["y"][position] == pytest.approx(min(u.activity for u in rows) * 100)
    assert high["y"][position] == pytest.approx(max(u.activity for u in rows) * 100)
    assert trace(fig, f"Mean of {fmt(at_once)} GPUs")


def test_a_gang_moved_to_other_gpus_is_still_counted_at_its_size(staff_client, world):
    # Given a 10-GPU gang that ran on ten GPUs, then (re-admitted) on ten others
    a1 = world.wl["a1"]
    GpuUsage.objects.filter(workload=a1).delete()
    end = floor_time(world.now, 60) - timedelta(minutes=1)
    rows = []
    for moved, window_end in enumerate([end - timedelta(minutes=30), end]):
        rows += [
            GpuUsage(
                cluster=world.cluster,
                window_start=window_end - timedelta(seconds=60),
                window_end=window_end,
                gpu_key=f"gpu-node-x/GPU-{moved}-{i}/",
                namespace="team-a",
                pod=f"gang-{moved}-{i}",
                workload=a1,
                allocated=True,
                gpus=1.0,
                activity=0.5,
            )
            for i in range(10)
        ]
    GpuUsage.objects.bulk_create(rows)
    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])

    # When its activity chart is drawn
    fig = figure(staff_client.get(url))

    # Then the legend says 10 GPUs, though 20 distinct GPUs reported
    assert fig["meta"]["gpus"] == 20
    assert fig["meta"]["gpus_at_once"] == 10
    assert trace(fig, "Mean of 10 GPUs")
    assert not any("20 GPUs" in (t.get("name") or "") for t in fig["data"])


def test_workload_activity_chart_plots_tensor_activity(staff_client, world):
    a1 = world.wl["a1"]
    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])

    fig = figure(staff_client.get(url + "?metric=tensor"))

    assert "PIPE_TENSOR_ACTIVE" in fig["layout"]["yaxis"]["title"]["text"]
    first_gpu = [u for u in world.usage if u.gpu == world.gpus[0]]
    expected = sum(u.pipe_tensor_active for u in first_gpu) / len(first_gpu) * 100
    values = [v for t in fig["data"] if "rollup" not in t["name"] for v in t["y"] if v is not None]
    assert min(values) == pytest.approx(expected)


def test_workload_activity_chart_resolves_windows_in_short_ranges(staff_client, world):
    a1 = world.wl["a1"]
    start = (world.now - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    url = reverse("dashboard:workload-chart-activity", args=[a1.pk]) + f"?start={start}"

    fig = figure(staff_client.get(url))

    assert fig["meta"]["resolution"] == "window"
    per_gpu = [t for t in fig["data"] if "rollup" not in t["name"]]
    assert len(per_gpu[0]["x"]) == len({u.window_end for u in world.usage})


# --- Query bounds -------------------------------------------------------------------------------


def _count_queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return len(queries)


@pytest.mark.parametrize(
    "name", ["team-list", "team", "cohort-list", "cohort", "queue-list", "queue", "workload"]
)
def test_page_query_count_is_bounded_and_independent_of_data_size(
    staff_client, world, name, django_assert_max_num_queries
):
    url = page_urls(world)[name]
    before = _count_queries(staff_client, url)

    grow(world, 30)

    assert _count_queries(staff_client, url) == before
    with django_assert_max_num_queries(MAX_PAGE_QUERIES):
        staff_client.get(url)


@pytest.mark.parametrize(
    "name",
    [
        "team-allocation",
        "team-queues",
        "cohort-usage",
        "cohort-borrowing",
        "queue-usage",
        "queue-evictions",
        "workload-timeline",
        "workload-activity",
    ],
)
def test_chart_query_count_is_bounded_and_independent_of_data_size(
    staff_client, world, name, django_assert_max_num_queries
):
    url = chart_urls(world)[name] + "?range=7d"
    before = _count_queries(staff_client, url)

    grow(world, 30)

    assert _count_queries(staff_client, url) == before
    with django_assert_max_num_queries(MAX_CHART_QUERIES):
        staff_client.get(url)


def test_lead_page_query_count_is_bounded(lead_client, world, django_assert_max_num_queries):
    # A lead's team page also asks whether they may change its quota (permission, leadership).
    with django_assert_max_num_queries(MAX_PAGE_QUERIES + 2):
        assert lead_client.get(page_urls(world)["team"]).status_code == 200


def test_workload_activity_reads_its_recent_hours_live_from_prometheus(
    staff_client, world, prometheus_stub
):
    a1 = world.wl["a1"]
    device = world.gpus[0]
    PrometheusStub.series = [{"UUID": device.uuid, "GPU_I_ID": ""}]
    a1.cluster.prometheus_url = prometheus_stub
    a1.cluster.save()

    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])
    fig = figure(staff_client.get(url + "?range=24h&metric=sm_active"))

    assert fig["meta"]["source"] == "live"
    line = trace(fig, f"{device.host} {device.uuid[:12]}")
    assert line["y"] == pytest.approx([25.0, 26.0, 27.0])
    query = PrometheusStub.queries[0]
    assert 'exported_pod=~"llama\\\\-pretrain\\\\-0|llama\\\\-pretrain\\\\-1"' in query
    assert 'exported_namespace="team-a"' in query and 'namespace="team-a"' in query
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in query  # the same fallback as collection


def test_workload_activity_falls_back_to_stored_windows_when_prometheus_fails(staff_client, world):
    a1 = world.wl["a1"]
    a1.cluster.prometheus_url = "http://127.0.0.1:9"  # discard port: refused
    a1.cluster.prometheus_timeout_seconds = 2
    a1.cluster.save()

    url = reverse("dashboard:workload-chart-activity", args=[a1.pk])
    fig = figure(staff_client.get(url + "?range=24h&metric=sm_active"))

    assert fig["meta"]["source"] == "stored"
    assert "Prometheus could not be queried" in fig["meta"]["notice"]
    stored = [v for t in fig["data"] for v in t["y"] if v is not None]
    assert stored  # the stored windows are all still drawn


def test_upstream_text_in_chart_hovers_is_literal_never_markup(staff_client, world):
    # A Workload condition message is free text from the cluster: Plotly would render its
    # <a href>, <b> and <span style> as live markup unless it is escaped.
    a5 = world.wl["a5"]
    evicted = WorkloadTransition.objects.filter(workload=a5, kind="evicted").first()
    evicted.message = '<a href="http://127.0.0.1:9/x">fix</a> <b>now</b> <span style="x">!</span>'
    evicted.save()

    fig = figure(staff_client.get(reverse("dashboard:workload-chart-timeline", args=[a5.pk])))

    hover = json.dumps(trace(fig, "Evicted")["customdata"])
    assert "&lt;a href=" in hover and "&lt;b&gt;now&lt;/b&gt;" in hover
    assert "<a " not in hover and "<b>" not in hover and "<span" not in hover


def test_team_queues_chart_marks_borrowing_per_flavor(staff_client, world):
    fig = figure(staff_client.get(chart_urls(world)["team-queues"]))

    # team-a's h100 rollups: 20 allocated on 16 nominal every hour (it borrows on h100 only);
    # its a100 holds nothing of its 8.
    band = trace(fig, "team-a · h100 borrowing")
    allocated = trace(fig, "team-a · h100 allocated")
    assert band["y"] == [a if a is not None and a > 16 else None for a in allocated["y"]]
    assert any(value is not None for value in band["y"])
    assert not any(t["name"] == "team-a · a100 borrowing" for t in fig["data"])
    assert fig["meta"]["borrowing_series"] == 1


def test_queue_page_says_quota_history_starts_at_the_first_sync_without_kueue_metrics(
    staff_client, world
):
    # given: only the API server sync has sampled this cluster's queues
    response = staff_client.get(page_urls(world)["queue"])
    assert "Quota history starts at the first sync" in text(response)

    # when: Kueue's metrics filled some window
    ClusterQueueSample.objects.filter(pk=ClusterQueueSample.objects.first().pk).update(
        source=SampleSource.METRICS
    )

    # then: the hours before the sync have quota history; no note
    response = staff_client.get(page_urls(world)["queue"])
    assert "Quota history starts at the first sync" not in text(response)
