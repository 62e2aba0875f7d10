"""Who borrows from whom inside a cohort over a range: lender → borrower GPU-hours.

Built from the figures the chargeback API reports per ClusterQueue and hour (ClusterQueue-scope
rollups of ``borrowed_gpu_hours`` and ``lent_gpu_hours``, read through the read layer), per
flavor: in each hour, what the flavor's borrowers borrowed is split over its lenders in
proportion to what each lent, which is how the sync attributes lending in the first place
(``quotas.ingest.samples``: borrowing beyond the cohort's own pool goes to members in proportion
to their unused lendable quota). Borrowing that no member lent came from the cohort's own pool.
The flows of a range therefore add up to each member's borrowed GPU-hours, and to its lent
GPU-hours except in hours when a queue both borrowed and lent (it never lends to itself).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from core.ranges import HourSpan
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from quotas.models import ClusterQueue

POOL = 0  # the lender id of the cohort's own pool (no member lent it)
_EPSILON = 1e-9


@dataclass
class BorrowingFlows:
    """GPU-hours from each lender (a member queue id, or ``POOL``) to each borrower queue id."""

    hours: dict[tuple[int, int], float] = field(default_factory=dict)

    @property
    def lenders(self) -> list[int]:
        return self._ranked(0)

    @property
    def borrowers(self) -> list[int]:
        return self._ranked(1)

    def _ranked(self, side: int) -> list[int]:
        totals: dict[int, float] = defaultdict(float)
        for pair, value in self.hours.items():
            totals[pair[side]] += value
        return sorted(totals, key=lambda key: (key == POOL, -totals[key], key))

    def total_from(self, lender: int) -> float:
        return sum(v for (source, _), v in self.hours.items() if source == lender)

    def total_to(self, borrower: int) -> float:
        return sum(v for (_, target), v in self.hours.items() if target == borrower)


def borrowing_flows(members: list[ClusterQueue], span: HourSpan) -> BorrowingFlows:
    """Lender → borrower GPU-hours among ``members`` over the hours ``span`` counts: one query."""
    flows: dict[tuple[int, int], float] = defaultdict(float)
    series = (
        HourlyRollup.objects.for_scope(RollupScope.CLUSTER_QUEUE)
        .filter(cluster_queue_id__in=[queue.pk for queue in members])
        .series(
            span,
            ("flavor", "cluster_queue_id"),
            names=("borrowed_gpu_hours", "lent_gpu_hours"),
        )
    )
    by_flavor: dict[str, list[tuple[int, list]]] = defaultdict(list)
    for (flavor, queue_id), hours in series.items():
        by_flavor[flavor].append((queue_id, hours))
    for queues in by_flavor.values():
        for index in range(span.count):
            borrowed = {
                queue_id: hours[index].borrowed_gpu_hours
                for queue_id, hours in queues
                if hours[index] is not None and hours[index].borrowed_gpu_hours > _EPSILON
            }
            if not borrowed:
                continue
            lent = {
                queue_id: hours[index].lent_gpu_hours
                for queue_id, hours in queues
                if hours[index] is not None and hours[index].lent_gpu_hours > _EPSILON
            }
            total_borrowed = sum(borrowed.values())
            for borrower, amount in borrowed.items():
                # A queue never lends to itself: an hour in which it both borrowed and lent (in
                # different minutes) splits its borrowing over the other lenders only.
                others = {lender: given for lender, given in lent.items() if lender != borrower}
                total_lent = sum(others.values())
                # Members lent at most what was borrowed; the rest came from the cohort's pool.
                from_members = min(total_lent, total_borrowed)
                share = amount / total_borrowed
                for lender, given in others.items():
                    flows[(lender, borrower)] += from_members * (given / total_lent) * share
                if total_borrowed > from_members:
                    flows[(POOL, borrower)] += (total_borrowed - from_members) * share
    return BorrowingFlows({pair: value for pair, value in flows.items() if value > _EPSILON})
