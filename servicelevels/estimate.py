"""When a pending workload will start: its position in its ClusterQueue and an estimated start.

Position (1 = admitted next):

- Kueue's own, from its visibility API (``Workload.pending_position``, 0-based, read by the sync
  when the cluster serves ``visibility.kueue.x-k8s.io``);
- else the product's order of the queue's pending workloads: priority (highest first), then
  creation (oldest first), then name. A workload without Kueue's position in a queue where others
  have one is placed by this order among all the queue's pending workloads.

Estimated start: the workload starts with the ``n``-th admission of its ClusterQueue from now,
``n`` = its position. The rate ``r`` is the queue's admissions over the last 24 hours (admission
records whose ``admitted_at`` falls in them, ``servicelevels.figures.admissions_by_queue``) divided
by 24 h. If admissions go on arriving at that rate as a Poisson process, the time to the ``n``-th
one follows an Erlang (gamma) distribution of shape ``n`` and rate ``r``: the estimate is its
mean ``n / r`` and the range its 10th to 90th percentile. With no admission in the last 24 hours
there is no estimate. The range says how much the arrivals alone scatter at a steady rate; it
does not foresee a change of rate, nor work of higher priority that arrives later and overtakes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from servicelevels.figures import admissions_by_queue

RATE_WINDOW = timedelta(hours=24)
LOW_QUANTILE = 0.10
HIGH_QUANTILE = 0.90

POSITION_VISIBILITY = "visibility"
POSITION_ORDER = "order"

METHOD = (
    "position ÷ the ClusterQueue's admissions per hour over the last 24 h; the range is the "
    "10th–90th percentile of the time to that many admissions if they go on arriving at that "
    "rate (Poisson: an Erlang distribution)"
)


@dataclass(frozen=True)
class Estimate:
    """A pending workload's position and estimated start, from ``now``."""

    position: int  # 1 = admitted next
    position_source: str  # POSITION_VISIBILITY or POSITION_ORDER
    admissions: int  # the queue's admissions in the rate window
    window_hours: float
    now: datetime
    expected_seconds: float | None = None
    low_seconds: float | None = None
    high_seconds: float | None = None

    @property
    def rate_per_hour(self) -> float:
        return self.admissions / self.window_hours if self.window_hours > 0 else 0.0

    @property
    def has_estimate(self) -> bool:
        return self.expected_seconds is not None

    @property
    def expected_at(self) -> datetime | None:
        return _after(self.now, self.expected_seconds)

    @property
    def low_at(self) -> datetime | None:
        return _after(self.now, self.low_seconds)

    @property
    def high_at(self) -> datetime | None:
        return _after(self.now, self.high_seconds)

    @property
    def method(self) -> str:
        return METHOD

    @property
    def position_method(self) -> str:
        if self.position_source == POSITION_VISIBILITY:
            return "Kueue's visibility API"
        return "the product's order (priority, then creation)"


def _after(now: datetime, seconds: float | None) -> datetime | None:
    return None if seconds is None else now + timedelta(seconds=seconds)


# --- the Erlang distribution ------------------------------------------------------------------


def erlang_cdf(n: int, rate: float, t: float) -> float:
    """P(the ``n``-th event of a Poisson process of ``rate`` per second comes by ``t`` s)
    = 1 - sum_{k < n} e^(-rt) (rt)^k / k!, summed in logs (n may be in the thousands)."""
    if n < 1:
        raise ValueError("n must be 1 or more")
    if t <= 0 or rate <= 0:
        return 0.0
    mean = rate * t
    log_mean = math.log(mean)
    below = 0.0
    for k in range(n):
        below += math.exp(-mean + k * log_mean - math.lgamma(k + 1))
    return min(max(1.0 - below, 0.0), 1.0)


def erlang_quantile(n: int, rate: float, q: float) -> float:
    """The time (s) by which the ``n``-th event comes with probability ``q`` (bisection)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile {q!r} is outside (0, 1)")
    if rate <= 0:
        raise ValueError("rate must be positive")
    low, high = 0.0, n / rate
    while erlang_cdf(n, rate, high) < q:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        if erlang_cdf(n, rate, middle) < q:
            low = middle
        else:
            high = middle
        if high - low <= 1e-9 * high:
            break
    return (low + high) / 2


def estimate(
    position: int,
    admissions: int,
    now: datetime,
    *,
    source: str = POSITION_ORDER,
    window: timedelta = RATE_WINDOW,
) -> Estimate:
    """The estimate for a workload at ``position`` (1 = next) of a queue that admitted
    ``admissions`` workloads in the last ``window``."""
    if position < 1:
        raise ValueError("position must be 1 or more (1 = admitted next)")
    hours = window.total_seconds() / 3600
    found = Estimate(
        position=position,
        position_source=source,
        admissions=admissions,
        window_hours=hours,
        now=now,
    )
    if admissions <= 0:
        return found
    rate = admissions / window.total_seconds()  # per second
    return Estimate(
        position=position,
        position_source=source,
        admissions=admissions,
        window_hours=hours,
        now=now,
        expected_seconds=position / rate,
        low_seconds=erlang_quantile(position, rate, LOW_QUANTILE),
        high_seconds=erlang_quantile(position, rate, HIGH_QUANTILE),
    )


# --- positions and rates from the database ------------------------------------------------------


def queue_positions(cluster_queue_id: int) -> dict[int, tuple[int, str]]:
    """Workload id → (position, source) for every pending workload of the ClusterQueue."""
    from quotas.models import Workload

    rows = list(
        Workload.objects.pending()
        .filter(cluster_queue_id=cluster_queue_id)
        .order_by("-priority", "observed_at", "name", "pk")
        .values_list("pk", "pending_position")
    )
    out: dict[int, tuple[int, str]] = {}
    for index, (pk, kueue_position) in enumerate(rows):
        if kueue_position is not None:
            out[pk] = (kueue_position + 1, POSITION_VISIBILITY)
        else:
            out[pk] = (index + 1, POSITION_ORDER)
    return out


def admissions_per_queue(cluster: str, now: datetime) -> dict[str, int]:
    """ClusterQueue name → its admissions in the rate window ending ``now`` (every team's: the
    rate is the queue's own, a figure of the queue, not of anyone's workloads)."""
    return admissions_by_queue(now - RATE_WINDOW, now, cluster=cluster)


def estimates_for(workloads: Iterable[object], now: datetime) -> dict[int, Estimate]:
    """Workload id → its ``Estimate`` for each pending workload given (``quotas.Workload``s with
    their ``cluster`` and ``cluster_queue``); workloads not pending or without a queue are left
    out. One read of the positions per queue and of the rates per cluster."""
    rates: dict[str, dict[str, int]] = {}
    positions: dict[int, dict[int, tuple[int, str]]] = {}
    out: dict[int, Estimate] = {}
    for workload in workloads:
        queue = getattr(workload, "cluster_queue", None)
        pk = getattr(workload, "pk", None)
        if queue is None or pk is None:
            continue
        if queue.pk not in positions:
            positions[queue.pk] = queue_positions(queue.pk)
        place = positions[queue.pk].get(pk)
        if place is None:
            continue
        cluster = workload.cluster.name  # type: ignore[attr-defined]
        if cluster not in rates:
            rates[cluster] = admissions_per_queue(cluster, now)
        admitted = rates[cluster].get(queue.name, 0)
        out[pk] = estimate(place[0], admitted, now, source=place[1])
    return out


def estimates_in_queue(cluster_queue: Any, now: datetime) -> dict[int, Estimate]:
    """Workload id → its ``Estimate`` for every pending workload of one ClusterQueue (with its
    ``cluster``): one read of the positions and one of the rate."""
    admitted = admissions_per_queue(cluster_queue.cluster.name, now).get(cluster_queue.name, 0)
    return {
        pk: estimate(position, admitted, now, source=source)
        for pk, (position, source) in queue_positions(cluster_queue.pk).items()
    }
