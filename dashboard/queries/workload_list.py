"""The workload list and the navigation search: which workloads match, and their priced figures.

Figures come from the workload-scope hourly rollups through the chargeback's aggregate (the read
layer, priced with the rate cards the chargeback API uses), in one GROUP BY query per page.
"""

from __future__ import annotations

from django.conf import settings
from django.db.models import Q, QuerySet

from core.ranges import HourSpan
from dashboard.queries.teams import state_filter
from ledger.chargeback import Charge, Pricer, aggregate_pieces, chargeback_model
from ledger.choices import RollupScope
from quotas.models import Workload

STATE_FILTERS = ("all", "holding", "pending", "finished")
SORTS = ("newest", "gpu_hours", "idle_share", "cost", "name")
FIGURE_SORTS = frozenset({"gpu_hours", "idle_share", "cost"})


def state_q(state: str) -> Q:
    """The team page's state filter (holding, pending, finished), shared with the list."""
    return state_filter(state)


def visible_workloads(team_ids: set[int] | None) -> QuerySet[Workload]:
    """Workloads whose detail the user sees (``dashboard.access.allowed_team_ids``)."""
    workloads = Workload.objects.all()
    if team_ids is not None:
        workloads = workloads.filter(cluster_queue__team_id__in=team_ids)
    return workloads


def matching_workloads(
    team_ids: set[int] | None,
    *,
    search: str = "",
    state: str = "all",
    queue: str = "",
    owner_kind: str = "",
    team: str = "",
) -> QuerySet[Workload]:
    """The visible workloads matching the list's filters; ``search`` matches name, namespace,
    queue (ClusterQueue or LocalQueue), state and owner kind."""
    workloads = visible_workloads(team_ids).filter(state_q(state))
    if search:
        workloads = workloads.filter(
            Q(name__icontains=search)
            | Q(namespace__icontains=search)
            | Q(queue_name__icontains=search)
            | Q(cluster_queue__name__icontains=search)
            | Q(owner_kind__iexact=search)
            | Q(owner_name__icontains=search)
            | Q(state__iexact=search.replace(" ", "_"))
        )
    if queue:
        workloads = workloads.filter(Q(cluster_queue__name=queue) | Q(queue_name=queue))
    if owner_kind:
        workloads = workloads.filter(owner_kind=owner_kind)
    if team:
        workloads = workloads.filter(cluster_queue__team__name=team)
    return workloads


def owner_kinds(team_ids: set[int] | None) -> list[str]:
    return list(
        visible_workloads(team_ids)
        .exclude(owner_kind="")
        .order_by("owner_kind")
        .values_list("owner_kind", flat=True)
        .distinct()
    )


def workload_charges(span: HourSpan, restrict: Q) -> dict[int, Charge]:
    """Workload id → its figures and cost over the span (rate cards as the chargeback API)."""
    if span.count <= 0:
        return {}
    pricer = Pricer(span.first, span.stop, settings.GPULEDGER_CURRENCY, chargeback_model())
    charges: dict[int, Charge] = {}
    for piece in aggregate_pieces(
        start=span.first,
        end=span.stop,
        scope=RollupScope.WORKLOAD,
        pricer=pricer,
        restrict=restrict,
        extra_fields=("workload_id",),
    ):
        workload_id = piece.extra["workload_id"]
        if workload_id is None:
            continue
        summed = charges.get(workload_id)
        if summed is None:
            charges[workload_id] = summed = Charge()
        summed.add(piece.figures)
    return charges


def figure_sort_key(sort: str, charge: Charge | None) -> float:
    """Descending sort value of a workload for ``sort``; workloads without figures last."""
    if charge is None:
        return float("-inf")
    if sort == "gpu_hours":
        return charge.allocated_gpu_hours
    if sort == "idle_share":
        share = charge.idle_share
        return float("-inf") if share is None else share
    return float(charge.money()["total"])
