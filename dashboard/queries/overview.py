"""The fleet overview's reads: the fleet now (newest windows), and flavors over the range.

"Now" is one aggregate over the newest window of each cluster plus one over pending workloads
(per ClusterQueue: the card's total and pending-while-free's flavors come from the same scan);
the per-flavor GPU-hours come from the read layer (flavor-scope rollups of the hours the range
counts); the team table is ``dashboard.queries.ranking``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, Sum

from core import ratios as formulas
from core.ranges import HourSpan
from dashboard.queries.now import figures_now
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.range_figures import Figures
from quotas.models import Workload
from quotas.now import gpu_quotas, waiting_flavor


@dataclass
class FleetNow:
    window_end: datetime | None
    capacity: float = 0.0
    allocated: float = 0.0
    telemetry: float = 0.0
    active: float = 0.0
    idle: float = 0.0
    no_telemetry_allocated: float = 0.0
    no_telemetry_free: float = 0.0
    fallback: float = 0.0
    busy: float = 0.0
    pending_gpus: float = 0.0
    pending_workloads: int = 0
    # flavor → GPUs of capacity no running pod holds, in the newest windows.
    free_by_flavor: dict[str, float] = field(default_factory=dict)
    # (ClusterQueue id, flavor its Kueue message says it waits for, "" if none) → (GPUs,
    # workloads) of its pending workloads that request GPUs.
    pending_by_queue: dict[tuple[int | None, str], tuple[float, int]] = field(default_factory=dict)

    # GPUs now, not GPU-hours; the ratios are the formulas of docs/architecture.md "Figures".

    @property
    def allocation_rate(self) -> float | None:
        return formulas.allocation_rate(self.allocated, self.capacity)

    @property
    def utilization(self) -> float | None:
        return formulas.utilization(self.active, self.telemetry)

    @property
    def coverage(self) -> float | None:
        return formulas.telemetry_coverage(self.telemetry, self.allocated)

    @property
    def no_telemetry(self) -> float:
        return self.no_telemetry_allocated + self.no_telemetry_free


# ``ledger.now`` names → FleetNow fields.
_NOW_FIELDS = {"busy_not_working": "busy"}


def fleet_now(windows: dict[int, datetime]) -> FleetNow:
    """The overview's numbers: one aggregate over the newest windows, one over pending workloads
    (per ClusterQueue, which ``pending_while_free`` reads too)."""
    # The registry's rules over the newest windows (``ledger.now``), grouped by flavor (summed
    # below), so the free GPUs per flavor come with the same scan.
    rows = figures_now(windows, group_by=("flavor",))
    totals: dict[str, float] = defaultdict(float)
    free: dict[str, float] = {}
    for row in rows:
        values: dict[str, Any] = dict(row)
        for key, value in values.items():
            if key != "flavor":
                totals[_NOW_FIELDS.get(key, key)] += float(value or 0.0)
        capacity = float(values["capacity"] or 0.0)
        free[values["flavor"]] = max(0.0, capacity - float(values["allocated"] or 0.0))
    # Every pending workload counts in the card; those requesting GPUs in pending-while-free.
    requesting = Q(requested_gpus__gt=0)
    demand = (
        Workload.objects.pending()
        .order_by()
        .values("cluster_queue_id", "state_message")
        .annotate(
            gpus=Sum("requested_gpus"),
            count=Count("pk"),
            requesting_gpus=Sum("requested_gpus", filter=requesting),
            requesting_count=Count("pk", filter=requesting),
        )
    )
    pending_gpus = 0.0
    pending_workloads = 0
    by_queue: dict[tuple[int | None, str], tuple[float, int]] = {}
    for queue in demand:
        pending_gpus += float(queue["gpus"] or 0.0)
        pending_workloads += queue["count"]
        if queue["requesting_count"]:
            queue_key = (queue["cluster_queue_id"], waiting_flavor(queue["state_message"]))
            gpus, count = by_queue.get(queue_key, (0.0, 0))
            by_queue[queue_key] = (
                gpus + float(queue["requesting_gpus"] or 0.0),
                count + queue["requesting_count"],
            )
    return FleetNow(
        window_end=max(windows.values()) if windows else None,
        pending_gpus=pending_gpus,
        pending_workloads=pending_workloads,
        free_by_flavor=free,
        pending_by_queue=by_queue,
        **totals,
    )


@dataclass
class FlavorFigures:
    """One ResourceFlavor over a range: its figures and its mean GPUs over the hours of the
    range that have its data (``hours`` of ``span_hours``)."""

    key: str
    figures: Figures
    mean_capacity: float | None
    mean_allocated: float | None
    hours: int
    span_hours: int

    @property
    def partial(self) -> bool:
        return self.hours < self.span_hours


def flavor_figures(span: HourSpan) -> list[FlavorFigures]:
    """Every flavor's figures over the hours ``span`` counts, most capacity first: two queries.

    The means divide by the hours that have the flavor's rollups, not by every hour of the
    range: a 30-day range over 7 days of data is a mean over those 7 days (the page says so).
    """
    rollups = HourlyRollup.objects.for_scope(RollupScope.FLAVOR).covering(span)
    found: dict[str, Figures] = rollups.figures(
        group_by=("key",), order_by=("-capacity_gpu_hours", "key")
    )
    hours = rollups.hours_with_data("key") if found else {}
    result = []
    for key, figures in found.items():
        counted = hours.get(key, 0)
        result.append(
            FlavorFigures(
                key=key,
                figures=figures,
                mean_capacity=figures.mean_gpus("capacity_gpu_hours", counted),
                mean_allocated=figures.mean_gpus("allocated_gpu_hours", counted),
                hours=counted,
                span_hours=span.count,
            )
        )
    return result


@dataclass
class FlavorWait:
    """Demand waiting for one flavor now against that flavor's free GPUs now.

    ``quota_bound``: pending GPUs that free GPUs of the flavor could take at once, so quota (not
    the fleet) holds them back; ``capacity_bound``: the rest, which needs capacity.
    """

    flavor: str
    pending: float = 0.0
    pending_workloads: int = 0
    free: float = 0.0

    @property
    def quota_bound(self) -> float:
        return max(0.0, min(self.pending, self.free))

    @property
    def capacity_bound(self) -> float:
        return max(0.0, self.pending - self.quota_bound)


def pending_while_free(now: FleetNow) -> list[FlavorWait]:
    """Per flavor with pending demand: the GPUs pending workloads request (the "Pending demand"
    card's workloads, ``FleetNow.pending_by_queue``) against the GPUs free in the newest windows
    (``FleetNow.free_by_flavor``: capacity no running pod holds). One query (the quotas).

    A pending workload's flavor is the one its Kueue pending message says it could not fit in
    (``quotas.now.waiting_flavor``: a workload waiting for a100 is a100 demand, even in a queue
    whose first flavor is h100); a message that names none takes the ClusterQueue's first GPU
    flavor, where Kueue tries first. This is the fleet-level signal, not a placement.
    """
    by_queue = now.pending_by_queue
    queue_ids = {pk for pk, _flavor in by_queue if pk is not None}
    quotas = gpu_quotas(Q(cluster_queue_id__in=sorted(queue_ids)))
    waits: dict[str, FlavorWait] = {}
    for (queue_id, named), (gpus, count) in by_queue.items():
        first = quotas.get(queue_id) if queue_id is not None else None
        flavor = named or (first[0].flavor_name if first else "")
        wait = waits.setdefault(flavor, FlavorWait(flavor))
        wait.pending += gpus
        wait.pending_workloads += count
    for flavor, wait in waits.items():
        wait.free = now.free_by_flavor.get(flavor, 0.0)
    return sorted(waits.values(), key=lambda wait: (-wait.quota_bound, -wait.pending, wait.flavor))
