"""The chargeback's one aggregate query (through the rollup read layer) and who sees what."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Exists, F, OuterRef, Q, Value
from django.db.models.functions import Concat, TruncDay, TruncMonth

from fleet.models import Cluster
from ledger.chargeback.base import AGGREGATE_GROUPS, CHARGEBACK_FIGURES, Charge
from ledger.chargeback.pricing import Pricer
from ledger.models import HourlyRollup
from quotas.models import ClusterQueue, LocalQueue, Team, TeamNamespace, Workload


@dataclass(frozen=True)
class Piece:
    """One (cluster, key, flavor, GPU model[, period][, segment]) aggregate, priced."""

    cluster_id: int
    key: str
    period: datetime | None
    figures: Charge
    extra: dict[str, Any]


def period_expression(trunc: str | None) -> Any:
    if trunc == "hour":
        return F("hour")
    if trunc == "day":
        return TruncDay("hour", tzinfo=UTC)
    if trunc == "month":
        return TruncMonth("hour", tzinfo=UTC)
    return None


def aggregate_pieces(
    *,
    start: datetime,
    end: datetime,
    scope: str,
    pricer: Pricer,
    cluster: Cluster | None = None,
    trunc: str | None = None,
    restrict: Q | None = None,
    extra_fields: Iterable[str] = (),
    groups: int | None = None,
) -> Iterator[Piece]:
    """Priced sums of the rollups of ``scope`` over the hours ``[start, end)`` counts, one query
    (``groups``: the rows a whole report expects, for the aggregate's plan)."""
    rollups = HourlyRollup.objects.for_scope(scope).covering(start, end)
    if cluster is not None:
        rollups = rollups.filter(cluster=cluster)
    if restrict is not None:
        rollups = rollups.filter(restrict)
    computed: dict[str, Any] = {}
    group_fields = ["cluster_id", "key", "flavor", "gpu_model", *extra_fields]
    period = period_expression(trunc)
    if period is not None:
        computed["period"] = period
        group_fields.append("period")
    segment = pricer.segment_expression()
    if segment is not None:
        computed["segment"] = segment
        group_fields.append("segment")
    found = rollups.figures(
        group_fields,
        names=CHARGEBACK_FIGURES,
        computed=computed,
        big_scan=True,
        hash_groups=groups,
        into=Charge,
    )
    column = {name: index for index, name in enumerate(group_fields)}
    extra_columns = [(name, column[name]) for name in extra_fields]
    period_column, segment_column = column.get("period"), column.get("segment")
    for group, figures in found.items():
        cluster_id, key, flavor, gpu_model = group[:4]
        segment_index = 0 if segment_column is None else group[segment_column]
        pricer.price_piece(figures, flavor, gpu_model, segment_index)
        yield Piece(
            cluster_id=cluster_id,
            key=key,
            period=None if period_column is None else group[period_column].astimezone(UTC),
            figures=figures,
            extra={name: group[index] for name, index in extra_columns},
        )


# --- Who sees what ------------------------------------------------------------------------------


def pairs_q(pairs: Iterable[tuple[int, str]]) -> Q:
    """``(cluster, key) in pairs`` as a Q on HourlyRollup."""
    by_cluster: dict[int, set[str]] = {}
    for cluster_id, key in pairs:
        by_cluster.setdefault(cluster_id, set()).add(key)
    condition = Q(pk__in=[])
    for cluster_id, keys in by_cluster.items():
        condition |= Q(cluster_id=cluster_id, key__in=sorted(keys))
    return condition


def visible_namespaces(team_ids: set[int]) -> set[tuple[int, str]]:
    """Namespaces of a lead's teams: TeamNamespace, and their ClusterQueues' LocalQueues."""
    owned = TeamNamespace.objects.filter(team_id__in=team_ids).values_list(
        "cluster_id", "namespace"
    )
    queued = LocalQueue.objects.filter(cluster_queue__team_id__in=team_ids).values_list(
        "cluster_id", "namespace"
    )
    return set(owned) | set(queued)


def restriction(group_by: str, team_ids: set[int] | None) -> Q | None:
    """The rollup rows a user may see for ``group_by``; None = all (staff, finance)."""
    if team_ids is None or group_by in AGGREGATE_GROUPS:
        return None
    if group_by == "team":
        names = Team.objects.filter(id__in=team_ids).values_list("name", flat=True)
        return Q(key__in=list(names))
    if group_by == "cluster_queue":
        queues = ClusterQueue.objects.filter(team_id__in=team_ids).values_list("cluster_id", "name")
        return pairs_q(queues)
    if group_by == "local_queue":
        local = LocalQueue.objects.filter(cluster_queue__team_id__in=team_ids).values_list(
            "cluster_id", "namespace", "name"
        )
        return pairs_q((c, f"{ns}/{name}") for c, ns, name in local)
    if group_by == "namespace":
        return pairs_q(visible_namespaces(team_ids))
    if group_by == "workload":
        workloads = (
            Workload.objects.filter(
                cluster_id=OuterRef("cluster_id"),
                cluster_queue__team_id__in=team_ids,
            )
            .annotate(path=Concat("namespace", Value("/"), "name"))
            .filter(path=OuterRef("key"))
        )
        return Q(Exists(workloads))
    raise ValueError(group_by)
