"""A cluster whose older days were pruned by the real retention code, for the pages that draw
per-window rows and fall back to hourly rollups before them.

One node ``node-p`` with two GPUs, both held by workload ``train`` of team ``red`` for the whole
of ``DAYS`` days of 10-minute windows ending at ``END``; each GPU-window's figures come from
``activity(window, gpu)`` and friends below. Every hour is rolled up (``roll_up_range``), then
``prune_usage`` removes the windows before ``CUTOFF`` (one day before ``END``): on PostgreSQL
whole daily partitions, so the cut lands on the midnight before; elsewhere exactly there.
``hourly_mean`` recomputes a GPU-hour mean from the same formulas, independently of the rollup.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta

from django.db import connection

from alerts.choices import Rule
from alerts.models import Episode
from core.timewindows import floor_time
from fleet.choices import ActivitySource
from fleet.models import Cluster, Gpu, Node
from ledger.models import GpuUsage
from ledger.rollup import prune_usage, roll_up_range
from quotas.choices import WorkloadState
from quotas.models import ClusterQueue, Team, Workload

END = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
DAYS = 2
WINDOW = timedelta(minutes=10)
START = END - timedelta(days=DAYS)
CUTOFF = END - timedelta(days=1) - timedelta(minutes=25)  # mid-hour: 2026-03-09 11:35
GPUS = 2


def windows() -> list[datetime]:
    """The window ends, oldest first."""
    count = int((END - START) / WINDOW)
    return [START + WINDOW * (index + 1) for index in range(count)]


def activity(window_end: datetime, gpu: int) -> float:
    """SM_ACTIVE of ``gpu`` in the window ending then: a saw-tooth over the windows of a day."""
    step = int((window_end - START) / WINDOW)
    return round(((step * 7 + gpu * 3) % 10) / 10 + 0.05, 3)


def tensor(window_end: datetime, gpu: int) -> float:
    return round(activity(window_end, gpu) / 2, 4)


def hourly_mean(hour: datetime, value=activity) -> float:
    """The mean of ``value`` over both GPUs' windows ending in ``(hour, hour + 1h]``."""
    found = [
        value(end, gpu)
        for end in windows()
        if hour < end <= hour + timedelta(hours=1)
        for gpu in range(GPUS)
    ]
    return sum(found) / len(found)


def since() -> datetime:
    """Where per-window rows start after the prune, from the cut alone: the end of the hour the
    cut falls in (that hour is flagged pruned); PostgreSQL cuts at the midnight before."""
    cut = CUTOFF
    if connection.vendor == "postgresql":
        cut = datetime.combine(CUTOFF.date(), time(), tzinfo=UTC)
    floor = floor_time(cut, 3600)
    return floor if floor == cut else floor + timedelta(hours=1)


@dataclass
class PrunedWorld:
    cluster: Cluster
    node: Node
    gpus: list[Gpu]
    team: Team
    workload: Workload
    episode: Episode

    def key(self, gpu: int) -> str:
        return f"node-p/{self.gpus[gpu].uuid}/"


def build_pruned_world() -> PrunedWorld:
    cluster = Cluster.objects.create(name="pw", display_name="Pruned world")
    node = Node.objects.create(cluster=cluster, name="node-p", gpu_capacity=GPUS, flavor="h100")
    gpus = [
        Gpu.objects.create(
            cluster=cluster, node=node, host="node-p", uuid=f"GPU-p-{index}", index=index
        )
        for index in range(GPUS)
    ]
    team = Team.objects.create(name="red")
    queue = ClusterQueue.objects.create(cluster=cluster, name="cq-red", team=team)
    workload = Workload.objects.create(
        cluster=cluster,
        namespace="ns-red",
        name="train",
        cluster_queue=queue,
        pod_sets=[{"name": "main", "count": 1, "gpus_per_pod": GPUS}],
        requested_gpus=GPUS,
        admitted_gpus=GPUS,
        state=WorkloadState.ADMITTED,
        admitted_at=START - timedelta(hours=1),
        observed_at=START - timedelta(hours=1),
    )
    rows = [
        GpuUsage(
            cluster=cluster,
            window_start=end - WINDOW,
            window_end=end,
            gpu=gpus[gpu],
            gpu_key=f"node-p/{gpus[gpu].uuid}/",
            namespace="ns-red",
            pod="train-0",
            node_name="node-p",
            flavor="h100",
            workload=workload,
            cluster_queue=queue,
            team=team,
            allocated=True,
            gpus=1.0,
            capacity_gpus=1.0,
            activity=activity(end, gpu),
            sm_active=activity(end, gpu),
            pipe_tensor_active=tensor(end, gpu),
            dram_active=0.3,
            gpu_util=80.0,
            fb_used_mib=4096.0,
            activity_source=ActivitySource.SM_ACTIVE,
            samples=10,
            expected_samples=10,
        )
        for end in windows()
        for gpu in range(GPUS)
    ]
    GpuUsage.objects.bulk_create(rows, batch_size=2000)
    roll_up_range(cluster.pk, START, END)
    prune_usage(CUTOFF)
    # An idle episode of the workload from before the cut (either database's) to after it.
    episode = Episode.objects.create(
        rule=Rule.IDLE_WORKLOAD,
        cluster=cluster,
        team=team,
        cluster_queue=queue,
        workload=workload,
        gpus=float(GPUS),
        subject_key=f"workload:{workload.pk}",
        started_at=START + timedelta(hours=6),
        fired_at=START + timedelta(hours=7),
        resolved_at=CUTOFF + timedelta(hours=2),
        evaluated_until=CUTOFF + timedelta(hours=2),
        evidence={"gpus": {f"node-p/{gpu.uuid}/": {} for gpu in gpus}, "idle_threshold": 0.01},
    )
    return PrunedWorld(cluster, node, gpus, team, workload, episode)
