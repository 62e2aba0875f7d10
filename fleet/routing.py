"""Celery task routing: a queue per cluster (docs/architecture.md "Scale-out").

Every task that works on one cluster takes the cluster's id as its first argument. Clusters
named in ``GPULEDGER_CLUSTER_QUEUES`` (or every cluster, with ``*``) get their own queue,
``cluster.<name>``, and a worker started with ``celery -A config worker -Q cluster.<name>``
(on any machine that reaches the database, the broker, the cluster's Prometheus and its API
server) runs them. Every other task, and every task of a cluster without a queue of its own,
goes to Celery's default queue (``celery``), which a plain ``celery -A config worker`` serves.

Beat's fan-out tasks (``collect_metrics_all``, ``sync_clusters_all``, ``roll_up_dirty_hours``)
run on the default queue and publish one task per cluster, which this router sends on; the
alert evaluation that a collection queues, Celery's retries and follow-up tasks are routed the
same way, so all of a cluster's work stays on its worker.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from fleet.models import Cluster

logger = logging.getLogger(__name__)

# Tasks whose first argument (or ``cluster_id`` keyword) is the id of the cluster they work on.
PER_CLUSTER_TASKS = frozenset(
    {
        "ledger.tasks.collect_metrics",
        "ledger.tasks.roll_up_cluster_hours",
        "quotas.tasks.sync_cluster",
        "alerts.tasks.evaluate_alerts",
    }
)
QUEUE_PREFIX = "cluster."
ALL_CLUSTERS = "*"


def cluster_queue(name: str) -> str:
    """The queue of the cluster named ``name``."""
    return f"{QUEUE_PREFIX}{name}"


def has_own_queue(name: str) -> bool:
    """Whether the cluster named ``name`` has a queue of its own (``GPULEDGER_CLUSTER_QUEUES``)."""
    names = settings.GPULEDGER_CLUSTER_QUEUES
    return ALL_CLUSTERS in names or name in names


def queue_for_cluster(cluster_id: int) -> str | None:
    """The queue of the cluster with this id; None for the default queue (no queue of its
    own, or no such cluster: the task itself then says the cluster is gone)."""
    if not settings.GPULEDGER_CLUSTER_QUEUES:
        return None
    name = Cluster.objects.filter(pk=cluster_id).values_list("name", flat=True).first()
    if name is None or not has_own_queue(name):
        return None
    return cluster_queue(name)


def _cluster_id(args: Any, kwargs: Any) -> int | None:
    value = kwargs.get("cluster_id") if isinstance(kwargs, dict) else None
    if value is None and isinstance(args, list | tuple) and args:
        value = args[0]
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def route_task(
    name: str, args: Any, kwargs: Any, options: dict[str, Any], task: Any = None, **kw: Any
) -> dict[str, str] | None:
    """Celery router (``CELERY_TASK_ROUTES``): a per-cluster task of a cluster with its own
    queue goes to that queue; None leaves the task to the default queue. A queue named by
    the caller (``apply_async(queue=...)``) wins over this."""
    if name not in PER_CLUSTER_TASKS or not settings.GPULEDGER_CLUSTER_QUEUES:
        return None
    cluster_id = _cluster_id(args, kwargs)
    if cluster_id is None:
        logger.warning("task %s has no cluster id; sent to the default queue", name)
        return None
    queue = queue_for_cluster(cluster_id)
    return None if queue is None else {"queue": queue}
