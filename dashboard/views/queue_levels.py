"""The Queue levels page: how long work waited for quota per queue (or LocalQueue, cohort, team,
priority class) over the range, evictions and preemptions by reason, and who preempted whom."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.decorators import choice_param, dashboard_page
from dashboard.frame import chart_url, plural, stat
from dashboard.queries import queue_levels as queries
from dashboard.templatetags.formatting import duration, figure
from quotas.models import ClusterQueue
from servicelevels.figures import GROUP_BY, LevelRow
from servicelevels.objectives import BREACHED, MET, NOT_JUDGED, judge_days

GROUP_LABELS = {
    "cluster_queue": "ClusterQueue",
    "local_queue": "LocalQueue",
    "cohort": "Cohort",
    "team": "Team",
    "priority_class": "Priority class",
}


@dashboard_page
def queue_levels(request: HttpRequest, time_range: TimeRange) -> HttpResponse:
    allowed = allowed_team_ids(request)
    group_by = choice_param(request, "group_by", GROUP_BY, "cluster_queue")
    rows = queries.table(time_range, allowed, group_by)
    links, slo_cells = _queue_links(rows, group_by, time_range)
    table = [_row(row, links.get((row.cluster, row.group)), slo_cells) for row in rows]
    admissions = sum(row.admissions for row in rows)
    evictions = sum(sum(row.evictions.values()) for row in rows)
    preemptions = sum(row.preemptions for row in rows)
    # Metrics rows (hours before the install) know neither: they count as none.
    pending = sum(row.pending_at_end or 0 for row in rows)
    oldest = max((row.oldest_pending_seconds or 0.0 for row in rows), default=0.0)
    cards = [
        stat("Admissions", f"{admissions:,}", "", time_range.label, testid="levels-admissions"),
        stat(
            "Pending at the end",
            f"{pending:,}",
            "workloads",
            f"oldest waiting {duration(oldest)}" if pending else "none waiting",
            testid="levels-pending",
        ),
        stat(
            "Evictions",
            f"{evictions:,}",
            "",
            plural(preemptions, "preemption"),
            tone="warn" if evictions else None,
            testid="levels-evictions",
        ),
        stat(
            "Preempted GPU-hours",
            figure(sum(row.preempted_gpu_hours or 0.0 for row in rows)),
            "GPU-h",
            "runs ended by a preemption",
            testid="levels-preempted-hours",
        ),
    ]
    matrix = (
        queries.preemption_matrix(rows, queries.visible_queues(allowed))
        if group_by == "cluster_queue"
        else queries.preemption_matrix(
            queries.table(time_range, allowed, "cluster_queue"), queries.visible_queues(allowed)
        )
    )
    context = {
        "nav": "queue-levels",
        "page_title": "Queue levels",
        "cards": cards,
        "rows": table,
        "group_by": group_by,
        "group_label": GROUP_LABELS[group_by],
        "group_choices": [(key, GROUP_LABELS[key]) for key in GROUP_BY],
        "matrix": matrix,
        "any_metrics": any(row.source == queries.METRICS for row in rows),
        "metrics_note": queries.METRICS_NOTE,
        "step": queries.step_for(time_range),
        "own_teams_only": allowed is not None,
        "waits_chart_url": chart_url("dashboard:queue-levels-chart-waits", request),
        "evictions_chart_url": chart_url("dashboard:queue-levels-chart-evictions", request),
        "preemptions_chart_url": chart_url("dashboard:queue-levels-chart-preemptions", request),
        "time_range": time_range,
    }
    return render(request, "dashboard/queue_levels.html", context)


def _queue_links(
    rows: list[LevelRow], group_by: str, time_range: TimeRange
) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], dict[str, Any]]]:
    """For ClusterQueue rows: each queue's page, and its objective judged over the range's
    whole days (how many met / breached)."""
    if group_by != "cluster_queue" or not rows:
        return {}, {}
    keys = {(row.cluster, row.group) for row in rows}
    queues = {
        (q.cluster.name, q.name): q
        for q in ClusterQueue.objects.filter(name__in={g for _c, g in keys}).select_related(
            "cluster"
        )
        if (q.cluster.name, q.name) in keys
    }
    links = {
        key: reverse("dashboard:cluster-queue-detail", args=[key[0], key[1]]) for key in queues
    }
    slos = queries.objectives(q.pk for q in queues.values())
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    now = timezone.now()
    for key, queue in queues.items():
        slo = slos.get(queue.pk)
        if slo is None or not slo.enabled:
            continue
        start, end = queries.bounds(time_range, now)
        days = judge_days(slo, start, end, now)
        cells[key] = {
            "target": f"{slo.statistic} ≤ {duration(slo.max_wait_seconds)}",
            "met": sum(1 for day in days if day.status == MET),
            "breached": sum(1 for day in days if day.status == BREACHED),
            "not_judged": sum(1 for day in days if day.status == NOT_JUDGED),
        }
    return links, cells


def _row(
    row: LevelRow, link: str | None, slo_cells: dict[tuple[str, str], dict[str, Any]]
) -> dict[str, Any]:
    return {
        "group": row.group or "(none)",
        "cluster": row.cluster,
        "url": link,
        "admissions": row.admissions,
        "p50": duration(row.wait_seconds_p50),
        "p90": duration(row.wait_seconds_p90),
        "p95": duration(row.wait_seconds_p95),
        "max": duration(row.wait_seconds_max),
        "mean": duration(row.wait_seconds_mean),
        "delay_p50": duration(row.running_delay_seconds_p50),
        "delay_p95": duration(row.running_delay_seconds_p95),
        "pending": "—" if row.pending_at_end is None else row.pending_at_end,
        "oldest": duration(row.oldest_pending_seconds),
        "evictions": sum(row.evictions.values()),
        "eviction_reasons": ", ".join(f"{k} {v}" for k, v in sorted(row.evictions.items())),
        "preemptions": row.preemptions,
        "preempted_gpu_hours": figure(row.preempted_gpu_hours),
        "metrics": row.source == queries.METRICS,
        "slo": slo_cells.get((row.cluster, row.group)),
    }
