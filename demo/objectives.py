"""The demo's queue service-level objective: ``batch`` waits p95 <= 30 min per day.

The simulated ``batch`` queue has a day whose waits break it (its A100 quota held by a re-index
gang while a dedup job waits, demo.simulation.scenario), so the demo shows an objective that
was met on most days and breached on one. The admission records it is judged on come from the
simulated Kueue through the real sync write (servicelevels.build).
"""

from __future__ import annotations

from fleet.models import Cluster
from quotas.models import ClusterQueue
from servicelevels.choices import SloStatistic
from servicelevels.models import QueueSLO

DEMO_QUEUE = "batch"
DEMO_MAX_WAIT_SECONDS = 30 * 60


def seed_queue_objective(cluster: Cluster) -> QueueSLO | None:
    """Create (or reset) the demo objective on the cluster's ``batch`` ClusterQueue."""
    queue = ClusterQueue.objects.filter(cluster=cluster, name=DEMO_QUEUE).first()
    if queue is None:
        return None
    slo, _ = QueueSLO.objects.update_or_create(
        cluster_queue=queue,
        defaults={
            "statistic": SloStatistic.P95,
            "max_wait_seconds": DEMO_MAX_WAIT_SECONDS,
            "min_admissions": 1,
            "enabled": True,
        },
    )
    return slo
