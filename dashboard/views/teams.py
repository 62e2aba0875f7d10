"""Team pages: every team over the range, and one team's queues, workloads and charts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from core.mig import gpu_flavor
from core.ranges import TimeRange, hidden_params
from dashboard.access import allowed_team_ids, get_team_for_user, sees_team
from dashboard.decorators import choice_param, dashboard_page
from dashboard.frame import paginate, plural, range_query, stat, utilization_tone
from dashboard.queries import teams as queries
from dashboard.queries.my_teams import flavor_use_by_team, pod_gpus_by_team
from dashboard.queries.queue_levels import slo_status
from dashboard.queries.serving import team_deployments
from dashboard.queries.workload_list import workload_charges
from dashboard.templatetags.formatting import duration, figure, percent
from dashboard.views.my_teams import flavor_rows
from dashboard.views.serving import row as serving_row
from ledger.chargeback import Charge
from ledger.range_figures import Figures
from quotas.access import PUBLIC, leads_team, led_team_ids, other_teams_label, team_visibility
from quotas.choices import HOLDING_STATES
from quotas.models import ClusterQueue, ClusterQueueQuota, Team, Workload
from quotas.now import (
    Demand,
    QueueNow,
    gpu_quotas,
    holding_by_flavor,
    holding_gpus,
    latest_samples,
    nominal_gpus,
    pending_gpus,
    quota_label,
)
from quotas.pending import free_in_quota, workload_reason
from quotas.words import KUEUE, ListWords, list_words, words_for
from quotas.writeback.service import can_apply


def _team_row(team: Team | None, found: Figures, now: float, led: bool) -> dict[str, Any]:
    return {
        "team": team,
        "led": led,
        "allocated": figure(found.allocated_gpu_hours),
        "nominal": figure(found.nominal_gpu_hours),
        "active": figure(found.active_gpu_hours),
        "utilization": percent(found.utilization),
        "idle": figure(found.idle_gpu_hours),
        "borrowed": figure(found.borrowed_gpu_hours),
        "now": figure(now),
        "idle_share": round(100 * (found.idle_share or 0), 1),
    }


@dashboard_page
def team_list(request: HttpRequest, time_range: TimeRange) -> HttpResponse:
    allowed = allowed_team_ids(request)
    # The "yours" badge: the policy's set under private; under public, one more query.
    led = allowed if allowed is not None else set()
    if allowed is None and team_visibility() == PUBLIC:
        led = led_team_ids(request.user)
    teams = Team.objects.order_by("name")
    page, page_query = paginate(request, teams if allowed is None else teams.filter(pk__in=allowed))
    ids = [team.pk for team in page.object_list]
    span = time_range.covered_hours()
    figures = queries.figures_by_team(ids, span)
    totals = queries.all_teams_figures(span)
    now_gpus = holding_gpus(Q(cluster_queue__team_id__in=ids), "cluster_queue__team_id")
    held = pod_gpus_by_team(ids)
    flavors = flavor_use_by_team(ids, timezone.now())
    # The words of the queues of the teams shown (neutral when several schedulers are), and of
    # every team's for the figures summed over all teams.
    schedulers = queries.schedulers_by_team()
    page_words = list_words(s for team in ids for s in schedulers.get(team, []))
    all_words = list_words(s for found in schedulers.values() for s in found)
    table = []
    for team in page.object_list:
        row = _team_row(
            team, figures.get(team.pk, Figures()), now_gpus.get(team.pk, 0.0), team.pk in led
        )
        row["held"] = figure(held.get(team.pk, 0.0))
        row["flavors"] = flavor_rows(flavors.get(team.pk, []))
        table.append(row)
    others = None
    if allowed is not None:
        # The teams this user may not see, summed into one anonymous row (quotas.access).
        hidden = teams.exclude(pk__in=allowed).count()
        if hidden:
            others = _team_row(
                None,
                queries.other_teams_figures(allowed, span),
                sum(
                    holding_gpus(
                        Q(cluster_queue__team__isnull=False)
                        & ~Q(cluster_queue__team_id__in=allowed),
                        "cluster_queue__team_id",
                    ).values()
                ),
                False,
            )
            others["label"] = other_teams_label(hidden)
    stats = [
        stat(
            "Allocated",
            figure(totals.allocated_gpu_hours),
            "GPU-h",
            time_range.label,
            testid="stat-allocated",
        ),
        stat(
            "Nominal quota",
            figure(totals.nominal_gpu_hours),
            "GPU-h",
            f"{all_words.nominal}, summed",
        ),
        stat(
            "Real use",
            figure(totals.active_gpu_hours),
            "GPU-h",
            "SM_ACTIVE-weighted",
            testid="stat-active",
        ),
        stat(
            "Utilization",
            percent(totals.utilization),
            "%",
            "active / allocated with telemetry",
            tone=utilization_tone(totals.utilization),
        ),
        stat(
            "Idle",
            figure(totals.idle_gpu_hours),
            "GPU-h",
            "allocated, SM_ACTIVE < idle threshold",
            tone="warn" if totals.idle_gpu_hours > 0 else None,
            testid="stat-idle",
        ),
    ]
    context = {
        "nav": "teams",
        "page_title": "Teams",
        "stats": stats,
        "rows": table,
        "others": others,
        "page_obj": page,
        "page_query": page_query,
        "sees_all": allowed is None,
        "time_range": time_range,
        "page_words": page_words,
    }
    return render(request, "dashboard/team_list.html", context)


def _workload_row(
    workload: Workload,
    figures: dict[int, Figures],
    allowed: set[int] | None,
    now: datetime,
    charges: dict[int, Charge] | None = None,
    samples: dict[int, QueueNow] | None = None,
) -> dict[str, Any]:
    """A row of a workload table (``dashboard/partials/workload_table.html``); a pending row says
    why it waits when its queue's newest ``samples`` are given."""
    found = figures.get(workload.pk, Figures())
    charge = (charges or {}).get(workload.pk)
    gpus = workload.admitted_gpus or workload.requested_gpus
    cluster_queue = workload.cluster_queue
    idle_hours = found.idle_gpu_hours / gpus if gpus else None
    pending = workload.state in queries.PENDING_STATES
    return {
        "workload": workload,
        "pending": pending,
        "short_reason": workload_reason(
            workload, free_in_quota((samples or {}).get(workload.cluster_queue_id or 0))
        )
        if pending and samples is not None
        else "",
        "visible": sees_team(allowed, cluster_queue.team_id if cluster_queue else None),
        "gpus": figure(gpus),
        "flavor": gpu_flavor(workload.flavors),
        "sm_active": percent(found.utilization),
        "tensor": percent(found.tensor_activity),
        "idle_hours": figure(idle_hours) if found.allocated_gpu_hours else "—",
        "gpu_hours": figure(found.allocated_gpu_hours),
        "cost": f"{charge.money()['total']:,.2f}" if charge is not None else "0.00",
        "age": duration((now - workload.observed_at).total_seconds())
        if workload.observed_at
        else "—",
        "holding": workload.state in HOLDING_STATES,
    }


def _queue_rows(
    queues: list[ClusterQueue],
    quotas: dict[int, list[ClusterQueueQuota]],
    holding: dict[int, float],
    samples: dict[int, QueueNow],
) -> list[dict[str, Any]]:
    """The team's ClusterQueues now: quota per flavor, admitted GPUs, borrowed and lent."""
    rows = []
    for queue in queues:
        now_figures = samples.get(queue.pk)
        words = words_for(queue.scheduler)
        rows.append(
            {
                "queue": queue,
                "words": words,
                # Kueue's quota per flavor; another scheduler's in its own field's name.
                "quotas": [
                    {
                        "flavor_name": quota_label(q) if words is KUEUE else words.nominal,
                        "nominal": q.nominal,
                    }
                    for q in quotas.get(queue.pk, [])
                ],
                "nominal": nominal_gpus(quotas.get(queue.pk, [])),
                "usage": holding.get(queue.pk, 0.0),
                "borrowed": now_figures.borrowed if now_figures else None,
                "lent": now_figures.lent if now_figures else None,
            }
        )
    return rows


def _team_stats(
    time_range: TimeRange,
    figures: Figures,
    now_gpus: dict[str, float | None],
    queue_count: int,
    pending: Demand,
    page_words: ListWords,
) -> list[dict[str, Any]]:
    """The team page's cards: ``now_gpus`` holds the admitted, held, nominal and borrowed GPUs
    now; ``figures`` the range's totals."""
    borrowed_now = now_gpus["borrowed"]
    return [
        stat(
            "Admitted now (quota)",
            figure(now_gpus["allocated"]),
            "GPUs",
            page_words.admitted,
            testid="stat-allocated-now",
        ),
        stat(
            "Held by running pods",
            figure(now_gpus["held"]),
            "GPUs",
            "in the newest collected window",
            testid="stat-held-now",
        ),
        stat(
            "Nominal quota",
            figure(now_gpus["nominal"]),
            "GPUs",
            plural(queue_count, page_words.queue),
            testid="stat-nominal",
        ),
        stat(
            "Utilization",
            percent(figures.utilization),
            "%",
            f"SM_ACTIVE-weighted, {time_range.label.lower()}",
            tone=utilization_tone(figures.utilization),
            testid="stat-utilization",
        ),
        stat(
            "Idle",
            figure(figures.idle_gpu_hours),
            "GPU-h",
            "allocated but SM_ACTIVE below threshold",
            tone="warn" if figures.idle_gpu_hours > 0 else "good",
            testid="stat-idle",
        ),
        stat(
            "Borrowed now",
            figure(borrowed_now),
            "GPUs",
            "above nominal, from the cohort",
            tone="warn" if borrowed_now else None,
            testid="stat-borrowed",
        ),
        stat(
            "Pending demand",
            figure(pending.gpus),
            "GPUs",
            f"{plural(pending.workloads, 'workload')} waiting",
            testid="stat-pending",
        ),
    ]


def _team_workloads(
    request: HttpRequest,
    team: Team,
    time_range: TimeRange,
    state: str,
    now: datetime,
    samples: dict[int, QueueNow],
) -> dict[str, Any]:
    """The page of the team's workloads in ``state``, with their figures over the range."""
    span = time_range.covered_hours()
    page, page_query = paginate(request, queries.team_workloads(team, time_range, state))
    page_ids = [w.pk for w in page.object_list]
    per_workload = queries.workload_figures(page_ids, span)
    charges = workload_charges(span, Q(workload_id__in=page_ids)) if page_ids else {}
    allowed = allowed_team_ids(request)
    return {
        "workload_rows": [
            _workload_row(w, per_workload, allowed, now, charges, samples) for w in page.object_list
        ],
        "page_obj": page,
        "page_query": page_query,
    }


@dashboard_page
def team_detail(request: HttpRequest, time_range: TimeRange, name: str) -> HttpResponse:
    team = get_team_for_user(request, name)
    now = timezone.now()
    state = choice_param(request, "state", queries.WORKLOAD_FILTERS, "all")

    figures = queries.team_total(team, time_range.covered_hours())
    queues = queries.team_queues(team)
    queue_filter = Q(cluster_queue__team=team, cluster_queue__deleted_at__isnull=True)
    quotas = gpu_quotas(queue_filter)
    samples = latest_samples(queue_filter, now)
    # Admitted now per queue and flavor (quotas.now), read once for the cards, the queue table
    # and the flavor table.
    admitted = holding_by_flavor(Q(cluster_queue__team=team))
    holding = {queue_id: sum(by_flavor.values()) for queue_id, by_flavor in admitted.items()}
    team_flavors = flavor_rows(
        flavor_use_by_team(
            [team.pk],
            now,
            quotas=quotas,
            samples=samples,
            team_of={queue.pk: team.pk for queue in queues},
            holding=admitted,
        ).get(team.pk, [])
    )
    now_gpus: dict[str, float | None] = {
        "allocated": sum(holding.values()),
        "held": pod_gpus_by_team([team.pk]).get(team.pk, 0.0),
        "nominal": sum(nominal_gpus(rows) for rows in quotas.values()),
        "borrowed": sum(s.borrowed for s in samples.values()) if samples else None,
    }
    pending = pending_gpus(Q(cluster_queue__team=team), "cluster_queue__team_id").get(
        team.pk, Demand()
    )
    # "ClusterQueue" on a Kueue-only team, "Queue" on a Volcano one, "queue" on a mixed one.
    page_words = list_words(queue.scheduler for queue in queues)
    context = {
        "nav": "teams",
        "page_title": str(team),
        "team": team,
        # Its leads request quota changes for its queues; admins with the permission change them.
        "may_change_quota": can_apply(request.user) or leads_team(request.user, team.pk),
        "stats": _team_stats(time_range, figures, now_gpus, len(queues), pending, page_words),
        "figures": figures,
        "queue_rows": _queue_rows(queues, quotas, holding, samples),
        # Queues of several schedulers: each row says which kind it is.
        "page_words": page_words,
        "flavors": team_flavors,
        **_team_workloads(request, team, time_range, state, now, samples),
        "state": state,
        "state_choices": queries.WORKLOAD_FILTERS,
        "chart_query": range_query(request, time_range),
        "time_range": time_range,
        "range_hidden": hidden_params(request.GET),
        "currency": settings.GPULEDGER_CURRENCY,
        "slo_status": slo_status(queues, now),
        "serving_rows": [serving_row(d) for d in team_deployments(team, time_range)],
        "range_query": range_query(request, time_range),
    }
    return render(request, "dashboard/team_detail.html", context)
