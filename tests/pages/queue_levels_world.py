"""A small world of admission records for the Queue levels and workload pages (built per test:
the live server needs committed rows).

Cluster "test", teams alpha (led by ``lead``) and beta, one ClusterQueue each, relative to
``now``:

- alpha-cq: 12 admissions in the last 24 hours, admitted 1, 3, ..., 23 h ago after waits of
  24, 22, ..., 2 minutes (nearest rank: p50 = rank 6 = 12 min, p95 = rank 12 = 24 min). The
  oldest is attempt 1 of ``alpha-wait``, preempted by beta's ``beta-main`` (InCohortReclamation)
  20 h ago and waiting again since; ``alpha-first`` (priority 10) waits ahead of it, so
  ``alpha-wait`` is at position 2 (no position from Kueue).
- beta-cq: 4 admissions 2-10 h ago after 5, 30, 60 and 90 min (p50 = rank 2 = 30 min, p95 =
  rank 4 = 90 min); the 5-minute one (``beta-victim``) was preempted by alpha-cq's
  ``alpha-main`` (InClusterQueue) 8 h ago.
- alpha-cq has an objective: p95 wait <= 20 min.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any


@dataclass
class LevelsWorld:
    now: datetime
    alpha: Any
    beta: Any
    alpha_cq: Any
    beta_cq: Any
    workloads: dict[str, Any]


def build(cluster: Any, lead: Any, now: datetime) -> LevelsWorld:
    from quotas.models import ClusterQueue, LocalQueue, Team, Workload
    from servicelevels.models import AdmissionRecord, QueueSLO

    alpha = Team.objects.create(name="alpha", display_name="Alpha")
    alpha.leads.add(lead)
    beta = Team.objects.create(name="beta", display_name="Beta")
    queues = {}
    workloads: dict[str, Any] = {}
    for team in (alpha, beta):
        cq = queues[team.name] = ClusterQueue.objects.create(
            cluster=cluster, name=f"{team.name}-cq", team=team, cohort_name="grove"
        )
        LocalQueue.objects.create(
            cluster=cluster, namespace=f"ns-{team.name}", name="default", cluster_queue=cq,
            cluster_queue_name=cq.name,
        )  # fmt: skip

    def workload(name: str, team: str, state: str, **fields: Any) -> Any:
        workloads[name] = Workload.objects.create(
            cluster=cluster, namespace=f"ns-{team}", name=name, uid=f"uid-{name}",
            cluster_queue=queues[team], state=state, requested_gpus=8.0, **fields,
        )  # fmt: skip
        return workloads[name]

    workload("alpha-main", "alpha", "admitted", observed_at=now - timedelta(hours=30))
    workload("beta-main", "beta", "admitted", observed_at=now - timedelta(hours=30))
    workload("beta-victim", "beta", "pending", observed_at=now - timedelta(hours=12))
    workload("alpha-first", "alpha", "pending", priority=10, observed_at=now - timedelta(hours=1))
    wait = workload("alpha-wait", "alpha", "pending", observed_at=now - timedelta(hours=24))

    def record(team: str, uid: str, admitted: datetime, waited: float, **fields: Any) -> None:
        cq = queues[team]
        AdmissionRecord.objects.create(
            cluster=cluster, workload_uid=uid, namespace=f"ns-{team}",
            workload_name=fields.pop("workload_name", uid), cluster_queue=cq,
            cluster_queue_name=cq.name, local_queue_name="default", team=cq.team,
            cohort_name="grove", gpus=8.0, queued_at=admitted - timedelta(minutes=waited),
            quota_reserved_at=admitted, admitted_at=admitted, **fields,
        )  # fmt: skip

    for k in range(11):
        record("alpha", f"a{k}", now - timedelta(hours=1 + 2 * k), 2 * (12 - k))
    # The 12th admission, 23 h ago after 2 min, is alpha-wait's first attempt.
    record(
        "alpha", wait.uid, now - timedelta(hours=23), 2, workload=wait, workload_name=wait.name,
        running_at=now - timedelta(hours=22, minutes=58), evicted_at=now - timedelta(hours=20),
        eviction_reason="Preempted", preemption_reason="InCohortReclamation",
        preempted_by=workloads["beta-main"], preempted_by_path="ns-beta/beta-main",
        preempting_cluster_queue_name="beta-cq",
    )  # fmt: skip
    AdmissionRecord.objects.create(
        cluster=cluster, workload=wait, workload_uid=wait.uid, namespace=wait.namespace,
        workload_name=wait.name, attempt=2, cluster_queue=queues["alpha"],
        cluster_queue_name="alpha-cq", team=alpha, gpus=8.0,
        queued_at=now - timedelta(hours=20),
    )  # fmt: skip
    victim = workloads["beta-victim"]
    record(
        "beta", victim.uid, now - timedelta(hours=10), 5, workload=victim,
        workload_name=victim.name, running_at=now - timedelta(hours=9, minutes=59),
        evicted_at=now - timedelta(hours=8), eviction_reason="Preempted",
        preemption_reason="InClusterQueue", preempted_by=workloads["alpha-main"],
        preempted_by_path="ns-alpha/alpha-main", preempting_cluster_queue_name="alpha-cq",
    )  # fmt: skip
    for hours, waited in ((2, 30), (3, 60), (4, 90)):
        record("beta", f"b{hours}", now - timedelta(hours=hours), waited)
    QueueSLO.objects.create(cluster_queue=queues["alpha"], statistic="p95", max_wait_seconds=1200)
    return LevelsWorld(now, alpha, beta, queues["alpha"], queues["beta"], workloads)
