"""The Celery queue lengths, read from the Redis broker when Prometheus scrapes.

The queues are Celery's default queue and, with ``GPULEDGER_CLUSTER_QUEUES``, one per cluster
(``fleet.routing``). Kombu keeps a Redis queue as a list per priority step (the plain name for
priority 0, ``<name>\\x06\\x16<step>`` for the others): a queue's length is their sum. The read
ends by ``GPULEDGER_METRICS_BROKER_TIMEOUT_SECONDS``; a broker that cannot be reached, or that is
not Redis, gives ``up=False`` and no lengths, never an error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import redis
from django.conf import settings

from fleet.models import Cluster
from fleet.routing import cluster_queue, has_own_queue

logger = logging.getLogger(__name__)

DEFAULT_QUEUE = "celery"
# kombu.transport.redis: Channel.sep and PRIORITY_STEPS.
PRIORITY_SEPARATOR = "\x06\x16"
PRIORITY_STEPS = (0, 3, 6, 9)


@dataclass
class BrokerState:
    up: bool
    lengths: dict[str, int] = field(default_factory=dict)


def queue_names() -> list[str]:
    """The default queue, then each cluster's own queue (by cluster name)."""
    names = [DEFAULT_QUEUE]
    if settings.GPULEDGER_CLUSTER_QUEUES:
        for name in Cluster.objects.order_by("name").values_list("name", flat=True):
            if has_own_queue(name):
                names.append(cluster_queue(name))
    return names


def _keys(queue: str) -> list[str]:
    return [queue if step == 0 else f"{queue}{PRIORITY_SEPARATOR}{step}" for step in PRIORITY_STEPS]


def read_queue_lengths(queues: list[str], url: str | None = None) -> BrokerState:
    """LLEN of every priority list of ``queues`` in one round trip."""
    url = url if url is not None else settings.CELERY_BROKER_URL
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return BrokerState(up=False)
    timeout = settings.GPULEDGER_METRICS_BROKER_TIMEOUT_SECONDS
    client = redis.Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout, retry_on_timeout=False
    )
    try:
        pipe = client.pipeline(transaction=False)
        for queue in queues:
            for key in _keys(queue):
                pipe.llen(key)
        answers = pipe.execute()
    except (redis.RedisError, OSError) as exc:
        logger.warning("metrics: the Celery broker cannot be read: %s", exc)
        return BrokerState(up=False)
    finally:
        client.close()
    steps = len(PRIORITY_STEPS)
    lengths = {
        queue: sum(int(n) for n in answers[i * steps : (i + 1) * steps])
        for i, queue in enumerate(queues)
    }
    return BrokerState(up=True, lengths=lengths)
