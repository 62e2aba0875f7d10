"""Celery task for the queue service levels: thin glue around ``servicelevels.metrics``
(docs/conventions.md "Background work")."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils.dateparse import parse_datetime

from fleet.models import Cluster
from fleet.prometheus import PrometheusClient
from servicelevels.metrics import fill_hours

logger = logging.getLogger(__name__)


@shared_task(name="servicelevels.tasks.fill_queue_metrics", ignore_result=True)
def fill_queue_metrics(cluster_id: int, start: str, end: str, resume: bool = True) -> int:
    """Read Kueue's metrics for the hours in (start, end] (ISO 8601); returns queue-hours written.

    Resumable by default: a retried or repeated task goes on after the newest hour stored.
    """
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    first, last = parse_datetime(start), parse_datetime(end)
    if cluster is None or first is None or last is None or not cluster.prometheus_url:
        logger.warning("fill_queue_metrics: skipped (cluster %s, %s .. %s)", cluster_id, start, end)
        return 0
    with PrometheusClient.for_cluster(cluster) as client:
        return fill_hours(cluster, first, last, client.query_range, resume=resume).hours_written
