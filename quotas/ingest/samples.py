"""Per-window queue figures from a batch: ClusterQueue samples (with inferred lending) and
cohort totals."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from decimal import Decimal

from core.mig import GPU_RESOURCE
from quotas.choices import WorkloadState
from quotas.ingest.fields import ZERO
from quotas.ingest.rows import KueueBatch, QueueSampleRow, QueueUsageRow
from quotas.ingest.workloads import PENDING_STATES


def _usage_map(rows: list[QueueUsageRow], resource: str) -> dict[str, QueueUsageRow]:
    return {row.flavor_name: row for row in rows if row.resource == resource}


def _cohort_quota(batch: KueueBatch, resource: str) -> defaultdict[tuple[str, str], Decimal]:
    """Per (cohort, flavor): the cohort's own nominal quota of ``resource`` (0 when it has none)."""
    quota_of: defaultdict[tuple[str, str], Decimal] = defaultdict(lambda: ZERO)
    for cohort_row in batch.cohorts:
        for quota in cohort_row.quotas:
            if quota.resource == resource:
                quota_of[(cohort_row.meta.name, quota.flavor_name)] += quota.nominal
    return quota_of


def cohort_totals(
    batch: KueueBatch, resource: str = GPU_RESOURCE
) -> dict[tuple[str, str], dict[str, Decimal]]:
    """Per (cohort, flavor): ``nominal`` (members' plus the cohort's own quota), ``reserved``
    (members' flavorsReservation), ``total`` (members' flavorsUsage) and ``borrowed``.

    Cohort status carries no usage, so member ClusterQueues are summed. Implicit cohorts
    count like explicit ones. A parent cohort's figures include its whole subtree.
    """
    own: dict[tuple[str, str], dict[str, Decimal]] = defaultdict(
        lambda: {"nominal": ZERO, "reserved": ZERO, "total": ZERO, "borrowed": ZERO}
    )
    for key, nominal in _cohort_quota(batch, resource).items():
        own[key]["nominal"] += nominal
    for cq in batch.cluster_queues:
        if not cq.cohort_name:
            continue
        for quota in cq.quotas:
            if quota.resource == resource:
                own[(cq.cohort_name, quota.flavor_name)]["nominal"] += quota.nominal
        usage = _usage_map(cq.usage, resource)
        for flavor, row in _usage_map(cq.reservation or cq.usage, resource).items():
            own[(cq.cohort_name, flavor)]["reserved"] += row.total
        for flavor, row in usage.items():
            own[(cq.cohort_name, flavor)]["total"] += row.total
            own[(cq.cohort_name, flavor)]["borrowed"] += row.borrowed
    parents = {row.meta.name: row.parent_name for row in batch.cohorts if row.parent_name}
    totals: dict[tuple[str, str], dict[str, Decimal]] = {}
    for (cohort, flavor), figures in own.items():
        seen = set()
        node: str | None = cohort
        while node and node not in seen:  # a parentName cycle is Kueue's error, not a hang here
            seen.add(node)
            target = totals.setdefault(
                (node, flavor), {"nominal": ZERO, "reserved": ZERO, "total": ZERO, "borrowed": ZERO}
            )
            for name, value in figures.items():
                target[name] += value
            node = parents.get(node)
    return totals


def build_queue_samples(batch: KueueBatch, resource: str = GPU_RESOURCE) -> list[QueueSampleRow]:
    """One row per ClusterQueue x flavor covering ``resource``.

    * ``total`` / ``borrowed`` from ``status.flavorsUsage`` (admitted), ``reserved`` from
      ``status.flavorsReservation`` (falls back to usage when absent).
    * ``pending_demand`` / ``pending_workloads``: pending (pending, evicted, preempted, requeued;
      not inactive) Workloads' requested amount of ``resource``, all put on the first flavor of
      the queue that covers the resource (Kueue tries flavors in order; which one a pending
      Workload would get is not knowable here).
    * ``admitted_workloads``: admitted Workloads holding ``resource`` in that flavor.
    * ``lent`` is inferred per direct cohort and flavor: what members borrow is first taken from
      the cohort's own quota, and the rest is attributed to member queues in proportion to their
      unused lendable quota, ``min(nominal - reserved, lendingLimit)`` (no lendingLimit: all of
      the unused nominal), never more than that lendable amount. Nested cohorts are not
      followed: borrowing is matched with lenders of the same cohort.
    """
    pending: dict[str, tuple[Decimal, int]] = defaultdict(lambda: (ZERO, 0))
    admitted: Counter[tuple[str, str]] = Counter()
    for row in batch.workloads:
        if row.state in PENDING_STATES and row.active and row.requests.get(resource, ZERO) > 0:
            demand, count = pending[row.cluster_queue_name]
            pending[row.cluster_queue_name] = (demand + row.requests[resource], count + 1)
        if row.state == WorkloadState.ADMITTED:
            for flavor, res in row.usage:
                if res == resource:
                    admitted[(row.cluster_queue_name, flavor)] += 1
    samples = []
    for cq in sorted(batch.cluster_queues, key=lambda row: row.meta.name):
        quotas = sorted((q for q in cq.quotas if q.resource == resource), key=lambda q: q.position)
        usage = _usage_map(cq.usage, resource)
        reservation = _usage_map(cq.reservation, resource) or usage
        flavors = [q.flavor_name for q in quotas] + sorted(
            (set(usage) | set(reservation)) - {q.flavor_name for q in quotas}
        )
        by_flavor = {q.flavor_name: q for q in quotas}
        for index, flavor in enumerate(flavors):
            quota = by_flavor.get(flavor)
            used = usage.get(flavor) or reservation.get(flavor)
            demand, count = pending[cq.meta.name] if index == 0 else (ZERO, 0)
            samples.append(
                QueueSampleRow(
                    cluster_queue_name=cq.meta.name,
                    flavor_name=flavor,
                    resource=resource,
                    total=used.total if used and flavor in usage else ZERO,
                    reserved=reservation[flavor].total if flavor in reservation else ZERO,
                    borrowed=used.borrowed if used else ZERO,
                    lent=ZERO,
                    nominal=quota.nominal if quota else ZERO,
                    borrowing_limit=quota.borrowing_limit if quota else None,
                    lending_limit=quota.lending_limit if quota else None,
                    pending_demand=demand,
                    pending_workloads=count,
                    admitted_workloads=admitted[(cq.meta.name, flavor)],
                )
            )
    _attribute_lending(batch, samples, resource)
    return samples


def _attribute_lending(batch: KueueBatch, samples: list[QueueSampleRow], resource: str) -> None:
    """Set each sample's ``lent`` (see ``build_queue_samples``)."""
    cohort_of = {cq.meta.name: cq.cohort_name for cq in batch.cluster_queues if cq.cohort_name}
    attribute_lending(samples, cohort_of, _cohort_quota(batch, resource))


def attribute_lending(
    samples: list[QueueSampleRow],
    cohort_of: Mapping[str, str],
    own_quota: Mapping[tuple[str, str], Decimal],
) -> None:
    """Set each sample's ``lent`` from its direct cohort's borrowing (``build_queue_samples``).

    ``cohort_of``: ClusterQueue name -> direct cohort (standalone queues absent);
    ``own_quota``: (cohort, flavor) -> the cohort's own nominal quota. Used for the API server's
    samples and for those made from Kueue's metrics alike, so both infer lending one way.
    """
    groups: dict[tuple[str, str], list[QueueSampleRow]] = defaultdict(list)
    for sample in samples:
        cohort = cohort_of.get(sample.cluster_queue_name)
        if cohort:
            groups[(cohort, sample.flavor_name)].append(sample)
    for key, members in groups.items():
        to_place = sum((m.borrowed for m in members), ZERO) - own_quota.get(key, ZERO)
        if to_place <= 0:
            continue
        lendable = {}
        for member in members:
            unused = max(ZERO, member.nominal - member.reserved)
            cap = member.lending_limit
            lendable[id(member)] = unused if cap is None else min(unused, max(ZERO, cap))
        pool = sum(lendable.values(), ZERO)
        if pool <= 0:
            continue
        share = min(Decimal(1), to_place / pool)
        for member in members:
            member.lent = (lendable[id(member)] * share).quantize(Decimal("0.000001"))
