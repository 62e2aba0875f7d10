"""A small cluster whose stored windows are written minute by minute from a scenario.

Every test states its timeline in minutes after ``T0`` (``at(m)``) and the expected episode
times from that timeline; nothing is read back from the code under test to build expectations.
Windows are 60 s: the window ending at ``at(m + 1)`` is minute ``m``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from alerts.evaluate import evaluate_range
from alerts.models import Episode
from fleet.choices import ActivitySource
from fleet.models import Cluster, Node
from ledger.choices import RateKind
from ledger.models import GpuUsage, RateCard
from quotas.choices import WorkloadState
from quotas.models import (
    ClusterQueue,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    Team,
    Workload,
)
from tests.fleet.conftest import (  # noqa: F401  (the hook tests' real Prometheus)
    alpha_fleet,
    alpha_prometheus,
)
from tests.pages.conftest import (  # noqa: F401  (the browser tests' fixtures)
    browser_login,
    browser_type_launch_args,
    console_errors,
    staff_user,
)

T0 = datetime(2026, 4, 6, 8, 0, tzinfo=UTC)
PRICE = Decimal("2.50")  # allocated h100 rate card, per GPU-hour


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@dataclass
class Gang:
    """A workload and its GPUs; ``activity(minute, gpu)`` gives SM_ACTIVE or None (no data)."""

    workload: Workload
    gpus: int
    node: str
    pods: int = 1

    def uuid(self, gpu: int) -> str:
        return f"GPU-{self.workload.name}-{gpu:02d}"

    def key(self, gpu: int) -> str:
        return f"{self.node}/{self.uuid(gpu)}/"


@dataclass
class World:
    cluster: Cluster
    team: Team
    other_team: Team
    cq: ClusterQueue
    lender: ClusterQueue
    lq: LocalQueue
    rows: list[GpuUsage] = field(default_factory=list)

    def workload(
        self,
        name: str,
        gpus: int,
        *,
        pods: int = 1,
        reserved_at: datetime | None = T0 - timedelta(hours=1),
        state: str = WorkloadState.ADMITTED,
        namespace: str = "ns-a",
        **extra: object,
    ) -> Workload:
        return Workload.objects.create(
            cluster=self.cluster,
            namespace=namespace,
            name=name,
            queue_name="lq-a",
            local_queue=self.lq,
            cluster_queue=self.cq,
            pod_sets=[{"name": "main", "count": pods, "gpus_per_pod": gpus / pods}],
            requested_gpus=gpus,
            admitted_gpus=gpus,
            flavors={"nvidia.com/gpu": "h100"},
            state=state,
            quota_reserved_at=reserved_at,
            admitted_at=reserved_at,
            **extra,  # type: ignore[arg-type]
        )

    def gang(self, workload: Workload, node: str = "node-1") -> Gang:
        count = int(workload.admitted_gpus)
        return Gang(workload, count, node, pods=workload.pod_sets[0]["count"])

    def run(
        self,
        gang: Gang,
        minutes: Iterable[int],
        activity: object,
        *,
        source: str = ActivitySource.SM_ACTIVE,
        running_pods: int | None = None,
        no_series: bool = False,
    ) -> None:
        """Rows for the gang's GPUs in each minute; ``activity(minute, gpu)`` → value or None.

        ``no_series``: the pods' GPUs have no DCGM series at all, one row per pod without a GPU
        key (what the collector writes when the exporter is dark)."""
        pods = gang.pods if running_pods is None else running_pods
        per_pod = gang.gpus // gang.pods
        if no_series:
            for minute in minutes:
                for pod in range(pods):
                    self.rows.append(
                        GpuUsage(
                            cluster=self.cluster,
                            window_start=at(minute),
                            window_end=at(minute + 1),
                            gpu_key="",
                            namespace=gang.workload.namespace,
                            pod=f"{gang.workload.name}-{pod}",
                            node_name=gang.node,
                            workload=gang.workload,
                            local_queue=self.lq,
                            cluster_queue=self.cq,
                            team=self.team,
                            allocated=True,
                            gpus=float(per_pod),
                            capacity_gpus=float(per_pod),
                        )
                    )
            return
        for minute in minutes:
            for gpu in range(pods * per_pod):
                value = activity(minute, gpu) if callable(activity) else activity
                self.rows.append(
                    GpuUsage(
                        cluster=self.cluster,
                        window_start=at(minute),
                        window_end=at(minute + 1),
                        gpu_key=gang.key(gpu),
                        namespace=gang.workload.namespace,
                        pod=f"{gang.workload.name}-{gpu // per_pod}",
                        node_name=gang.node,
                        flavor="h100",
                        gpu_model="H100",
                        workload=gang.workload,
                        local_queue=self.lq,
                        cluster_queue=self.cq,
                        team=self.team,
                        allocated=True,
                        gpus=1.0,
                        capacity_gpus=1.0,
                        sm_active=value if source == ActivitySource.SM_ACTIVE else None,
                        gr_engine_active=value if source != ActivitySource.SM_ACTIVE else None,
                        activity=value,
                        activity_source=source if value is not None else ActivitySource.NONE,
                    )
                )

    def spare(self, minutes: Iterable[int], node: str = "node-2", gpus: int = 1) -> None:
        """Unallocated GPUs with telemetry, so every minute has a stored window."""
        for minute in minutes:
            for gpu in range(gpus):
                self.rows.append(
                    GpuUsage(
                        cluster=self.cluster,
                        window_start=at(minute),
                        window_end=at(minute + 1),
                        gpu_key=f"{node}/GPU-spare-{gpu}/",
                        node_name=node,
                        flavor="h100",
                        gpu_model="H100",
                        allocated=False,
                        gpus=1.0,
                        capacity_gpus=1.0,
                        sm_active=0.0,
                        activity=0.0,
                        activity_source=ActivitySource.SM_ACTIVE,
                    )
                )

    def sample(self, queue: ClusterQueue, minutes: Iterable[int], **values: float) -> None:
        ClusterQueueSample.objects.bulk_create(
            ClusterQueueSample(
                cluster_queue=queue,
                flavor_name="h100",
                sampled_at=at(minute + 1),
                window_seconds=60,
                **{name: Decimal(str(value)) for name, value in values.items()},  # type: ignore[arg-type]
            )
            for minute in minutes
        )

    def store(self) -> None:
        GpuUsage.objects.bulk_create(self.rows, batch_size=2000)
        self.rows = []

    def evaluate(self, start: float, end: float, *, live: bool = True) -> None:
        self.store()
        evaluate_range(self.cluster.pk, at(start), at(end), live=live)

    def evaluate_live(self, start: int, end: int) -> None:
        """One evaluation per window, as the collector's hook does."""
        self.store()
        for minute in range(start, end):
            evaluate_range(self.cluster.pk, at(minute), at(minute + 1), live=True)

    def episodes(self, rule: str | None = None) -> list[Episode]:
        queryset = Episode.objects.filter(cluster=self.cluster).order_by("started_at")
        return list(queryset.filter(rule=rule) if rule else queryset)


@pytest.fixture
def eager_celery():
    """Tasks published in the test run in it (``alerts.tasks.evaluate_alerts`` after commit)."""
    from config.celery import app

    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield app
    app.conf.task_always_eager = eager


@pytest.fixture
def world(db) -> World:
    return build_world()


def build_world() -> World:
    """Cluster c1: two nodes, teams red and blue with a queue each in cohort research, red's
    LocalQueue ns-a/lq-a, and the allocated h100 rate card; no windows yet."""
    cluster = Cluster.objects.create(name="c1")
    Node.objects.create(cluster=cluster, name="node-1", gpu_capacity=8)
    Node.objects.create(cluster=cluster, name="node-2", gpu_capacity=8)
    team = Team.objects.create(name="red")
    other = Team.objects.create(name="blue")
    cohort = Cohort.objects.create(cluster=cluster, name="research")
    cq = ClusterQueue.objects.create(cluster=cluster, name="cq-red", cohort=cohort, team=team)
    lender = ClusterQueue.objects.create(cluster=cluster, name="cq-blue", cohort=cohort, team=other)
    lq = LocalQueue.objects.create(
        cluster=cluster,
        namespace="ns-a",
        name="lq-a",
        cluster_queue=cq,
        cluster_queue_name="cq-red",
    )
    RateCard.objects.create(
        kind=RateKind.ALLOCATED,
        flavor="h100",
        price_per_gpu_hour=PRICE,
        currency="USD",
        effective_from=T0 - timedelta(days=30),
    )
    return World(cluster, team, other, cq, lender, lq)
