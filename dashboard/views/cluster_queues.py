"""ClusterQueue pages: every queue's GPU quota and usage now, and one queue in detail."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from core.ranges import TimeRange
from core.ratios import allocation_rate
from dashboard.access import allowed_team_ids, get_cluster_queue_for_user
from dashboard.decorators import dashboard_page
from dashboard.frame import paginate, plural, range_query, stat, utilization_tone
from dashboard.queries import cluster_queues as queries
from dashboard.queries.queue_levels import slo_status
from dashboard.templatetags.formatting import duration, figure, percent, quantity
from quotas.access import leads_team
from quotas.choices import TransitionKind
from quotas.models import ClusterQueue, Workload
from quotas.now import (
    Demand,
    gpu_quotas,
    holding_demand,
    holding_gpus,
    latest_samples,
    nominal_by_flavor,
    nominal_gpus,
    pending_gpus,
    quota_label,
)
from quotas.pending import free_in_quota, workload_reason
from quotas.words import KUEUE, Words, list_words, quota_text, words_for
from quotas.writeback.service import can_apply
from servicelevels.estimate import estimates_in_queue


def _quota_cell(words: Words, quota: Any) -> dict[str, str]:
    """One GPU quota of a queue, and how the queue's scheduler writes it (``quotas.words``)."""
    limit = quota.borrowing_limit
    cell = {
        "flavor": quota_label(quota),
        "nominal": quantity(quota.nominal, quota.resource),
        "borrowing_limit": quantity(limit, quota.resource),
    }
    ceiling = "" if limit is None else quantity(quota.nominal + limit, quota.resource)
    cell["text"] = quota_text(
        words, cell["flavor"], cell["nominal"], cell["borrowing_limit"], ceiling
    )
    return cell


@dashboard_page(uses_range=False)
def cluster_queue_list(request: HttpRequest) -> HttpResponse:
    allowed = allowed_team_ids(request)
    now = timezone.now()
    search = request.GET.get("q", "").strip()[:253]
    page, page_query = paginate(request, queries.cluster_queues(search, allowed))
    ids = [queue.pk for queue in page.object_list]
    queue_filter = Q(cluster_queue_id__in=ids)
    quotas = gpu_quotas(queue_filter)
    samples = latest_samples(queue_filter, now)
    holding = holding_gpus(queue_filter, "cluster_queue_id")
    rows = []
    for queue in page.object_list:
        found = samples.get(queue.pk)
        nominal = nominal_gpus(quotas.get(queue.pk, []))
        used = holding.get(queue.pk, 0.0)
        words = words_for(queue.scheduler)
        rows.append(
            {
                "queue": queue,
                "words": words,
                "quotas": [_quota_cell(words, q) for q in quotas.get(queue.pk, [])],
                "nominal": figure(nominal),
                "usage": figure(used),
                "usage_share": round(100 * min(1.0, allocation_rate(used, nominal) or 0.0), 1),
                "borrowed": figure(found.borrowed) if found else "—",
                "borrowing": bool(found and found.borrowed > 0),
            }
        )
    page_words = list_words(
        queries.cluster_queues(search, allowed).order_by().values_list("scheduler", flat=True)
    )
    context = {
        "nav": "queues",
        "page_title": page_words.queues_title,
        # Several schedulers on the page: each row says which kind of queue it is.
        "page_words": page_words,
        "rows": rows,
        "page_obj": page,
        "page_query": page_query,
        "search": search,
        "hidden": queries.hidden_queue_count(allowed),
    }
    return render(request, "dashboard/cluster_queue_list.html", context)


@dashboard_page
def cluster_queue_detail(
    request: HttpRequest, time_range: TimeRange, cluster: str, name: str
) -> HttpResponse:
    queue = get_cluster_queue_for_user(request, cluster, name)
    words = words_for(queue.scheduler)
    allowed = allowed_team_ids(request)
    now = timezone.now()
    queue_filter = Q(cluster_queue=queue)

    found = latest_samples(queue_filter, now).get(queue.pk)
    figures = queries.queue_total(queue, time_range.covered_hours())
    holding, holding_more = queries.holding_workloads(queue)
    # Admitted and pending now (quotas.now): the queue's workloads, as the API counts them.
    admitted_now = holding_demand(queue_filter, "cluster_queue_id").get(queue.pk, Demand())
    pending_now = pending_gpus(queue_filter, "cluster_queue_id").get(queue.pk, Demand())
    page, page_query = paginate(request, queries.pending_workloads(queue))
    requeued = queries.last_requeues([w.pk for w in page.object_list])
    # Free quota per flavor now (nominal − usage of the newest samples), for the short reasons.
    free = free_in_quota(found)
    estimates = estimates_in_queue(queue, now)
    pending_rows = [
        _pending_row(workload, now, requeued, free, estimates) for workload in page.object_list
    ]
    eviction_counts = queries.eviction_counts(queue, time_range)
    # Nominal now in GPUs: whole GPUs and MIG instances at slices/7 (quotas.now.quota_gpus).
    gpu_quota = gpu_quotas(queue_filter).get(queue.pk, [])
    stats = _stats(
        gpu_quota, admitted_now, pending_now, found, figures, eviction_counts, time_range, words
    )
    context = {
        "nav": "queues",
        "page_title": f"{words.queue} {queue.name}",
        "queue": queue,
        "words": words,
        "scheduler_fields": scheduler_fields(queue),
        # Quota changes: admins with the permission change, the team's leads request.
        "may_change_quota": can_apply(request.user) or leads_team(request.user, queue.team_id),
        "cohort_visible": queue.cohort is not None,
        "stats": stats,
        "quota_rows": _quota_rows(queue, words),
        "holding": holding,
        "holding_more": holding_more,
        "pending_rows": pending_rows,
        "page_obj": page,
        "page_query": page_query,
        "chart_query": range_query(request, time_range),
        "visible_all": allowed is None,
        "time_range": time_range,
        "quota_history_start": queries.quota_history_start(queue),
        "slo_status": slo_status([queue], now),
    }
    return render(request, "dashboard/cluster_queue_detail.html", context)


def _quota_rows(queue: ClusterQueue, words: Words) -> list[dict[str, Any]]:
    """The queue's quotas as written in Kueue, flavor by flavor; for another scheduler also as
    it writes them: the cap (nominal + borrowing limit: Volcano's ``capability``, KAI's
    ``limit``) and the part never lent (nominal − lending limit: Volcano's ``guarantee``)."""
    rows = []
    for q in queue.quotas.order_by("resource", "position", "flavor_name"):
        borrow, lend = q.borrowing_limit, q.lending_limit
        rows.append(
            {
                "flavor": q.flavor_name,
                "resource": q.resource,
                "nominal": quantity(q.nominal, q.resource),
                "borrowing_limit": quantity(borrow, q.resource),
                "lending_limit": quantity(lend, q.resource),
                "ceiling": words.no_ceiling
                if borrow is None
                else quantity(q.nominal + borrow, q.resource),
                "kept": "0" if lend is None else quantity(max(q.nominal - lend, 0), q.resource),
            }
        )
    return rows


def scheduler_fields(queue: ClusterQueue) -> list[tuple[str, str]]:
    """The scheduler's own queue fields the translation kept as labels (``weight``, ``state``,
    ``priority``, ``gpu-quota`` …; docs/architecture.md "Quota sources"), by name."""
    prefix = f"gpu-ledger.io/{queue.scheduler}-"
    return sorted(
        (key[len(prefix) :], str(value))
        for key, value in (queue.labels or {}).items()
        if key.startswith(prefix)
    )


def _pending_row(
    workload: Workload,
    now: datetime,
    requeued: dict[int, datetime],
    free: Any,
    estimates: dict[int, Any],
) -> dict[str, Any]:
    """A pending workload's row: how long it waits (since it was seen or last requeued), why."""
    since = max(
        [moment for moment in (workload.observed_at, requeued.get(workload.pk)) if moment],
        default=None,
    )
    return {
        "workload": workload,
        "wait": duration((now - since).total_seconds()) if since else "—",
        "waiting_since": since,
        "requeued": workload.pk in requeued,
        "short_reason": workload_reason(workload, free),
        "estimate": estimates.get(workload.pk),
    }


def _stats(
    gpu_quota: Any,
    admitted_now: Demand,
    pending_now: Demand,
    found: Any,
    figures: Any,
    eviction_counts: dict[str, int],
    time_range: TimeRange,
    words: Words = KUEUE,
) -> list[Any]:
    """The figures across the queue page's top."""
    by_flavor = nominal_by_flavor(gpu_quota)
    return [
        stat(
            "Nominal quota",
            figure(nominal_gpus(gpu_quota)),
            "GPUs",
            ", ".join(f"{flavor} {figure(gpus)}" for flavor, gpus in by_flavor.items())
            if words is KUEUE
            else f"{words.scheduler} {words.nominal}",
            testid="stat-nominal",
        ),
        stat(
            "Admitted now (quota)",
            figure(admitted_now.gpus),
            "GPUs",
            f"{plural(admitted_now.workloads, 'admitted workload')}",
            testid="stat-usage",
        ),
        stat(
            "Borrowed now",
            figure(found.borrowed) if found else "—",
            "GPUs",
            "from the cohort",
            tone="warn" if found and found.borrowed else None,
            testid="stat-borrowed",
        ),
        stat(
            "Lent now",
            figure(found.lent) if found else "—",
            "GPUs",
            "in use by other members",
            testid="stat-lent",
        ),
        stat(
            "Pending",
            figure(pending_now.gpus),
            "GPUs",
            f"{plural(pending_now.workloads, 'workload')} waiting",
            testid="stat-pending",
        ),
        stat(
            "Utilization",
            percent(figures.utilization),
            "%",
            time_range.label,
            tone=utilization_tone(figures.utilization),
        ),
        stat(
            "Evictions",
            str(sum(eviction_counts.values())),
            "",
            f"{eviction_counts.get(TransitionKind.PREEMPTED, 0)} preemptions, "
            f"{time_range.label.lower()}",
            testid="stat-evictions",
        ),
    ]
