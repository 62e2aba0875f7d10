"""A small Kueue scheduler that moves the simulated fleet forward: admission, borrowing, preemption.

Each step finishes the workloads that ran their time; evicts a borrower once the lender's job it
yields to (``SimWorkload.evicted_by``) has arrived and waits (Kueue's ``reclaimWithinCohort``);
then admits pending workloads by priority and age: within the ClusterQueue's nominal quota, else
what the cohort can lend within the borrowing and lending limits, and only where concrete GPUs
are free (pods packed onto as few nodes as possible; MIG workloads need only free instances). An
evicted workload waits out a requeue backoff before it is considered again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from demo.simulation.scenario import PRIORITY_CLASSES, TEAMS, SimFleet, SimGpu, SimWorkload

# Kueue's backoff before a preempted workload is considered again (its requeueState.requeueAt).
REQUEUE_BACKOFF = timedelta(hours=1)


def _quota(team: str, flavor: str) -> tuple[int, int | None, int | None]:
    """(nominal, borrowing limit, lending limit) of the team's queue in the flavor."""
    return TEAMS[team][2].get(flavor, (0, 0, 0))


def quota_shortfall(fleet: SimFleet, workload: SimWorkload) -> int:
    """GPUs the workload needs beyond its queue's free nominal quota and what the cohort can
    lend it within the borrowing and lending limits: Kueue's "N more needed"; 0 when quota
    admits it (MIG workloads need only free instances)."""
    if workload.flavor == "a100-mig":
        return 0
    team, flavor = workload.team, workload.flavor
    nominal, borrow_limit, _ = _quota(team, flavor)
    used = fleet.held_gpus(team, flavor)
    cohort = TEAMS[team][1]
    lendable = 0
    for other, (_, other_cohort, quotas) in TEAMS.items():
        if other == team or other_cohort != cohort or flavor not in quotas:
            continue
        o_nominal, _, o_lend = quotas[flavor]
        unused = max(0, o_nominal - fleet.held_gpus(other, flavor))
        lendable += unused if o_lend is None else min(unused, o_lend)
    borrowed_now = sum(
        max(0, fleet.held_gpus(o, flavor) - _quota(o, flavor)[0])
        for o, (_, oc, _) in TEAMS.items()
        if oc == cohort and o != team
    )
    # What the queue already borrows counts against both the cohort's offer and its limit.
    borrowing = max(0, used - nominal)
    can_borrow = max(0, lendable - borrowed_now - borrowing)
    if borrow_limit is not None:
        can_borrow = min(can_borrow, max(0, borrow_limit - borrowing))
    return max(0, workload.gpus - max(0, nominal - used) - can_borrow)


def _can_admit(fleet: SimFleet, workload: SimWorkload) -> bool:
    """Whether quota (own, else borrowed within the cohort) and free GPUs admit the workload."""
    if quota_shortfall(fleet, workload) > 0:
        return False
    return _free_gpus(fleet, workload) is not None


def waiting_order(fleet: SimFleet, now: datetime) -> list[SimWorkload]:
    """The workloads waiting for quota at ``now``, in the order admission considers them
    (priority, then age): each ClusterQueue's pending queue, as Kueue's visibility API lists it."""
    pending = [
        w
        for w in fleet.workloads
        if w.created <= now and w.admitted_at is None and w.finished_at is None
    ]
    pending.sort(key=lambda w: (-PRIORITY_CLASSES[w.priority_class], w.created, w.key))
    return pending


def _free_gpus(fleet: SimFleet, workload: SimWorkload) -> dict[str, list[SimGpu]] | None:
    """Concrete GPUs for each pod (packing pods onto as few nodes as possible), or None."""
    placement: dict[str, list[SimGpu]] = {}
    taken: set[int] = set()
    for pod in workload.pod_names():
        chosen: list[SimGpu] | None = None
        for node in fleet.nodes:
            if node.flavor != workload.flavor:
                continue
            if workload.time_slice_gpu:
                shared = [g for g in node.gpus if g.time_sliced and len(g.holders) < 2]
                if shared:
                    chosen = shared[:1]
                    break
                continue
            free = [
                g
                for g in node.gpus
                if not g.holders
                and not g.time_sliced
                and id(g) not in taken
                and g.resource == workload.resource
            ]
            if len(free) >= workload.gpus_per_pod:
                chosen = free[: workload.gpus_per_pod]
                break
        if chosen is None:
            return None
        taken.update(id(g) for g in chosen)
        placement[pod] = chosen
    return placement


def _event(fleet: SimFleet, workload: SimWorkload, kind: str, at: datetime, **extra: str) -> None:
    """Record a Kueue event in the workload's history; the Kueue side of the fleet changed."""
    workload.history.append({"kind": kind, "at": at, **extra})
    fleet.changed = True


def _release(workload: SimWorkload) -> None:
    """Free the workload's GPUs; its pods are gone."""
    for pod, gpus in workload.placement.items():
        for gpu in gpus:
            key = workload.holder(pod)
            if key in gpu.holders:
                gpu.holders.remove(key)
    workload.placement = {}
    workload.pod_started = {}


def advance(fleet: SimFleet, now: datetime) -> None:
    """Move the world to ``now``: finish, preempt, admit, start pods."""
    step = fleet.step
    for workload in fleet.workloads:
        if workload.holding and not workload.ghost and workload.pod_started:
            workload.ran_seconds += step
            if workload.ran_seconds >= workload.run_seconds:
                workload.finished_at = now
                _event(fleet, workload, "finished", now)
                _release(workload)
    # Reclaim: the lender's job arrives and evicts the borrower holding its quota.
    for workload in fleet.workloads:
        victim_of = workload.evicted_by
        if (
            victim_of is not None
            and workload.holding
            and workload.evict_at is None
            and victim_of.created <= now
            and victim_of.admitted_at is None
        ):
            workload.evict_at = now
            workload.admitted_at = None
            _event(fleet, workload, "evicted", now, preemptor=victim_of.key)
            _release(workload)
            workload.attempt += 1
    for workload in waiting_order(fleet, now):
        # A requeued workload waits out its backoff before it is considered again.
        if workload.evict_at is not None and now < workload.evict_at + REQUEUE_BACKOFF:
            continue
        if not _can_admit(fleet, workload):
            continue
        placement = _free_gpus(fleet, workload)
        if placement is None:
            continue
        workload.admitted_at = now
        _event(fleet, workload, "admitted", now)
        if workload.ghost:
            continue
        workload.placement = placement
        for pod, gpus in placement.items():
            for gpu in gpus:
                gpu.holders.append(workload.holder(pod))
            workload.pod_started[pod] = now
    fleet.now = now
