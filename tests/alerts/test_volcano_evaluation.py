"""The hoarding rules on a Volcano cluster, end to end: the Volcano fixtures
(tests/fixtures/volcano) synced through the real client, the loopback API server and the sync,
then forty minutes of usage rows for the fixture's running pods, evaluated by
``alerts.evaluate.evaluate_range`` with the default thresholds.

Timeline (the fixture's snapshot time is 12:00): the sync lists at 12:00:30 and samples the
queues once a window up to 12:40, as a watching sync does; the windows (12:00, 12:01] to
(12:39, 12:40] hold one row per GPU of every running pod (``pods.v1.json``), busy but for
team-v1/mixtral-ft's 8 GPUs, idle throughout. Expected figures, from the fixture README:

* ghost reservation: team-v2/ddp-smoke is Inqueue (reserved since 11:59:30, its newest
  condition) with minResources 2 GPUs for a gang of 2 and no pod running. Its hold covers
  every stored window, the first being (12:00, 12:01]: the episode starts at 12:00 and fires
  after the 10 ghost minutes, at 12:10; 2 GPUs, 0 of 2 pods running. No other PodGroup is
  one: the Running gangs run all their pods, protein-fold is Pending (it holds nothing),
  tokenizer-bench is Completed.
* borrowing while idle: team-v1 deserves 16 and has 24 in use (llama-pretrain 16 +
  mixtral-ft 8), so it borrows 8 in every window; mixtral-ft's 8 idle GPUs cover the 8
  borrowed. The episode starts at 12:00 and fires after the 30 borrowing minutes, at 12:30;
  its lenders are the members of research that do not borrow and have unused lendable quota:
  team-v2 (deserved 16, in use 10, lends up to 16) and team-v3 (deserved 8, nothing in use).
  No other queue borrows (README: borrowed 0 everywhere else).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from alerts.choices import Rule
from alerts.evaluate import evaluate_range
from alerts.models import Episode
from core.deadlines import Deadline
from fleet.choices import ActivitySource, IngestSource, IngestStatus
from fleet.models import Cluster, IngestRun
from ledger.models import GpuUsage
from quotas.models import ClusterQueue, Workload
from quotas.sources import SourceClient, volcano
from quotas.sync import ClusterSync
from tests.scheduler_fixtures import load_scheduler_fixtures, scheduler_items

NOW = datetime(2026, 8, 22, 12, 0, tzinfo=UTC)
MINUTES = 40
BUSY, IDLE = 0.9, 0.0
IDLE_WORKLOAD = "mixtral-ft"


def at(minutes: float) -> datetime:
    return NOW + timedelta(minutes=minutes)


@pytest.fixture
def volcano_api(make_kube_api) -> Any:
    """The Volcano fixtures on an API server serving Volcano and no Kueue."""
    api = make_kube_api(load=False, kueue_versions=(), volcano_versions=("v1beta1",))
    return load_scheduler_fixtures(api, "volcano")


def sync_and_sample(cluster: Cluster) -> None:
    """LIST and write at 12:00:30, then one queue sample per window up to 12:40, each at the
    middle of its minute, as the sync's watch samples a window once it is due."""
    with time_machine.travel(at(0.5), tick=False):
        client = SourceClient.for_cluster(cluster)
        run = IngestRun.objects.create(
            cluster=cluster,
            source=IngestSource.KUEUE,
            status=IngestStatus.RUNNING,
            started_at=timezone.now(),
        )
        sync = ClusterSync(cluster, client, run)
        sync.relist()
    for minute in range(1, MINUTES + 1):
        with time_machine.travel(at(minute + 0.5), tick=False):
            sync.sampler.sample(Deadline.never())
    with time_machine.travel(at(MINUTES + 0.5), tick=False):
        sync.finish(IngestStatus.SUCCESS)
    client.close()


def usage_rows(cluster: Cluster) -> list[GpuUsage]:
    """One row per GPU of every running pod of the fixtures in each window; a pod's workload
    is its Volcano Job (``volcano.sh/job-name``), as the README names workloads."""
    rows = []
    workloads = {(w.namespace, w.name): w for w in Workload.objects.filter(cluster=cluster)}
    for pod in scheduler_items("volcano", "Pod"):
        meta, spec = pod["metadata"], pod["spec"]
        if pod["status"]["phase"] != "Running" or not spec.get("nodeName"):
            continue
        workload = workloads[(meta["namespace"], meta["labels"]["volcano.sh/job-name"])]
        gpus = int(spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
        node = spec["nodeName"]
        activity = IDLE if workload.name == IDLE_WORKLOAD else BUSY
        for minute in range(MINUTES):
            for gpu in range(gpus):
                rows.append(
                    GpuUsage(
                        cluster=cluster,
                        window_start=at(minute),
                        window_end=at(minute + 1),
                        gpu_key=f"{node}/GPU-{meta['name']}-{gpu}/",
                        namespace=meta["namespace"],
                        pod=meta["name"],
                        node_name=node,
                        flavor=volcano.FLAVOR,
                        gpu_model="H100" if "h100" in node else "A100",
                        workload=workload,
                        cluster_queue=workload.cluster_queue,
                        allocated=True,
                        gpus=1.0,
                        capacity_gpus=1.0,
                        sm_active=activity,
                        activity=activity,
                        activity_source=ActivitySource.SM_ACTIVE,
                    )
                )
    return rows


@pytest.fixture
def evaluated(volcano_api, db) -> Cluster:
    cluster = Cluster.objects.create(name="gpu-volcano")
    sync_and_sample(cluster)
    rows = usage_rows(cluster)
    # 9 running pods: 4 x 4 + 1 x 8 + 2 x 4 + 2 x 8 = 48 GPUs a window (README: allocated 48).
    assert len(rows) == 48 * MINUTES
    GpuUsage.objects.bulk_create(rows, batch_size=2000)
    evaluate_range(cluster.pk, at(0), at(MINUTES), live=True)
    return cluster


def test_an_inqueue_gang_without_running_pods_opens_a_ghost_reservation(evaluated) -> None:
    [episode] = Episode.objects.filter(cluster=evaluated, rule=Rule.GHOST_RESERVATION)

    ddp_smoke = Workload.objects.get(cluster=evaluated, namespace="team-v2", name="ddp-smoke")
    assert episode.workload_id == ddp_smoke.pk
    assert episode.cluster_queue == ClusterQueue.objects.get(cluster=evaluated, name="team-v2")
    assert episode.namespace == "team-v2"
    assert episode.gpus == 2
    assert (episode.started_at, episode.fired_at, episode.resolved_at) == (at(0), at(10), None)
    assert episode.evidence["pods_running"] == 0
    assert episode.evidence["pods_expected"] == 2


def test_a_queue_borrowing_while_its_gpus_idle_opens_borrowing_while_idle(evaluated) -> None:
    [episode] = Episode.objects.filter(cluster=evaluated, rule=Rule.BORROWING_WHILE_IDLE)

    assert episode.cluster_queue == ClusterQueue.objects.get(cluster=evaluated, name="team-v1")
    assert episode.subject_key == "cluster_queue:gpu-volcano/team-v1"
    assert episode.gpus == 8
    assert (episode.started_at, episode.fired_at, episode.resolved_at) == (at(0), at(30), None)
    assert (episode.evidence["borrowed"], episode.evidence["idle"]) == (8, 8)
    assert episode.evidence["idle_workloads"] == ["team-v1/mixtral-ft"]
    assert episode.evidence["lenders"] == ["team-v2", "team-v3"]
    # Said in Volcano's words: a Queue, not a ClusterQueue.
    assert episode.summary.startswith("Queue team-v1 borrows 8 GPUs from team-v2, team-v3")
