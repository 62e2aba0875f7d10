"""Celery tasks of the serving app: thin glue over ``serving.collector``
(docs/conventions.md "Background work").

``collect_serving_hours`` runs every few minutes from beat and collects each enabled cluster's
complete hours that have no successful collection yet; a doubled tick collects an hour twice at
worst, and a re-collected hour replaces its rows.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from fleet.models import Cluster
from fleet.prometheus import PrometheusError
from serving.collector import collect_due

logger = logging.getLogger(__name__)


@shared_task(name="serving.tasks.collect_serving_hours")
def collect_serving_hours() -> list[dict[str, Any]]:
    """Collect the due serving hours of every enabled cluster with a Prometheus URL."""
    results: list[dict[str, Any]] = []
    clusters = Cluster.objects.filter(collect_enabled=True).exclude(prometheus_url="")
    for cluster in clusters.order_by("pk"):
        try:
            results.append(collect_due(cluster).as_dict())
        except PrometheusError as exc:
            # Recorded in a failed ServingCollection; the next tick tries the hour again.
            logger.warning("collect_serving_hours: cluster %s: %s", cluster.name, exc)
            results.append({"cluster": cluster.name, "error": str(exc)})
    return results
