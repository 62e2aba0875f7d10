"""Queue figures "now": the one place pages and the API read them
(docs/architecture.md "Read layer").

Admitted and pending GPUs now are counted from the Workloads the Kueue sync stored: GPUs in the
``status.admission`` of workloads holding quota (MIG instances at slices/7), and GPUs requested by
pending workloads (``holding_gpus``, ``pending_gpus``). Nominal quota now is the queue's spec, in
GPUs (``quota_gpus``: MIG quota at slices/7). Borrowed and lent now, which only Kueue's status
says, come from the newest ``ClusterQueueSample`` of each (queue, flavor, resource) no older than
``sample_freshness()``: a queue whose sync stopped shows no sample ("—"), not an old one
(docs/architecture.md "Figures": "now"). Also here: the observed eviction pace. Each takes a
``queue_filter``, a ``Q`` on the ``cluster_queue`` relation
(``Q(cluster_queue__team=team)``, ``Q(cluster_queue_id__in=ids)``; for the pace, on a
transition's ``workload__cluster_queue``), so one function serves a team, a cohort, a page of
queues or one queue, in one query (three for the pace).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import (
    Case,
    Count,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import TruncHour

from core.mig import GPU_RESOURCE, MIG_RESOURCE_PREFIX, gpu_flavor, gpu_resource_q, gpu_share
from quotas.choices import TransitionKind
from quotas.models import ClusterQueueQuota, ClusterQueueSample, Workload, WorkloadTransition
from quotas.reclaim import median

# How far back the eviction pace looks for preemptions.
PACE_LOOKBACK = timedelta(days=30)
# Preemptions read to measure that pace (the newest ones).
PACE_SAMPLE = 500
# A sample's figures a ``QueueNow`` sums, in ``QueueNow.add_values`` order.
SAMPLE_FIGURES = ("total", "borrowed", "lent", "nominal", "pending_demand")


# A Kueue pending message's clause naming the flavor it could not fit in: "insufficient unused
# quota for nvidia.com/gpu in flavor a100, 8 more needed".
_WAITS_IN_FLAVOR = re.compile(r"for (?P<resource>[\w./-]+) in flavor (?P<flavor>[\w./-]+)")


def waiting_flavor(message: str) -> str:
    """The GPU flavor a pending Workload waits for, from its Kueue pending message: the first
    flavor named for a GPU resource ("" when the message names none; the caller then takes the
    queue's first GPU flavor, where Kueue tries first)."""
    for match in _WAITS_IN_FLAVOR.finditer(message or ""):
        resource = match["resource"]
        if resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX):
            return match["flavor"]
    return ""


def sample_freshness() -> timedelta:
    """How old the newest queue sample may be and still describe "now"."""
    return timedelta(seconds=max(900, 5 * settings.GPULEDGER_COLLECT_SECONDS))


def newest_samples(
    queue_filter: Q, now: datetime, resource: str | None = GPU_RESOURCE
) -> QuerySet[ClusterQueueSample]:
    """The newest sample of each (queue, flavor, resource) within ``sample_freshness()``.

    ``resource=None`` keeps every resource (the API lists them all). Ordered by queue, flavor
    and resource. PostgreSQL keeps the newest row per group with DISTINCT ON, walking the
    ``quotas_cqsample_window`` unique index; elsewhere a correlated subquery picks it.
    """
    samples = ClusterQueueSample.objects.filter(
        queue_filter,
        sampled_at__gt=now - sample_freshness(),
        sampled_at__lte=now,
    )
    if resource is not None:
        samples = samples.filter(resource=resource)
    group = ("cluster_queue_id", "flavor_name", "resource")
    if connections[samples.db].features.can_distinct_on_fields:
        return samples.order_by(*group, "-sampled_at").distinct(*group)
    newest = (
        ClusterQueueSample.objects.filter(
            cluster_queue=OuterRef("cluster_queue"),
            flavor_name=OuterRef("flavor_name"),
            resource=OuterRef("resource"),
            sampled_at__lte=now,
        )
        .order_by("-sampled_at")
        .values("sampled_at")[:1]
    )
    return samples.filter(sampled_at=Subquery(newest)).order_by(*group)


@dataclass
class QueueNow:
    """A ClusterQueue's GPU usage now, per flavor, from its newest samples."""

    total: float = 0.0
    borrowed: float = 0.0
    lent: float = 0.0
    nominal: float = 0.0
    pending: float = 0.0
    sampled_at: datetime | None = None
    flavors: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, sample: ClusterQueueSample) -> None:
        self.add_values(
            sample.flavor_name,
            sample.sampled_at,
            *(getattr(sample, name) for name in SAMPLE_FIGURES),
        )

    def add_values(
        self,
        flavor: str,
        sampled_at: datetime,
        total: Decimal,
        borrowed: Decimal,
        lent: Decimal,
        nominal: Decimal,
        pending: Decimal | None,
    ) -> None:
        """One flavor's newest sample, as its ``SAMPLE_FIGURES`` in that order; an unknown
        pending demand (a metrics sample of a scheduler that does not export it) adds none."""
        values = {
            "total": float(total),
            "borrowed": float(borrowed),
            "lent": float(lent),
            "nominal": float(nominal),
            "pending": float(pending or 0),
        }
        self.flavors[flavor] = values
        self.total += values["total"]
        self.borrowed += values["borrowed"]
        self.lent += values["lent"]
        self.nominal += values["nominal"]
        self.pending += values["pending"]
        if self.sampled_at is None or sampled_at > self.sampled_at:
            self.sampled_at = sampled_at


def queues_now(samples: Iterable[ClusterQueueSample]) -> dict[int, QueueNow]:
    """``{queue id: QueueNow}`` from newest samples; only GPU samples count."""
    result: dict[int, QueueNow] = {}
    for sample in samples:
        if sample.resource == GPU_RESOURCE:
            result.setdefault(sample.cluster_queue_id, QueueNow()).add(sample)
    return result


def latest_samples(queue_filter: Q, now: datetime) -> dict[int, QueueNow]:
    """Each queue's GPU usage now (``QueueNow``), from its newest fresh samples: one query.

    Read as tuples, not model instances: the team list reads 1,000 queues' samples per request,
    where building (deferred-field) instances cost as much as the query (bench/pages.py).
    """
    result: dict[int, QueueNow] = {}
    rows = newest_samples(queue_filter, now).values_list(
        "cluster_queue_id", "flavor_name", "sampled_at", *SAMPLE_FIGURES
    )
    for queue_id, flavor, sampled_at, *figures in rows:
        found = result.get(queue_id)
        if found is None:
            result[queue_id] = found = QueueNow()
        found.add_values(flavor, sampled_at, *figures)
    return result


def quota_gpus(quota: ClusterQueueQuota) -> float:
    """A GPU quota's nominal in GPUs: whole GPUs as they are, a MIG ``Ng`` instance N/7 of one
    (``core.mig.gpu_share``), as the hourly nominal GPU-hours count it."""
    return float(quota.nominal) * (gpu_share(quota.resource) or 0.0)


def quota_label(quota: ClusterQueueQuota) -> str:
    """A GPU quota's flavor as a list of quotas names it: ``h100``, ``a100 mig-1g.10gb``."""
    if quota.resource == GPU_RESOURCE:
        return quota.flavor_name
    return f"{quota.flavor_name} {quota.resource.removeprefix('nvidia.com/')}"


def gpu_quotas(queue_filter: Q) -> dict[int, list[ClusterQueueQuota]]:
    """GPU quotas per queue, whole GPUs and MIG instances (``quota_gpus`` gives each in GPUs):
    whole GPUs first, each kind in flavor order, so the first is where Kueue tries a whole GPU
    first. One query."""
    result: dict[int, list[ClusterQueueQuota]] = defaultdict(list)
    mig_last = Case(
        When(resource=GPU_RESOURCE, then=Value(0)), default=Value(1), output_field=IntegerField()
    )
    for quota in (
        ClusterQueueQuota.objects.filter(queue_filter)
        .filter(gpu_resource_q())
        .order_by("cluster_queue_id", mig_last, "position", "flavor_name", "resource")
    ):
        result[quota.cluster_queue_id].append(quota)
    return result


def nominal_gpus(quotas: Iterable[ClusterQueueQuota]) -> float:
    """The nominal quota of these quotas in GPUs (``quota_gpus`` summed)."""
    return sum(quota_gpus(quota) for quota in quotas)


def nominal_by_flavor(quotas: Iterable[ClusterQueueQuota]) -> dict[str, float]:
    """Flavor → nominal quota in GPUs (whole GPUs and MIG instances of the flavor), in order."""
    result: dict[str, float] = {}
    for quota in quotas:
        result[quota.flavor_name] = result.get(quota.flavor_name, 0.0) + quota_gpus(quota)
    return result


def holding_gpus(queue_filter: Q, group_by: str) -> dict[Any, float]:
    """GPUs admitted to holding workloads, grouped by a ``cluster_queue…`` field: one query.
    This is "admitted now" on every page and in the API."""
    rows = (
        Workload.objects.holding()
        .filter(queue_filter)
        .order_by()
        .values(group_by)
        .annotate(gpus=Sum("admitted_gpus"))
    )
    return {row[group_by]: float(row["gpus"] or 0.0) for row in rows}


def holding_by_flavor(queue_filter: Q) -> dict[int, dict[str, float]]:
    """Queue id → GPU flavor (``core.mig.gpu_flavor``; "" for an admission naming none) → GPUs
    admitted to its holding workloads: "admitted now" per flavor, summed per queue and
    admission (a handful of distinct ``flavors`` per queue) in one query."""
    result: dict[int, dict[str, float]] = defaultdict(dict)
    rows = (
        Workload.objects.holding()
        .filter(queue_filter, admitted_gpus__gt=0)
        .order_by()
        .values_list("cluster_queue_id", "flavors")
        .annotate(gpus=Sum("admitted_gpus"))
    )
    for queue_id, flavors, gpus in rows:
        by_flavor = result[queue_id]
        flavor = gpu_flavor(flavors)
        by_flavor[flavor] = by_flavor.get(flavor, 0.0) + float(gpus or 0.0)
    return dict(result)


@dataclass(frozen=True)
class Demand:
    """Workloads now and their GPUs: admitted (holding quota) or pending."""

    gpus: float = 0.0
    workloads: int = 0


def holding_demand(queue_filter: Q, group_by: str) -> dict[Any, Demand]:
    """GPUs admitted to holding workloads and how many they are, grouped: one query."""
    rows = (
        Workload.objects.holding()
        .filter(queue_filter)
        .order_by()
        .values(group_by)
        .annotate(gpus=Sum("admitted_gpus"), count=Count("pk"))
    )
    return {row[group_by]: Demand(float(row["gpus"] or 0.0), row["count"]) for row in rows}


def pending_gpus(queue_filter: Q, group_by: str) -> dict[Any, Demand]:
    """GPUs requested by pending workloads and how many they are (every pending workload,
    those requesting no GPU too), grouped by a ``cluster_queue…`` field: one query. This is
    "pending now" on every page and in the API."""
    rows = (
        Workload.objects.pending()
        .filter(queue_filter)
        .order_by()
        .values(group_by)
        .annotate(gpus=Sum("requested_gpus"), count=Count("pk"))
    )
    return {row[group_by]: Demand(float(row["gpus"] or 0.0), row["count"]) for row in rows}


def eviction_pace(queue_filter: Q, now: datetime) -> dict[str, Any]:
    """Observed preemption pace in these queues over ``PACE_LOOKBACK``: three queries.

    ``admission_seconds`` is the median time from a preemption to its preemptor's next admission;
    ``per_hour`` the mean evictions (evicted + preempted rows) per hour among hours that had one.
    """
    since = now - PACE_LOOKBACK
    preemptions = list(
        WorkloadTransition.objects.filter(
            queue_filter,
            kind=TransitionKind.PREEMPTED,
            at__gte=since,
            preemptor__isnull=False,
        )
        .order_by("-at")
        .values("at", "preemptor_id")[:PACE_SAMPLE]
    )
    admissions: dict[int, list[datetime]] = defaultdict(list)
    if preemptions:
        for row in (
            WorkloadTransition.objects.filter(
                workload_id__in={p["preemptor_id"] for p in preemptions},
                kind=TransitionKind.ADMITTED,
                at__gte=min(p["at"] for p in preemptions),
            )
            .order_by("at")
            .values("workload_id", "at")
        ):
            admissions[row["workload_id"]].append(row["at"])
    delays = []
    for preemption in preemptions:
        after = [at for at in admissions[preemption["preemptor_id"]] if at >= preemption["at"]]
        if after:
            delays.append((after[0] - preemption["at"]).total_seconds())
    hourly = list(
        WorkloadTransition.objects.filter(
            queue_filter,
            kind__in=[TransitionKind.EVICTED, TransitionKind.PREEMPTED],
            at__gte=since,
        )
        .annotate(bucket=TruncHour("at"))
        .order_by()
        .values("bucket")
        .annotate(count=Count("id"))
    )
    total = sum(row["count"] for row in hourly)
    return {
        "admission_seconds": median(delays),
        "admission_samples": len(delays),
        "per_hour": total / len(hourly) if hourly else None,
        "evictions": total,
        "active_hours": len(hourly),
        "lookback_days": PACE_LOOKBACK.days,
    }
