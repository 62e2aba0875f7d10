"""The ``prometheus_client`` collector behind ``/metrics``: every part read at scrape time.

A part that fails (a database error in one query) is logged and counted in
``gpuledger_metrics_scrape_errors{part}``; the other parts are still answered, so one broken
read never hides the collection lag an operator alerts on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from django.db import DatabaseError
from django.utils import timezone
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from observability import broker, figures, health

logger = logging.getLogger(__name__)


def _broker(now: datetime) -> Iterable[GaugeMetricFamily]:
    up = GaugeMetricFamily("gpuledger_broker_up", "1 when the Celery broker answered, else 0.")
    lengths = GaugeMetricFamily(
        "gpuledger_celery_queue_length",
        "Tasks waiting in the Celery queue (every priority).",
        labels=["queue"],
    )
    state = broker.read_queue_lengths(broker.queue_names())
    up.add_metric([], 1.0 if state.up else 0.0)
    for queue, length in state.lengths.items():
        lengths.add_metric([queue], length)
    return [up, lengths]


# name → what it yields; read in this order.
PARTS: dict[str, Callable[[datetime], Iterable[GaugeMetricFamily]]] = {
    "collection": health.collection_lag,
    "runs": health.runs,
    "rollups": health.rollup_lag,
    "prune": health.prune,
    "alerts": lambda now: health.alert_episodes(),
    "notifications": health.notifications,
    "broker": _broker,
    "figures": figures.figures,
}


class LedgerCollector(Collector):
    """Reads every part of ``PARTS`` at each scrape."""

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        now = timezone.now()
        errors = GaugeMetricFamily(
            "gpuledger_metrics_scrape_errors",
            "1 when this part of the exposition could not be read at this scrape, else 0.",
            labels=["part"],
        )
        for part, read in PARTS.items():
            try:
                families = list(read(now))
            except DatabaseError as exc:
                # The database down fails every part: one line each, not a traceback each.
                logger.warning("metrics: reading %s failed: %s", part, exc)
                errors.add_metric([part], 1.0)
                continue
            except Exception:
                logger.exception("metrics: reading %s failed", part)
                errors.add_metric([part], 1.0)
                continue
            errors.add_metric([part], 0.0)
            yield from families
        yield errors
        took = GaugeMetricFamily(
            "gpuledger_metrics_scrape_duration_seconds",
            "How long reading this exposition took.",
        )
        took.add_metric([], time.monotonic() - started)
        yield took


def registry() -> CollectorRegistry:
    """A registry with only GPU Ledger's collector (no per-process metrics: which of the web
    processes answers a scrape is chance)."""
    found = CollectorRegistry(auto_describe=False)
    found.register(LedgerCollector())
    return found
