"""What a quota change would do, from the latest synced state: pure functions, no I/O.

GPU quota only (the resource workloads are counted in here); other resources show before/after.

* **Borrowers.** Kueue does not record which workload borrows; like the rest of GPU Ledger we
  attribute it by admission order: walking a flavor's admitted workloads oldest first, the ones
  whose admission took the queue's usage above nominal quota are the borrowers. Lowering nominal
  quota evicts nothing (Kueue #5176): those workloads keep running, now on borrowed quota, and
  cohort members may reclaim them under their ``reclaimWithinCohort`` (``Any``: always;
  ``LowerPriority``: by a pending workload of higher priority; ``Never``: not at all).
* **Pending that would fit.** Why a workload waits now is Kueue's answer, said as every page
  says it (``quotas.pending``): a workload whose message names a shortfall is short now, and
  the change admits it when it adds at least that shortfall to the room (``admissible``) of a
  flavor Kueue tried. The others, in Kueue's queue order, take the first flavor (in the queue's
  flavor order, among those its node selector allows) with room as Kueue counts it; one that
  fits already under the current quota waits for something else (backoff, admission checks,
  topology): the page says so rather than promise it.
* **Lendable.** A member lends ``lendingLimit`` when set, else all its nominal quota.
* **Reclaim time.** ``quotas.reclaim`` for what the queue lends now, with the lendable quota before
  and after.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from quotas.pending import PendingReason
from quotas.reclaim import Borrower, ReclaimEstimate, ReclaimInputs, estimate_reclaim

NO_EVICTION_NOTE = (
    "Lowering a nominal quota does not evict admitted workloads: Kueue keeps them running. "
    "Those above the new quota count as borrowing, and cohort members may reclaim them by "
    "preemption under their reclaimWithinCohort policy."
)


@dataclass(frozen=True)
class Limits:
    nominal: float
    borrowing_limit: float | None = None
    lending_limit: float | None = None

    @property
    def lendable(self) -> float:
        return self.nominal if self.lending_limit is None else min(self.lending_limit, self.nominal)


@dataclass(frozen=True)
class WorkloadView:
    name: str
    priority: int
    gpus: float
    flavor: str = ""
    admitted_at: datetime | None = None
    grace_seconds: float = 30.0
    # Flavors its node selector allows (None: any).
    flavors: tuple[str, ...] | None = None
    # A pending workload's reason now (``quotas.pending``): Kueue's shortfalls.
    reason: PendingReason = PendingReason()


@dataclass(frozen=True)
class MemberView:
    """Another ClusterQueue of the cohort."""

    name: str
    policy: str
    limits: Mapping[str, Limits]
    used: Mapping[str, float]
    pending_top_priority: int | None = None
    borrowers: Sequence[WorkloadView] = ()


@dataclass
class WhatIfInputs:
    queue: str
    cohort: str
    flavor_order: Sequence[str]
    before: Mapping[str, Limits]
    after: Mapping[str, Limits]
    admitted: Sequence[WorkloadView] = ()
    pending: Sequence[WorkloadView] = ()
    members: Sequence[MemberView] = ()
    pool: Mapping[str, float] = field(default_factory=dict)
    lent_now: Mapping[str, float] = field(default_factory=dict)
    policy: str = ""
    admission_seconds: float | None = None
    evictions_per_hour: float | None = None


def used_by_flavor(admitted: Sequence[WorkloadView]) -> dict[str, float]:
    used: dict[str, float] = {}
    for workload in admitted:
        used[workload.flavor] = used.get(workload.flavor, 0.0) + workload.gpus
    return used


def borrowers(admitted: Sequence[WorkloadView], limits: Mapping[str, Limits]) -> list[dict]:
    """Admitted workloads above nominal, in admission order, with the GPUs above it."""
    found = []
    running: dict[str, float] = {}
    ordered = sorted(
        admitted,
        key=lambda w: (w.admitted_at.timestamp() if w.admitted_at else float("inf"), w.name),
    )
    for workload in ordered:
        nominal = limits[workload.flavor].nominal if workload.flavor in limits else 0.0
        before = running.get(workload.flavor, 0.0)
        after = before + workload.gpus
        running[workload.flavor] = after
        above = max(0.0, after - nominal) - max(0.0, before - nominal)
        if above > 1e-9:
            found.append(
                {
                    "name": workload.name,
                    "flavor": workload.flavor,
                    "gpus": workload.gpus,
                    "above_nominal": above,
                    "priority": workload.priority,
                    "admitted_at": workload.admitted_at.isoformat()
                    if workload.admitted_at
                    else None,
                }
            )
    return found


def reclaimers(priority: int, members: Sequence[MemberView]) -> list[dict]:
    """Cohort members that may preempt a borrower of this priority, and whether they would now."""
    found = []
    for member in members:
        policy = member.policy or "Never"
        if policy == "Never":
            continue
        pending = member.pending_top_priority
        if policy == "Any":
            now = pending is not None
        else:
            now = pending is not None and pending > priority
        found.append({"queue": member.name, "policy": policy, "pending_now": now})
    return found


def admissible(
    inputs: WhatIfInputs, limits: Mapping[str, Limits], used: Mapping[str, float], flavor: str
) -> float:
    """GPUs of ``flavor`` the queue could still admit, as Kueue counts them.

    A member's guaranteed part is ``nominal - lendable``; the cohort has its pool plus every
    member's lendable quota, minus what members use beyond their guaranteed parts. The queue
    gets its own unused guaranteed quota plus what the cohort has left, capped by
    ``nominal + borrowingLimit`` (fixture README "GPUs still admissible now").
    """
    quota = limits.get(flavor)
    if quota is None:
        return 0.0
    in_use = used.get(flavor, 0.0)
    if not inputs.cohort:
        return max(0.0, quota.nominal - in_use)
    guaranteed = quota.nominal - quota.lendable
    cohort_left = (
        float(inputs.pool.get(flavor, 0.0)) + quota.lendable - max(0.0, in_use - guaranteed)
    )
    for member in inputs.members:
        theirs = member.limits.get(flavor)
        if theirs is None:
            continue
        their_guaranteed = theirs.nominal - theirs.lendable
        cohort_left += theirs.lendable - max(0.0, member.used.get(flavor, 0.0) - their_guaranteed)
    room = max(0.0, guaranteed - in_use) + max(0.0, cohort_left)
    if quota.borrowing_limit is not None:
        room = min(room, max(0.0, quota.nominal + quota.borrowing_limit - in_use))
    return max(0.0, room)


def pending_fit(
    inputs: WhatIfInputs, limits: Mapping[str, Limits], now: Mapping[str, Limits] | None = None
) -> dict[str, str]:
    """Pending workload name -> "nominal" / "borrowing" for those that would be admitted under
    ``limits``, in queue order.

    A workload Kueue says is short (``WorkloadView.reason``) fits when ``limits`` give a flavor
    it tried at least the shortfall more room than the quota ``now`` (the current one; under
    the current quota itself it does not fit). The others take the first flavor (queue order,
    node selector allowing) with room.
    """
    used = used_by_flavor(inputs.admitted)
    current = inputs.before if now is None else now
    fits: dict[str, str] = {}
    for workload in inputs.pending:
        if workload.reason.quota_bound:
            more = {
                flavor: admissible(inputs, limits, used, flavor)
                - admissible(inputs, current, used, flavor)
                for flavor in inputs.flavor_order
            }
            chosen = workload.reason.fits_with(more)
            candidates = [chosen] if chosen else []
        else:
            candidates = [
                flavor
                for flavor in inputs.flavor_order
                if workload.flavors is None or flavor in workload.flavors
            ]
        for flavor in candidates:
            if (
                workload.reason.quota_bound
                or workload.gpus <= admissible(inputs, limits, used, flavor) + 1e-9
            ):
                used[flavor] = used.get(flavor, 0.0) + workload.gpus
                within = flavor in limits and used[flavor] <= limits[flavor].nominal + 1e-9
                fits[workload.name] = "nominal" if within else "borrowing"
                break
    return fits


def _pending_rows(inputs: WhatIfInputs) -> list[dict[str, Any]]:
    """The preview's pending rows: now (Kueue's reason, as every page says it) and after."""
    fit_before = pending_fit(inputs, inputs.before)
    fit_after = pending_fit(inputs, inputs.after)
    used = used_by_flavor(inputs.admitted)
    more = {
        flavor: admissible(inputs, inputs.after, used, flavor)
        - admissible(inputs, inputs.before, used, flavor)
        for flavor in inputs.flavor_order
    }
    return [
        {
            "name": w.name,
            "gpus": w.gpus,
            "priority": w.priority,
            "reason": w.reason.text,
            "before": fit_before.get(w.name, ""),
            "after": fit_after.get(w.name, ""),
            "still_short": w.reason.still_short(more) if w.reason.quota_bound else None,
        }
        for w in inputs.pending
    ]


def _estimate(
    inputs: WhatIfInputs, flavor: str, lent: float
) -> ReclaimEstimate:  # the queue as a lender
    candidates = [
        Borrower(
            name=f"{member.name}/{w.name}",
            priority=w.priority,
            gpus=w.gpus,
            grace_seconds=w.grace_seconds,
            admitted_at=w.admitted_at,
        )
        for member in inputs.members
        for w in member.borrowers
        if w.flavor == flavor
    ]
    return estimate_reclaim(
        ReclaimInputs(
            lent_gpus=lent,
            policy=inputs.policy,
            borrowers=candidates,
            pending_priorities=[w.priority for w in inputs.pending],
            reference_priority=max((w.priority for w in inputs.admitted), default=None),
            preemption_to_admission_seconds=inputs.admission_seconds,
            evictions_per_hour=inputs.evictions_per_hour,
        )
    )


def _estimate_dict(estimate: ReclaimEstimate, lent: float) -> dict[str, Any]:
    return {
        "lent": lent,
        "status": estimate.status,
        "seconds": estimate.seconds,
        "reclaimable": estimate.reclaimable_gpus,
        "unreclaimable": estimate.unreclaimable_gpus,
        "notes": list(estimate.notes),
    }


def what_if(inputs: WhatIfInputs) -> dict[str, Any]:
    """The preview summary (JSON-able): borrowers, pending that fit, lendable, reclaim."""
    before_borrowers = borrowers(inputs.admitted, inputs.before)
    after_borrowers = borrowers(inputs.admitted, inputs.after)
    was = {row["name"] for row in before_borrowers}
    for row in after_borrowers:
        row["new"] = row["name"] not in was
        row["reclaimable_by"] = reclaimers(row["priority"], inputs.members) if inputs.cohort else []
    pending_rows = _pending_rows(inputs)
    used = used_by_flavor(inputs.admitted)
    room = {
        flavor: {
            "before": admissible(inputs, inputs.before, used, flavor),
            "after": admissible(inputs, inputs.after, used, flavor),
        }
        for flavor in inputs.flavor_order
    }
    lendable = []
    reclaim = []
    for flavor in inputs.flavor_order:
        old, new = inputs.before.get(flavor), inputs.after.get(flavor)
        if old is None or new is None:
            continue
        if inputs.cohort:
            lendable.append(
                {
                    "flavor": flavor,
                    "before": old.lendable,
                    "after": new.lendable,
                    "delta": new.lendable - old.lendable,
                }
            )
        lent_before = float(inputs.lent_now.get(flavor, 0.0))
        room_after = max(0.0, min(new.lendable, new.nominal - used.get(flavor, 0.0)))
        lent_after = min(lent_before, room_after)
        if lent_before > 0:
            reclaim.append(
                {
                    "flavor": flavor,
                    "before": _estimate_dict(_estimate(inputs, flavor, lent_before), lent_before),
                    "after": _estimate_dict(_estimate(inputs, flavor, lent_after), lent_after),
                }
            )
    members_lendable = {
        flavor: sum(m.limits[flavor].lendable for m in inputs.members if flavor in m.limits)
        + float(inputs.pool.get(flavor, 0.0))
        for flavor in inputs.flavor_order
    }
    return {
        "queue": inputs.queue,
        "cohort": inputs.cohort,
        "used": used,
        "borrowers_before": before_borrowers,
        "borrowers_after": after_borrowers,
        "pending": pending_rows,
        "admissible": room,
        "lendable": lendable,
        "cohort_lendable": {
            flavor: {
                "before": total
                + (inputs.before[flavor].lendable if flavor in inputs.before else 0),
                "after": total + (inputs.after[flavor].lendable if flavor in inputs.after else 0),
            }
            for flavor, total in members_lendable.items()
        }
        if inputs.cohort
        else {},
        "reclaim": reclaim,
        "note": NO_EVICTION_NOTE,
    }
