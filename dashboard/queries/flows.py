"""Who borrows from whom inside a cohort over a range: lender → borrower GPU-hours.

Built from the figures the chargeback API reports per ClusterQueue and hour (ClusterQueue-scope
rollups of ``borrowed_gpu_hours`` and ``lent_gpu_hours``, read through the read layer: the same
hours, the open hour never), per flavor. The sync credits every borrowed GPU beyond the
cohort's own quota to one lending member (``quotas.ingest.samples.place_borrowing``), so in
each hour the members' lent GPU-hours add up to their borrowed ones less the cohort's own quota.
Each hour's borrowing is split over its lenders so that every lender's row adds up to what it
lent and every borrower's column to what it borrowed, a queue never lending to itself (it may
borrow and lend in different minutes of one hour): ``fit_matrix``. Borrowing no member lent
came from the cohort's own quota. Over a range the table therefore adds up to exactly the
members' borrowed and lent GPU-hours of the chargeback (docs/architecture.md "Figures").
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
            borrowed = _positive(queues, index, "borrowed_gpu_hours")
            if borrowed:
                _hour_flows(borrowed, _positive(queues, index, "lent_gpu_hours"), flows)
    return BorrowingFlows({pair: value for pair, value in flows.items() if value > _EPSILON})


def _positive(queues: list[tuple[int, list]], index: int, name: str) -> dict[int, float]:
    """queue id → the figure ``name`` in the hour ``index``, for the queues where it is > 0."""
    found = {}
    for queue_id, hours in queues:
        value = getattr(hours[index], name) if hours[index] is not None else 0.0
        if value > _EPSILON:
            found[queue_id] = value
    return found


def _hour_flows(
    borrowed: dict[int, float], lent: dict[int, float], flows: dict[tuple[int, int], float]
) -> None:
    """One hour and flavor: add to ``flows`` a lender → borrower split that adds up to each
    member's lent and borrowed GPU-hours (module docstring)."""
    total_borrowed, total_lent = sum(borrowed.values()), sum(lent.values())
    from_members = min(total_borrowed, total_lent)
    for borrower, amount in borrowed.items():
        # Borrowing no member lent: the cohort's own quota (or, in hours recorded before lending
        # was attributed in full, no recorded lender).
        if total_borrowed > from_members:
            flows[(POOL, borrower)] += (total_borrowed - from_members) * amount / total_borrowed
    if from_members <= _EPSILON:
        return
    columns = {queue: amount * from_members / total_borrowed for queue, amount in borrowed.items()}
    rows = {queue: amount * from_members / total_lent for queue, amount in lent.items()}
    for (lender, borrower), value in fit_matrix(rows, columns).items():
        flows[(lender, borrower)] += value


def fit_matrix(
    rows: dict[int, float], columns: dict[int, float], *, rounds: int = 2000
) -> dict[tuple[int, int], float]:
    """A lender → borrower matrix with the given row sums (lent) and column sums (borrowed),
    both adding up to the same total, and nothing on the diagonal (a queue never lends to
    itself).

    In each sample a queue either borrows or lends, so a queue's lent and borrowed GPU-hours of
    an hour add up to at most the hour's total, and such a matrix exists. When they add up to
    the total exactly (the queue borrowed in some minutes and lent in all the others) the
    matrix is unique: the queue lent to every borrower what it borrowed and borrowed from every
    lender what it lent. Otherwise it is fitted by iterative proportional fitting from the
    proportional split, until every column is within 1e-7 × the hour's total of its sum
    (``rounds`` bounds it),
    ending on a row pass, so each lender's total is what it lent.
    """
    total = sum(columns.values())
    tolerance = 1e-9 * max(total, 1.0)
    for queue in set(rows) | set(columns):
        if rows.get(queue, 0.0) + columns.get(queue, 0.0) >= total - tolerance:
            tight = {(queue, b): v for b, v in columns.items() if b != queue}
            tight.update({(lender, queue): v for lender, v in rows.items() if lender != queue})
            return tight
    cells = {
        (lender, borrower): given * taken / total
        for lender, given in rows.items()
        for borrower, taken in columns.items()
        if lender != borrower
    }
    for _ in range(rounds):
        for target, side in ((columns, 1), (rows, 0)):
            sums: dict[int, float] = defaultdict(float)
            for pair, value in cells.items():
                sums[pair[side]] += value
            for pair in cells:
                key = pair[side]
                if sums[key] > 0:
                    cells[pair] *= target[key] / sums[key]
        taken_sums: dict[int, float] = defaultdict(float)
        for (_, borrower), value in cells.items():
            taken_sums[borrower] += value
        if max(abs(taken_sums[b] - t) for b, t in columns.items()) <= 100 * tolerance:
            break
    return cells
