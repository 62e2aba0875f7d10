"""Per-window queue figures from a batch: ClusterQueue samples (with inferred lending) and
cohort totals."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from decimal import Decimal

from core.mig import GPU_RESOURCE, gpu_share
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
      the cohort's own quota, and the rest is attributed to the members that do not borrow:
      in proportion to their unused lendable quota, ``min(nominal - reserved, lendingLimit)``
      (no lendingLimit: all of the unused nominal), then, for borrowing that stands on quota a
      lender took back, in proportion to what they can still lend (``place_borrowing``). So
      the members' lent GPUs add up to their borrowed GPUs beyond the cohort's own quota
      (docs/architecture.md "Figures"). Nested cohorts are not followed: borrowing is matched
      with lenders of the same cohort.
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


def gpu_resources(batch: KueueBatch) -> list[str]:
    """The GPU resources the batch's ClusterQueues have quota or usage of: ``nvidia.com/gpu``
    first, then each MIG resource of a known profile, by name."""
    found = {quota.resource for cq in batch.cluster_queues for quota in cq.quotas}
    for cq in batch.cluster_queues:
        found.update(row.resource for row in (*cq.usage, *cq.reservation))
    mig = sorted(r for r in found if r != GPU_RESOURCE and gpu_share(r) is not None)
    return [GPU_RESOURCE, *mig]


def build_gpu_queue_samples(batch: KueueBatch) -> list[QueueSampleRow]:
    """``build_queue_samples`` of every GPU resource (``gpu_resources``): whole GPUs and each
    MIG profile apart, in their own units; readers weigh them into GPUs with
    ``core.mig.gpu_share`` (docs/architecture.md "Figures")."""
    return [
        row for resource in gpu_resources(batch) for row in build_queue_samples(batch, resource)
    ]


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
        lenders = [member for member in members if member.borrowed <= 0]
        lent = place_borrowing(
            to_place,
            [(_unused_lendable(member), _lendable(member)) for member in lenders],
        )
        for member, amount in zip(lenders, lent, strict=True):
            member.lent = amount


def _lendable(member: QueueSampleRow) -> Decimal:
    """The part of a member's nominal quota it may lend: ``lendingLimit``, else all of it."""
    cap = member.lending_limit
    return member.nominal if cap is None else min(member.nominal, max(ZERO, cap))


def _unused_lendable(member: QueueSampleRow) -> Decimal:
    """What the member lends without taking anything from its own workloads now."""
    return min(max(ZERO, member.nominal - member.reserved), _lendable(member))


_PLACES = Decimal("0.000001")


def place_borrowing(to_place: Decimal, lenders: list[tuple[Decimal, Decimal]]) -> list[Decimal]:
    """What each lender lent of ``to_place`` borrowed GPUs; ``lenders`` is (unused lendable
    quota, lendable quota) per member that does not borrow itself.

    First, members' unused lendable quota, in proportion to it. What is left is borrowing that
    stands on quota a lender has taken back (its own workloads use it again while the borrower
    still runs, until Kueue reclaims it): it is credited to the members whose lendable quota it
    stands on, in proportion to what they can still lend (lendable quota less what they already
    lent). Each lender's share is rounded to 0.000001 GPU and the rounding rest goes to the
    largest one, so the shares add up to exactly what was placed. Borrowing beyond every
    lender's lendable quota (Kueue does not admit it) stays unattributed.
    """
    lent = [ZERO] * len(lenders)
    rest = to_place
    for stage in (0, 1):
        room = [
            max(ZERO, unused if stage == 0 else lendable - lent[i])
            for i, (unused, lendable) in enumerate(lenders)
        ]
        pool = sum(room, ZERO)
        if rest <= 0 or pool <= 0:
            continue
        placed = min(rest, pool)
        for i, amount in enumerate(room):
            lent[i] += amount * placed / pool
        rest -= placed
    rounded = [amount.quantize(_PLACES) for amount in lent]
    if rounded:
        largest = max(range(len(rounded)), key=lambda i: rounded[i])
        rounded[largest] += (to_place - max(rest, ZERO)).quantize(_PLACES) - sum(rounded, ZERO)
    return rounded
