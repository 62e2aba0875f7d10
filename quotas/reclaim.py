"""How long would a lender wait to get its lent quota back? A pure estimate, no I/O.

In a Kueue cohort, a ClusterQueue that lends unused nominal quota gets it back by preemption: when
one of its own workloads is pending and fits within its nominal quota, Kueue evicts workloads of
other member queues that are running on borrowed quota (``spec.preemption.reclaimWithinCohort``):

* ``Never`` (the Kueue default, also an empty field): no preemption. The quota comes back only when
  the borrowers finish, which nobody can predict, so the estimate says it cannot be reclaimed.
* ``LowerPriority``: only borrowers whose priority is below the pending workload's are evicted.
* ``Any``: every borrower may be evicted, whatever its priority.

Kueue picks victims lowest priority first and, within a priority, the most recently admitted
first; all victims a pending workload needs are evicted in the same scheduling cycle. The quota is
free once the victims' pods have terminated, so each eviction costs at least the pods'
``terminationGracePeriodSeconds`` (Kubernetes default 30 s).

The time comes from what this cohort has been seen doing, best evidence first:

1. ``preemption_to_admission_seconds``: the observed median time from a preemption to the
   admission of its preemptor. It already contains a grace period, so the estimate is
   ``max(observed median, longest victim grace)``.
2. ``evictions_per_hour``: the observed eviction pace in hours that had evictions. The first victim
   goes at once and the others follow at that pace: ``grace + (victims - 1) × 3600 / pace``.
3. Nothing observed: ``grace + SCHEDULING_CYCLE_SECONDS`` (one pass of Kueue's scheduler).

When the eligible borrowers hold less than the lent amount, the rest comes back only as
higher-priority borrowers finish: the estimate is *partial* and its seconds cover the reclaimable
part only. Fair-sharing preemption strategies change victim order but not this arithmetic; this is
a planning figure for a page, not a promise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

DEFAULT_TERMINATION_GRACE_SECONDS = 30.0
# Once the victims' quota is released Kueue admits the preemptor on its next scheduler pass. In the
# Kueue fixture scenario A5 is preempted at 06:00:11 and its preemptor C1 admitted at 06:00:42: the
# 30 s grace plus about a second. A few seconds leaves room for a busy scheduler.
SCHEDULING_CYCLE_SECONDS = 5.0


class ReclaimStatus:
    """What kind of answer an estimate is."""

    NOTHING_LENT = "nothing_lent"
    CANNOT = "cannot"
    FULL = "full"
    PARTIAL = "partial"
    UNATTRIBUTED = "unattributed"


class PaceBasis:
    """Which observation the time came from."""

    OBSERVED_ADMISSION = "observed_admission"
    OBSERVED_RATE = "observed_rate"
    GRACE_ONLY = "grace_only"
    NONE = "none"


@dataclass(frozen=True)
class Borrower:
    """A workload running on borrowed quota, as a preemption candidate."""

    name: str
    priority: int
    gpus: float
    grace_seconds: float = DEFAULT_TERMINATION_GRACE_SECONDS
    admitted_at: datetime | None = None


@dataclass(frozen=True)
class ReclaimInputs:
    """Everything the estimate reads; the page shows each of these next to the answer."""

    lent_gpus: float
    policy: str
    borrowers: Sequence[Borrower] = ()
    pending_priorities: Sequence[int] = ()
    # Priority to judge by when the lender has nothing pending: its highest priority seen.
    reference_priority: int | None = None
    preemption_to_admission_seconds: float | None = None
    evictions_per_hour: float | None = None


@dataclass(frozen=True)
class ReclaimEstimate:
    status: str
    seconds: float | None
    reclaimable_gpus: float
    unreclaimable_gpus: float
    victims: tuple[Borrower, ...] = ()
    basis: str = PaceBasis.NONE
    judged_priority: int | None = None
    grace_seconds: float | None = None
    notes: tuple[str, ...] = field(default=())


def _eligible(policy: str, borrowers: Sequence[Borrower], priority: int) -> list[Borrower]:
    if policy == "Any":
        return list(borrowers)
    # LowerPriority, and LowerOrNewerEqualPriority judged conservatively (the pending workload's
    # creation time is unknown here, so equal priorities are not counted).
    return [borrower for borrower in borrowers if borrower.priority < priority]


def _victim_order(borrower: Borrower) -> tuple[int, float]:
    # Lowest priority first; within a priority the most recently admitted first.
    admitted = borrower.admitted_at.timestamp() if borrower.admitted_at else float("inf")
    return (borrower.priority, -admitted)


def estimate_reclaim(inputs: ReclaimInputs) -> ReclaimEstimate:
    """Estimate how long reclaiming ``inputs.lent_gpus`` would take (see the module docstring)."""
    lent = max(0.0, float(inputs.lent_gpus))
    if lent <= 0:
        return ReclaimEstimate(
            status=ReclaimStatus.NOTHING_LENT,
            seconds=0.0,
            reclaimable_gpus=0.0,
            unreclaimable_gpus=0.0,
        )
    policy = inputs.policy or "Never"
    if policy == "Never":
        return ReclaimEstimate(
            status=ReclaimStatus.CANNOT,
            seconds=None,
            reclaimable_gpus=0.0,
            unreclaimable_gpus=lent,
            notes=("reclaimWithinCohort is Never: the quota returns only as borrowers finish.",),
        )
    if not inputs.borrowers:
        return ReclaimEstimate(
            status=ReclaimStatus.UNATTRIBUTED,
            seconds=None,
            reclaimable_gpus=0.0,
            unreclaimable_gpus=lent,
            notes=("No borrowing workload is known for this flavor yet.",),
        )

    if inputs.pending_priorities:
        priority = max(inputs.pending_priorities)
    elif inputs.reference_priority is not None:
        priority = inputs.reference_priority
    else:
        priority = 0
    eligible = sorted(_eligible(policy, inputs.borrowers, priority), key=_victim_order)

    victims: list[Borrower] = []
    reclaimed = 0.0
    for borrower in eligible:
        if reclaimed >= lent:
            break
        victims.append(borrower)
        reclaimed += borrower.gpus
    reclaimable = min(lent, reclaimed)
    unreclaimable = lent - reclaimable
    if not victims:
        return ReclaimEstimate(
            status=ReclaimStatus.PARTIAL,
            seconds=None,
            reclaimable_gpus=0.0,
            unreclaimable_gpus=lent,
            judged_priority=priority,
            notes=(f"Every borrower has priority ≥ {priority}: none can be preempted.",),
        )

    grace = max(borrower.grace_seconds for borrower in victims)
    observed = inputs.preemption_to_admission_seconds
    rate = inputs.evictions_per_hour
    if observed is not None and observed >= 0:
        seconds = max(float(observed), grace)
        basis = PaceBasis.OBSERVED_ADMISSION
    elif rate is not None and rate > 0:
        seconds = grace + (len(victims) - 1) * 3600.0 / rate
        basis = PaceBasis.OBSERVED_RATE
    else:
        seconds = grace + SCHEDULING_CYCLE_SECONDS
        basis = PaceBasis.GRACE_ONLY
    return ReclaimEstimate(
        status=ReclaimStatus.FULL if unreclaimable <= 1e-9 else ReclaimStatus.PARTIAL,
        seconds=seconds,
        reclaimable_gpus=reclaimable,
        unreclaimable_gpus=max(0.0, unreclaimable),
        victims=tuple(victims),
        basis=basis,
        judged_priority=priority,
        grace_seconds=grace,
    )


def termination_grace_seconds(pod_sets: object) -> float:
    """The longest ``terminationGracePeriodSeconds`` in a workload's pod sets, else 30 s.

    Pod sets are stored as a list of dicts; the field may sit at the top of a pod set or inside its
    pod template (``template.spec``), so nested dicts are searched, a few levels deep.
    """
    found: list[float] = []

    def walk(node: object, depth: int) -> None:
        if depth > 4:
            return
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("terminationGracePeriodSeconds", "termination_grace_period_seconds"):
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        if value >= 0:
                            found.append(float(value))
                else:
                    walk(value, depth + 1)
        elif isinstance(node, list):
            for item in node:
                walk(item, depth + 1)

    walk(pod_sets, 0)
    return max(found) if found else DEFAULT_TERMINATION_GRACE_SECONDS


def median(values: Sequence[float]) -> float | None:
    """The median of ``values``, or None when there are none."""
    ordered = sorted(values)
    count = len(ordered)
    if count == 0:
        return None
    middle = count // 2
    if count % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
