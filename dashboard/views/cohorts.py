"""Cohort pages: every cohort now, and one cohort's members, borrowers and reclaim estimates."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from core.mig import GPU_RESOURCE
from core.ranges import TimeRange
from core.ratios import allocation_rate
from dashboard.access import allowed_team_ids, get_cohort_for_user, sees_team
from dashboard.decorators import dashboard_page
from dashboard.frame import paginate, plural, range_query, stat
from dashboard.queries import cohorts as queries
from dashboard.queries.flows import POOL, BorrowingFlows, borrowing_flows
from dashboard.templatetags.formatting import figure
from ledger.range_figures import Figures
from quotas.access import ANOTHER_TEAMS_QUEUE, ANOTHER_TEAMS_WORKLOAD, other_members_label
from quotas.models import ClusterQueue, Cohort, Workload
from quotas.now import (
    QueueNow,
    eviction_pace,
    gpu_quotas,
    holding_gpus,
    latest_samples,
    nominal_gpus,
)
from quotas.reclaim import (
    Borrower,
    ReclaimEstimate,
    ReclaimInputs,
    ReclaimStatus,
    estimate_reclaim,
    termination_grace_seconds,
)
from quotas.words import list_words, words_for


@dashboard_page(uses_range=False)
def cohort_list(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    page, page_query = paginate(request, queries.cohorts_with_members())
    # Each cohort's figures cover its subtree: read per direct cohort, summed per tree below.
    trees = queries.subtrees(page.object_list)
    ids = sorted({node.pk for tree in trees.values() for node in tree})
    queue_filter = Q(cluster_queue__cohort_id__in=ids, cluster_queue__deleted_at__isnull=True)
    nominal = queries.members_nominal(queue_filter)
    usage = holding_gpus(Q(cluster_queue__cohort_id__in=ids), "cluster_queue__cohort_id")
    samples = latest_samples(queue_filter, now)
    borrowed, lent = queries.members_lending(samples)
    counts = queries.member_counts(ids)
    rows = []
    for cohort in page.object_list:
        tree = trees[cohort.pk]
        cohort.members = sum(counts.get(node.pk, 0) for node in tree)
        pool = sum(queries.subtree_pool(tree).values())
        total = queries.rolled_up(nominal, tree) + pool
        used = queries.rolled_up(usage, tree)
        rows.append(
            {
                "cohort": cohort,
                "nominal": figure(total),
                "pool": figure(pool) if pool else "",
                "usage": figure(used),
                "usage_share": round(100 * min(1.0, allocation_rate(used, total) or 0.0), 1),
                "borrowed": figure(queries.rolled_up(borrowed, tree)) if samples else "—",
                "lent": figure(queries.rolled_up(lent, tree)) if samples else "—",
            }
        )
    page_words = list_words(
        queries.cohorts_with_members().order_by().values_list("scheduler", flat=True)
    )
    context = {
        "nav": "cohorts",
        "page_title": "Cohorts",
        # Several schedulers: each row says which kind it is (a Volcano or KAI parent queue).
        "page_words": page_words,
        "rows": [{**row, "words": words_for(row["cohort"].scheduler)} for row in rows],
        "page_obj": page,
        "page_query": page_query,
    }
    return render(request, "dashboard/cohort_list.html", context)


@dataclass
class LenderEstimate:
    queue: ClusterQueue
    flavor: str
    lent: float
    policy: str
    pending_count: int
    pending_gpus: float
    pending_priority: int | None
    reference_priority: int | None
    borrowers: list[Borrower]
    estimate: ReclaimEstimate

    @property
    def status_label(self) -> str:
        return {
            ReclaimStatus.FULL: "Fully reclaimable",
            ReclaimStatus.PARTIAL: "Partly reclaimable",
            ReclaimStatus.CANNOT: "Never preempts",
            ReclaimStatus.UNATTRIBUTED: "Borrowers unknown",
            ReclaimStatus.NOTHING_LENT: "Nothing lent",
        }.get(self.estimate.status, self.estimate.status)


def _lender_estimates(
    members: list[ClusterQueue],
    samples: dict[int, QueueNow],
    borrowing: list[Workload],
    pending: dict[int, dict[str, Any]],
    top_holding: dict[int, int],
    pace: dict[str, Any],
    allowed: set[int] | None,
) -> list[LenderEstimate]:
    """For each member lending GPUs of a flavor now: how fast preemption would return them."""
    lenders = []
    queue_by_id = {queue.pk: queue for queue in members}
    for queue_id, found in samples.items():
        lender = queue_by_id.get(queue_id)
        if lender is None or not sees_team(allowed, lender.team_id):
            continue
        for flavor, values in sorted(found.flavors.items()):
            if values["lent"] <= 0:
                continue
            candidates = [
                Borrower(
                    name=f"{w.namespace}/{w.name}"
                    if sees_team(allowed, w.cluster_queue.team_id if w.cluster_queue else None)
                    else ANOTHER_TEAMS_WORKLOAD,
                    priority=w.priority,
                    gpus=w.admitted_gpus,
                    grace_seconds=termination_grace_seconds(w.pod_sets),
                    admitted_at=w.admitted_at,
                )
                for w in borrowing
                if w.cluster_queue_id != queue_id
                and (w.flavors or {}).get(GPU_RESOURCE, "") == flavor
            ]
            queue_pending = pending.get(queue_id, {})
            pending_priority = queue_pending.get("top")
            reference = top_holding.get(queue_id)
            inputs = ReclaimInputs(
                lent_gpus=values["lent"],
                policy=lender.reclaim_within_cohort,
                borrowers=candidates,
                pending_priorities=[pending_priority] if pending_priority is not None else [],
                reference_priority=reference,
                preemption_to_admission_seconds=pace["admission_seconds"],
                evictions_per_hour=pace["per_hour"],
            )
            lenders.append(
                LenderEstimate(
                    queue=lender,
                    flavor=flavor,
                    lent=values["lent"],
                    policy=lender.reclaim_within_cohort or "Never",
                    pending_count=queue_pending.get("count", 0),
                    pending_gpus=float(queue_pending.get("gpus") or 0.0),
                    pending_priority=pending_priority,
                    reference_priority=reference,
                    borrowers=candidates,
                    estimate=estimate_reclaim(inputs),
                )
            )
    return lenders


def _member_row(
    queues: list[ClusterQueue],
    quotas: dict[int, list[Any]],
    samples: dict[int, QueueNow],
    holding: dict[Any, float],
    pending: dict[int, dict[str, Any]],
    over_range: dict[int, Figures],
    *,
    summed: bool = False,
) -> dict[str, Any]:
    """A row of the member table: one member, or (``summed``) the members the user may not
    see, added up under a label that names none of them (``queue`` None)."""
    used = Figures.sum(over_range.get(queue.pk, Figures()) for queue in queues)
    found = [samples[queue.pk] for queue in queues if queue.pk in samples]
    one = None if summed else queues[0]
    return {
        "queue": one,
        "label": other_members_label(len(queues)) if one is None else one.name,
        "allocated_hours": figure(used.allocated_gpu_hours),
        "active_hours": figure(used.active_gpu_hours),
        "idle_hours": figure(used.idle_gpu_hours),
        "nominal": figure(sum(nominal_gpus(quotas.get(queue.pk, [])) for queue in queues)),
        "usage": figure(sum(holding.get(queue.pk, 0.0) for queue in queues)),
        "borrowed": figure(sum(s.borrowed for s in found)) if found else "—",
        "lent": figure(sum(s.lent for s in found)) if found else "—",
        "pending": figure(sum(float(pending.get(q.pk, {}).get("gpus") or 0) for q in queues)),
        "policy": (one.reclaim_within_cohort or "Never") if one else "",
        "weighted_share": one.weighted_share if one else None,
    }


def flow_matrix(
    flows: BorrowingFlows, members: list[ClusterQueue], *, own_quota: bool = False
) -> dict[str, Any]:
    """The lender → borrower matrix of the template: names, cells, row and column totals (built
    only for users who see every member). Borrowing no member lent is the cohort's own quota's
    when it has some; otherwise it was recorded before the sync credited every borrowed GPU to
    a lender, and says so."""
    names = {queue.pk: queue.name for queue in members}
    names[POOL] = "cohort's own pool" if own_quota else "no lender recorded"
    borrowers = flows.borrowers
    rows = [
        {
            "name": names.get(lender, f"queue {lender}"),
            "pool": lender == POOL,
            "cells": [flows.hours.get((lender, borrower)) for borrower in borrowers],
            "total": flows.total_from(lender),
        }
        for lender in flows.lenders
    ]
    return {
        "borrowers": [names.get(borrower, f"queue {borrower}") for borrower in borrowers],
        "rows": rows,
        "totals": [flows.total_to(borrower) for borrower in borrowers],
        "total": sum(flows.hours.values()),
        "peak": max(flows.hours.values(), default=0.0),
    }


def _member_rows(
    members: list[ClusterQueue],
    allowed: set[int] | None,
    quotas: dict[int, list[Any]],
    samples: dict[int, QueueNow],
    holding: dict[Any, float],
    pending: dict[int, dict[str, Any]],
    over_range: dict[int, Figures],
) -> list[dict[str, Any]]:
    """The member table: a row per member the user may see, then one for the others."""
    shown = [queue for queue in members if sees_team(allowed, queue.team_id)]
    hidden = [queue for queue in members if not sees_team(allowed, queue.team_id)]
    rows = [_member_row([queue], quotas, samples, holding, pending, over_range) for queue in shown]
    if hidden:
        # Members of teams the user may not see: one row, summed and unnamed (quotas.access).
        rows.append(_member_row(hidden, quotas, samples, holding, pending, over_range, summed=True))
    return rows


def _borrower_rows(
    borrowing: list[Workload], allowed: set[int] | None, now: datetime
) -> list[dict[str, Any]]:
    """The workloads running on borrowed quota, with what preempting them would take."""
    rows = []
    for workload in borrowing:
        borrower_queue = workload.cluster_queue
        rows.append(
            {
                "workload": workload,
                "visible": sees_team(allowed, borrower_queue.team_id if borrower_queue else None),
                "flavor": workload.gpu_flavor,
                "grace_seconds": termination_grace_seconds(workload.pod_sets),
                "age_seconds": (now - workload.admitted_at).total_seconds()
                if workload.admitted_at
                else None,
            }
        )
    return rows


def _lending_count(queues: list[ClusterQueue], samples: dict[int, QueueNow]) -> int:
    """How many of ``queues`` lend GPUs of some flavor now."""
    return sum(
        1
        for queue in queues
        if (found := samples.get(queue.pk)) is not None
        and any(values["lent"] > 0 for values in found.flavors.values())
    )


def _cohort_stats(
    cohort: Cohort,
    cohorts: int,
    member_count: int,
    quotas: dict[int, list[Any]],
    pool: dict[str, float],
    holding: dict[Any, float],
    samples: dict[int, QueueNow],
    pending: dict[int, dict[str, Any]],
) -> list[dict[str, Any]]:
    """The cohort page's cards: members, quota, GPUs admitted, borrowed, lent and pending now,
    over the subtree of ``cohorts`` cohorts."""
    nominal_total = sum(nominal_gpus(rows) for rows in quotas.values())
    words = words_for(cohort.scheduler)
    # A parent is a "cohort" (Kueue) or a "queue" (a Volcano or KAI parent queue).
    parent_word = words.cohort.split()[-1].lower()
    return [
        stat(
            "Members",
            str(member_count),
            f"{words.queue}s"
            + (f" in {plural(cohorts, words.cohort.lower())}" if cohorts > 1 else ""),
            f"parent {parent_word} {cohort.parent_name}" if cohort.parent_name else "",
        ),
        stat(
            "Nominal quota",
            figure(nominal_total + sum(pool.values())),
            "GPUs",
            f"incl. shared pool {figure(sum(pool.values()))}" if pool else "sum of members",
            testid="stat-nominal",
        ),
        stat(
            "Admitted now (quota)",
            figure(sum(holding.values())),
            "GPUs",
            "admitted workloads",
            testid="stat-usage",
        ),
        stat(
            "Borrowed now",
            figure(sum(s.borrowed for s in samples.values())) if samples else "—",
            "GPUs",
            "above members' nominal",
            tone="warn" if any(s.borrowed for s in samples.values()) else None,
            testid="stat-borrowed",
        ),
        stat(
            "Lent now",
            figure(sum(s.lent for s in samples.values())) if samples else "—",
            "GPUs",
            "members' unused quota in use by others",
            testid="stat-lent",
        ),
        stat(
            "Pending demand",
            figure(sum(float(r.get("gpus") or 0) for r in pending.values())),
            "GPUs",
            f"{plural(sum(r.get('count', 0) for r in pending.values()), 'workload')} waiting",
        ),
    ]


def _subtree_flows(members: list[ClusterQueue], time_range: TimeRange) -> BorrowingFlows:
    """Lender → borrower GPU-hours of a subtree's members, paired within each direct cohort
    (lending is attributed there, ``quotas.ingest.samples.attribute_lending``)."""
    by_cohort: dict[int | None, list[ClusterQueue]] = {}
    for queue in members:
        by_cohort.setdefault(queue.cohort_id, []).append(queue)
    hours: dict[tuple[int, int], float] = {}
    for group in by_cohort.values():
        for pair, value in borrowing_flows(group, time_range.covered_hours()).hours.items():
            hours[pair] = hours.get(pair, 0.0) + value
    return BorrowingFlows(hours)


@dashboard_page
def cohort_detail(
    request: HttpRequest, time_range: TimeRange, cluster: str, name: str
) -> HttpResponse:
    cohort = get_cohort_for_user(request, cluster, name)
    words = words_for(cohort.scheduler)
    allowed = allowed_team_ids(request)
    now = timezone.now()
    # The cohort's members are the ClusterQueues of its whole subtree, its pool the subtree's.
    subtree = queries.subtrees([cohort])[cohort.pk]
    tree = [node.pk for node in subtree]
    members = queries.cohort_members(tree)
    queue_filter = Q(cluster_queue__cohort_id__in=tree, cluster_queue__deleted_at__isnull=True)
    quotas = gpu_quotas(queue_filter)
    samples = latest_samples(queue_filter, now)
    holding = holding_gpus(queue_filter, "cluster_queue_id")
    pool = queries.subtree_pool(subtree)
    pending = queries.pending_by_queue(queue_filter)
    top_holding = queries.top_holding_priority(queue_filter)
    borrowing, borrowing_more = queries.borrowing_workloads(queue_filter)
    pace = eviction_pace(Q(workload__in=queries.cohort_workloads(tree)), now)
    over_range = queries.member_figures(members, time_range.covered_hours())
    # Who borrowed from whom pairs members' figures: shown only to users who see every member
    # (staff, finance, or GPULEDGER_TEAM_VISIBILITY=public); a lead sees their queues' borrowed
    # and lent figures in the member table.
    flows = (
        _subtree_flows(members, time_range)
        if all(sees_team(allowed, queue.team_id) for queue in members)
        else None
    )

    hidden = [queue for queue in members if not sees_team(allowed, queue.team_id)]
    stats = _cohort_stats(
        cohort, len(subtree), len(members), quotas, pool, holding, samples, pending
    )
    context = {
        "nav": "cohorts",
        "page_title": f"{words.cohort_title} {cohort.name}",
        "cohort": cohort,
        "words": words,
        "stats": stats,
        "pool": pool,
        "member_rows": _member_rows(
            members, allowed, quotas, samples, holding, pending, over_range
        ),
        "borrower_rows": _borrower_rows(borrowing, allowed, now),
        "borrowing_more": borrowing_more,
        "lenders": _lender_estimates(
            members, samples, borrowing, pending, top_holding, pace, allowed
        ),
        "hidden_lenders": _lending_count(hidden, samples),
        "another_teams_queue": ANOTHER_TEAMS_QUEUE,
        "another_teams_workload": ANOTHER_TEAMS_WORKLOAD,
        "flows": flow_matrix(flows, members, own_quota=bool(pool)) if flows is not None else None,
        "pace": pace,
        "statuses": ReclaimStatus,
        "samples_seen": bool(samples),
        "chart_query": range_query(request, time_range),
        "time_range": time_range,
    }
    return render(request, "dashboard/cohort_detail.html", context)
