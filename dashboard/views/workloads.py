"""The workload page: its state, GPUs and activity, transitions, pods, and charts."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from core.ranges import CUSTOM, RANGE_PARAMS, TimeRange
from core.timewindows import floor_time
from dashboard.access import allowed_team_ids, get_workload_for_user, sees_team
from dashboard.decorators import dashboard_page
from dashboard.frame import LIST_LIMIT, range_query, stat, utilization_tone
from dashboard.live import WORKLOAD_LIVE_SPAN
from dashboard.queries import queue_levels as levels_queries
from dashboard.queries import workloads as queries
from dashboard.queries.now import held_now
from dashboard.queries.teams import PENDING_STATES
from dashboard.queries.workload_list import workload_charges
from dashboard.templatetags.formatting import duration, figure, percent
from ledger.chargeback import Charge
from ledger.range_figures import Figures
from ledger.window_detail import window_detail
from quotas.access import ANOTHER_TEAMS_WORKLOAD, hide_queue_path
from quotas.choices import FINISHED_STATES, HOLDING_STATES, WorkloadState
from quotas.models import Allocation, Workload
from quotas.now import latest_samples
from quotas.pending import free_in_quota, workload_reason
from quotas.words import words_for
from servicelevels.estimate import estimates_for

# A workload page opens on the workload's whole life, at most this long (a serving deployment
# may live for months: its last 30 days).
WHOLE_LIFE_CAP = timedelta(days=30)


def whole_life(workload: Workload, now: datetime) -> TimeRange | None:
    """From its first sighting to its end (or now), minute-aligned, capped at the last 30 days."""
    if workload.observed_at is None:
        return None
    last = floor_time(now, 60)
    end = last
    if workload.finished_at is not None:
        end = min(floor_time(workload.finished_at, 60) + timedelta(minutes=1), last)
    start = max(floor_time(workload.observed_at, 60), end - WHOLE_LIFE_CAP)
    if start >= end:
        return None
    return TimeRange(start, end, CUSTOM)


def _team_of(workload: Workload) -> int | None:
    return workload.cluster_queue.team_id if workload.cluster_queue else None


def _life_query(workload: Workload, end: datetime) -> str:
    """``start=…&end=…`` covering the workload's whole life, when the rollups still cover it."""
    if not workload.observed_at or workload.observed_at >= end:
        return ""
    life_start = floor_time(workload.observed_at, 60)
    life_end = floor_time(end, 60) + timedelta(minutes=1)
    if (life_end - life_start).days >= settings.GPULEDGER_ROLLUP_RETENTION_DAYS:
        return ""
    return urlencode(
        {
            "start": life_start.strftime("%Y-%m-%dT%H:%M"),
            "end": life_end.strftime("%Y-%m-%dT%H:%M"),
        }
    )


def peak_gpus(allocations: list[Allocation]) -> float:
    """The most GPUs the pods held at one moment: a sweep over their start and end times (a pod
    that ends at the instant another starts hands its GPUs over, never counts twice)."""
    events: list[tuple[datetime, int, float]] = []
    for allocation in allocations:
        events.append((allocation.started_at, 1, allocation.gpus))
        if allocation.ended_at is not None:
            events.append((allocation.ended_at, 0, -allocation.gpus))
    events.sort(key=lambda event: (event[0], event[1]))
    held = peak = 0.0
    for _, _, change in events:
        held += change
        peak = max(peak, held)
    return peak


def _gpus_card(workload: Workload, allocations: list[Allocation]) -> dict[str, Any]:
    """What it holds now; for a workload that no longer holds quota (finished, evicted,
    deactivated) the most GPUs its pods held at once, since "0 held" says nothing of its run."""
    requested = f"requested {figure(workload.requested_gpus)}"
    flavor = workload.gpu_flavor
    if flavor:
        requested += f", {flavor}"
    ended = workload.state in FINISHED_STATES or workload.state == WorkloadState.INACTIVE
    if workload.state in HOLDING_STATES or (not allocations and not ended):
        # Held = held by running pods now, as on every page; the quota admitted is the note.
        held = held_now([workload.pk]).get(workload.pk, 0.0)
        admitted = figure(workload.admitted_gpus)
        note = f"by running pods now; admitted (quota) {admitted}, {requested}"
        return stat(
            "GPUs held",
            figure(held),
            "GPUs",
            note,
            tone="warn" if workload.admitted_gpus and not held else None,
            testid="stat-gpus",
        )
    if not allocations:
        note = "no pod of it was seen holding GPUs"
        if workload.requested_gpus:
            note += f"; {requested}"
        return stat("GPUs at peak", "0", "GPUs", note, tone=None, testid="stat-gpus")
    more = len(allocations) >= LIST_LIMIT
    return stat(
        "GPUs at peak",
        ("≥ " if more else "") + figure(peak_gpus(allocations)),
        "GPUs",
        f"held at once by its pods while it ran; holds none now; {requested}",
        testid="stat-gpus",
    )


def _transition_rows(workload: Workload, allowed: set[int] | None) -> list[dict[str, Any]]:
    """The workload's recent transitions, a preemptor's queue path shown only to who may see it."""
    rows = []
    for transition in queries.recent_transitions(workload):
        preemptor = transition.preemptor
        # Kueue's message names the preemptor's queue path: shown only when the preemptor is
        # known and visible (an unresolved one may be any team's).
        visible = sees_team(allowed, _team_of(preemptor) if preemptor else None)
        path = transition.preemptor_path
        rows.append(
            {
                "transition": transition,
                "preemptor": preemptor,
                "preemptor_visible": visible,
                "message": transition.message
                if visible
                else hide_queue_path(transition.message, path),
                "preemptor_path": path if visible else "",
            }
        )
    return rows


def _caused_rows(workload: Workload, allowed: set[int] | None) -> list[dict[str, Any]]:
    """The workloads this one preempted."""
    return [
        {
            "transition": transition,
            "victim": transition.workload,
            "visible": sees_team(allowed, _team_of(transition.workload)),
        }
        for transition in queries.preemptions_caused(workload)
    ]


def _waiting_reason(workload: Workload, now: datetime) -> tuple[bool, str]:
    """Whether the workload waits for quota now, and why, said short."""
    waiting = workload.state in PENDING_STATES and workload.deleted_at is None
    if not waiting or workload.cluster_queue_id is None:
        return waiting, ""
    # Its queue's free quota now against Kueue's shortfall.
    samples = latest_samples(Q(cluster_queue_id=workload.cluster_queue_id), now)
    return waiting, workload_reason(workload, free_in_quota(samples.get(workload.cluster_queue_id)))


def _charge_cards(charge: Charge, over: str) -> list[dict[str, Any]]:
    """GPU-hours held and their cost over the range, priced as the workload list and the
    chargeback API price them (``dashboard.queries.workload_list.workload_charges``)."""
    total = charge.money()["total"]
    currency = settings.GPULEDGER_CURRENCY
    if charge.unpriced_gpu_hours:
        cost_note = f"{figure(charge.unpriced_gpu_hours)} GPU-h have no rate card (0.00)"
    else:
        cost_note = f"{currency}, from the rate cards, {over}"
    return [
        stat(
            "GPU-hours",
            figure(charge.allocated_gpu_hours),
            "GPU-h",
            f"allocated, {over}",
            testid="stat-gpu-hours",
        ),
        stat(
            "Cost",
            f"{total:,.2f}",
            currency,
            cost_note,
            tone="warn" if charge.unpriced_gpu_hours else None,
            testid="stat-cost",
        ),
    ]


def _workload_stats(
    workload: Workload,
    figures: Figures,
    allocations: list[Allocation],
    sm_note: str,
    end: datetime,
    charge: Charge,
    over: str,
) -> list[dict[str, Any]]:
    """The workload page's cards: state, GPUs, GPU-hours and cost, activity over the range,
    age and pods."""
    pods_running = sum(1 for a in allocations if a.ended_at is None)
    gpus = workload.admitted_gpus or workload.requested_gpus
    return [
        stat(
            "State",
            workload.get_state_display(),
            "",
            workload.state_reason,
            tone="good" if workload.state == WorkloadState.ADMITTED else None,
            testid="stat-state",
        ),
        _gpus_card(workload, allocations),
        *_charge_cards(charge, over),
        stat(
            "SM activity",
            percent(figures.utilization),
            "%",
            sm_note,
            tone=utilization_tone(figures.utilization),
            testid="stat-sm",
        ),
        stat(
            "Tensor activity",
            percent(figures.tensor_activity),
            "%",
            "PIPE_TENSOR_ACTIVE",
            testid="stat-tensor",
        ),
        stat(
            "Idle",
            figure(figures.idle_gpu_hours / gpus) if gpus and figures.allocated_gpu_hours else "—",
            "h",
            f"{figure(figures.idle_gpu_hours)} idle GPU-hours",
            tone="warn" if figures.idle_gpu_hours else None,
            testid="stat-idle",
        ),
        stat(
            "Age",
            duration((end - workload.observed_at).total_seconds()) if workload.observed_at else "—",
            "",
            f"ran {duration(workload.accumulated_execution_seconds)} before its last eviction"
            if workload.accumulated_execution_seconds
            else "",
            testid="stat-age",
        ),
        stat("Pods", str(pods_running), "running", f"{len(allocations)} seen"),
    ]


@dashboard_page
def workload_detail(request: HttpRequest, time_range: TimeRange, pk: int) -> HttpResponse:
    workload = get_workload_for_user(request, pk)
    allowed = allowed_team_ids(request)
    now = timezone.now()
    life = None
    if not any(request.GET.get(name) for name in RANGE_PARAMS):
        # No range asked for: the workload's life, not the last 24 hours (a job that finished
        # days ago would open on empty charts).
        life = whole_life(workload, now)
        if life is not None:
            time_range = life
    life_capped = (
        life is not None
        and workload.observed_at is not None
        and life.start > floor_time(workload.observed_at, 60)
    )
    if life is None:
        over = f"over {time_range.label.lower()}"
        sm_note = f"mean, {time_range.label}"
    else:
        over = "over its last 30 days" if life_capped else "over its whole life"
        sm_note = f"mean {over}"
    span = time_range.covered_hours()
    figures = queries.workload_total(workload, span)
    charge = workload_charges(span, Q(workload_id=workload.pk)).get(workload.pk, Charge())
    transition_rows = _transition_rows(workload, allowed)
    caused = _caused_rows(workload, allowed)
    waiting, reason = _waiting_reason(workload, now)
    allocations = queries.workload_allocations(workload)
    end = workload.finished_at or now
    stats = _workload_stats(workload, figures, allocations, sm_note, end, charge, over)
    context = {
        "nav": "teams",
        "page_title": f"{workload.namespace}/{workload.name}",
        "words": words_for(workload.scheduler),
        "life_query": "" if life is not None else _life_query(workload, end),
        "whole_life": life,
        "range_chosen_by_page": life is not None,
        "life_capped": life_capped,
        "workload": workload,
        "waiting": waiting,
        "short_reason": reason,
        "stats": stats,
        "transition_rows": transition_rows,
        "caused": caused,
        "another_teams_workload": ANOTHER_TEAMS_WORKLOAD,
        "allocations": allocations,
        "chart_query": urlencode(time_range.query())
        if life is not None
        else range_query(request, time_range),
        "retention_days": settings.GPULEDGER_USAGE_RETENTION_DAYS,
        "detail_note": window_detail(workload.cluster_id, time_range.start, time_range.end).note(
            "the workload's hourly figures", "rollups keep no per-GPU row"
        ),
        "has_prometheus": bool(workload.cluster.prometheus_url),
        "live_hours": int(WORKLOAD_LIVE_SPAN.total_seconds() // 3600),
        "flavor": workload.gpu_flavor,
        "pod_sets": workload.pod_sets if isinstance(workload.pod_sets, list) else [],
        "time_range": time_range,
        "attempts": _attempt_rows(workload, allowed),
        "estimate": estimates_for([workload], now).get(workload.pk) if waiting else None,
    }
    return render(request, "dashboard/workload_detail.html", context)


def _attempt_rows(workload: Workload, allowed: set[int] | None) -> list[dict[str, Any]]:
    """Each admission attempt with its waits; the preemptor named only to who may see it."""
    rows = []
    for record in levels_queries.attempts(workload):
        preemptor = ""
        preemptor_url = None
        if record.preempted_by_path or record.preempted_by_id:
            if sees_team(allowed, levels_queries.preemptor_team(record)):
                preemptor = record.preempted_by_path or str(record.preempted_by)
                if record.preempted_by_id:
                    preemptor_url = reverse(
                        "dashboard:workload-detail", args=[record.preempted_by_id]
                    )
            else:
                preemptor = ANOTHER_TEAMS_WORKLOAD
        rows.append(
            {
                "record": record,
                "wait": duration(record.wait_seconds),
                "running_delay": duration(record.running_delay_seconds),
                "preemptor": preemptor,
                "preemptor_url": preemptor_url,
                "ran_hours": _ran_hours(record),
            }
        )
    return rows


def _ran_hours(record: Any) -> float | None:
    end = record.evicted_at or record.finished_at
    if record.running_at is None or end is None:
        return None
    return max((end - record.running_at).total_seconds(), 0.0) / 3600.0
