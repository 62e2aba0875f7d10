"""The workload list and the navigation search: which workloads match, and their priced figures.

Figures come from the workload-scope hourly rollups through the chargeback's aggregate (the read
layer, priced with the rate cards the chargeback API uses), in one GROUP BY query per page.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, overload

from django.conf import settings
from django.db.models import Q, QuerySet

from core.ranges import HourSpan
from dashboard.queries.teams import state_filter
from ledger.chargeback import Charge, Pricer, aggregate_pieces, chargeback_model
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from quotas.choices import FINISHED_STATES
from quotas.models import Workload

STATE_FILTERS = ("all", "holding", "pending", "finished")
SORTS = ("newest", "gpu_hours", "idle_share", "cost", "name")
FIGURE_SORTS = frozenset({"gpu_hours", "idle_share", "cost"})
# Workload columns the list does not show (JSON and long text): not read for its rows.
UNLISTED_FIELDS = ("labels", "pod_sets", "state_message")


def state_q(state: str) -> Q:
    """The team page's state filter (holding, pending, finished), shared with the list."""
    return state_filter(state)


def visible_workloads(team_ids: set[int] | None, rbac: Q | None = None) -> QuerySet[Workload]:
    """Workloads whose detail the user sees (``dashboard.access.allowed_team_ids``), and those
    optional RBAC visibility adds (``accounts.rbac.rbac_workloads``)."""
    workloads = Workload.objects.all()
    if team_ids is not None:
        visible = Q(cluster_queue__team_id__in=team_ids)
        workloads = workloads.filter(visible if rbac is None else visible | rbac)
    return workloads


def matching_workloads(
    team_ids: set[int] | None,
    *,
    search: str = "",
    state: str = "all",
    queue: str = "",
    owner_kind: str = "",
    team: str = "",
    rbac: Q | None = None,
) -> QuerySet[Workload]:
    """The visible workloads matching the list's filters; ``search`` matches name, namespace,
    queue (ClusterQueue or LocalQueue), state and owner kind."""
    workloads = visible_workloads(team_ids, rbac).filter(state_q(state))
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


def in_range(workloads: QuerySet[Workload], span: HourSpan, start: datetime) -> QuerySet[Workload]:
    """The workloads the range is about: those still live (not finished, not deleted), those
    that ended at or after ``start``, and those with GPU-hours in the span's rollups. A job that
    finished before the range and held nothing in it is left out (it would show 0 GPU-hours)."""
    ended = Q(state__in=FINISHED_STATES) | Q(deleted_at__isnull=False)
    ended_before = ended & (
        Q(finished_at__lt=start) | Q(finished_at__isnull=True, deleted_at__lt=start)
    )
    held = (
        HourlyRollup.objects.for_scope(RollupScope.WORKLOAD)
        .covering(span)
        .filter(allocated_gpu_hours__gt=0, workload__isnull=False)
        .values("workload_id")
    )
    return workloads.filter(~ended_before | Q(pk__in=held))


def owner_kinds(team_ids: set[int] | None, rbac: Q | None = None) -> list[str]:
    return list(
        visible_workloads(team_ids, rbac)
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


# The list's figure sorts as the read layer's ranking keys (``HourlyRollupQuerySet.ranking``).
RANK_BY = {"gpu_hours": "allocated_gpu_hours", "idle_share": "idle_share", "cost": "cost"}
# Ties (and the workloads a figure does not rank) in the list's "newest" order.
NEWEST = ("-observed_at", "pk")


class RankedWorkloads:
    """The ids of the matching workloads sorted by a figure over a span, for a ``Paginator``.

    The read layer ranks the workloads that have the figure there, largest first (ties newest
    first), returning the ids only as far as the page asked for reaches; after them come the
    matches it does not rank (no rollups in the span, or a ratio without a denominator), newest
    first, read a page at a time. A page is one ranking query, a count, and, past the ranked
    workloads, one more query.
    """

    def __init__(self, matched: QuerySet[Workload], sort: str, span: HourSpan) -> None:
        self.matched = matched
        self.sort = sort
        self.span = span
        rollups = HourlyRollup.objects.for_scope(RollupScope.WORKLOAD).covering(span)
        # Every workload matches (no filter, no team restriction): no semi-join to read.
        every = not matched.query.where
        if every:
            rollups = rollups.filter(workload__isnull=False)
        else:
            rollups = rollups.filter(workload__in=matched.values("pk"))
        self.rollups = rollups
        self.priced: list[tuple[str, Any, int]] = []
        if sort == "cost":
            pricer = Pricer(span.first, span.stop, settings.GPULEDGER_CURRENCY, chargeback_model())
            self.priced = pricer.priced_components()
        # The top of the ranking read so far, and whether it is all of it.
        self._top: list[int] = []
        self._complete = span.count <= 0
        self._count: int | None = None

    def _ranked(self, stop: int) -> list[int]:
        """The first ``stop`` ranked ids (fewer: all of them)."""
        if not self._complete and len(self._top) < stop:
            # Ties newest first, as NEWEST orders the workloads.
            self._top = self.rollups.ranking(
                "workload_id",
                RANK_BY[self.sort],
                priced=self.priced,
                then=("-workload__observed_at", "workload_id"),
                limit=stop,
                big_scan=True,
            )
            self._complete = len(self._top) < stop
        return self._top[:stop]

    def count(self) -> int:
        if self._count is None:
            self._count = self.matched.count()
        return self._count

    def __len__(self) -> int:
        return self.count()

    def __iter__(self) -> Iterator[int]:
        return iter(self[0 : self.count()])

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, int):
            return self[index : index + 1][0]
        start, stop, _step = index.indices(self.count())
        ranked = self._ranked(stop)
        ids = ranked[start:stop]
        if len(ranked) < stop:
            # Past the ranked workloads (all of them read): the matches the ranking left out,
            # newest first.
            ranked_ids = self.rollups.ranked("workload_id", RANK_BY[self.sort], priced=self.priced)
            rest = self.matched.exclude(pk__in=ranked_ids.order_by()).order_by(*NEWEST)
            first = max(start, len(ranked)) - len(ranked)
            ids += list(rest.values_list("pk", flat=True)[first : stop - len(ranked)])
        return ids


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
