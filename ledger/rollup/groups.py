"""The nine rollup scopes: how a usage row or queue sample maps to a group, and what a row carries.

Scopes and keys: fleet → cluster name; node → node name; flavor → flavor; team → team name;
cohort → the ClusterQueue's cohort name (the direct cohort; parents are not summed; a standalone
queue's is ``(no cohort)``, which is attributed, unlike ``(unattributed)``); cluster_queue
→ queue name; local_queue and workload → ``namespace/name``; namespace → namespace. Usage with no
such group (no team, no queue, no workload, empty node or flavor name) goes to the key
``(unattributed)`` (a string no Kubernetes name can take), so every scope's rows sum to the fleet
row; likewise queue samples of a queue without team or cohort. Fleet, node and flavor rows count
every usage row (capacity needs the unallocated GPUs); the other scopes only allocated rows, which
is all the usage figures look at anyway.

Every row is split by (flavor, GPU model) as in ``fleet_rollup_identity``; ``peak_allocated_gpus``
is per split: the peaks of two splits do not add up to the group's peak.

Foreign keys: team rows carry the team; cluster_queue rows the queue and its owning team;
local_queue rows the LocalQueue's ClusterQueue and its team; workload rows the workload and the
ClusterQueue and team its usage was attributed to (the largest id should rows disagree).
``(unattributed)`` rows carry none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Case, CharField, Expression, F, Max, Value, When
from django.db.models.functions import Coalesce, NullIf

from ledger.choices import RollupScope
from quotas.models import ClusterQueue, LocalQueue, Team, Workload

UNATTRIBUTED = "(unattributed)"
# The cohort group of a standalone ClusterQueue: attributed (to its queue), just in no cohort.
NO_COHORT = "(no cohort)"
FOREIGN_KEYS = ("team_id", "cluster_queue_id", "workload_id")


@dataclass(frozen=True)
class Group:
    """How one scope names its groups and which foreign keys its rows carry."""

    scope: str
    key: Expression | F | Value
    allocated_only: bool
    # The key is the id of this kind of object, named after the GROUP BY: grouping 3 M rows by an
    # integer is much cheaper than by a joined and concatenated name.
    named_by: str | None = None
    team: F | None = None
    cluster_queue: F | None = None
    workload: F | None = None

    def foreign_keys(self) -> dict[str, F | None]:
        return {
            "team_id": self.team,
            "cluster_queue_id": self.cluster_queue,
            "workload_id": self.workload,
        }

    def carried_keys(self) -> list[str]:
        """The foreign keys the GROUP BY itself fills in (the others come from ``name_rows``)."""
        return [name for name, expression in self.foreign_keys().items() if expression is not None]

    def fk_maxima(self) -> dict[str, Max]:
        """``fk_<name>`` aggregates of the carried foreign keys, for an ORM GROUP BY."""
        return {
            f"fk_{name}": Max(expression)
            for name, expression in self.foreign_keys().items()
            if expression is not None
        }


def _named(field: str) -> Coalesce:
    """A name column, with empty and missing names as the unattributed bucket."""
    return Coalesce(NullIf(F(field), Value("")), Value(UNATTRIBUTED), output_field=CharField())


def _cohort(prefix: str) -> Case:
    """The cohort of a ClusterQueue: the Cohort row, else the name an implicit cohort goes by,
    else ``(no cohort)`` for a standalone queue; no queue at all is unattributed."""
    queue = prefix.rstrip("_") or "cluster_queue"
    return Case(
        When(**{f"{queue}__isnull": True}, then=Value(UNATTRIBUTED)),
        default=Coalesce(
            F(f"{prefix}cohort__name"),
            NullIf(F(f"{prefix}cohort_name"), Value("")),
            Value(NO_COHORT),
            output_field=CharField(),
        ),
        output_field=CharField(),
    )


def usage_groups(cluster_name: str) -> list[Group]:
    """Every scope's groups over ``GpuUsage`` rows."""
    return [
        Group(RollupScope.FLEET, Value(cluster_name, output_field=CharField()), False),
        Group(RollupScope.NODE, _named("node_name"), False),
        Group(RollupScope.FLAVOR, _named("flavor"), False),
        Group(RollupScope.TEAM, F("team"), True, named_by="team"),
        Group(RollupScope.COHORT, _cohort("cluster_queue__"), True),
        Group(RollupScope.CLUSTER_QUEUE, F("cluster_queue"), True, named_by="cluster_queue"),
        Group(RollupScope.LOCAL_QUEUE, F("local_queue"), True, named_by="local_queue"),
        Group(RollupScope.NAMESPACE, _named("namespace"), True),
        Group(
            RollupScope.WORKLOAD,
            F("workload"),
            True,
            named_by="workload",
            team=F("team"),
            cluster_queue=F("cluster_queue"),
        ),
    ]


def quota_groups(cluster_name: str) -> list[Group]:
    """The scopes that carry quota figures, over ``ClusterQueueSample`` rows."""
    return [
        Group(RollupScope.FLEET, Value(cluster_name, output_field=CharField()), False),
        Group(RollupScope.FLAVOR, _named("flavor_name"), False),
        Group(
            RollupScope.TEAM,
            Coalesce(F("cluster_queue__team__name"), Value(UNATTRIBUTED), output_field=CharField()),
            False,
            team=F("cluster_queue__team"),
        ),
        Group(RollupScope.COHORT, _cohort("cluster_queue__"), False),
        Group(
            RollupScope.CLUSTER_QUEUE,
            F("cluster_queue__name"),
            False,
            team=F("cluster_queue__team"),
            cluster_queue=F("cluster_queue"),
        ),
    ]


def _names(kind: str, ids: set[int]) -> dict[int, dict[str, Any]]:
    """Key and foreign keys of the rows grouped by the id of a team, queue or workload."""
    if kind == "team":
        return {
            pk: {"key": team.name, "team_id": pk}
            for pk, team in Team.objects.only("name").in_bulk(ids).items()
        }
    if kind == "cluster_queue":
        return {
            pk: {"key": queue.name, "cluster_queue_id": pk, "team_id": queue.team_id}
            for pk, queue in ClusterQueue.objects.only("name", "team").in_bulk(ids).items()
        }
    if kind == "local_queue":
        local_queues = LocalQueue.objects.select_related("cluster_queue").only(
            "namespace", "name", "cluster_queue", "cluster_queue__team"
        )
        return {
            pk: {
                "key": f"{queue.namespace}/{queue.name}",
                "cluster_queue_id": queue.cluster_queue_id,
                "team_id": queue.cluster_queue.team_id if queue.cluster_queue else None,
            }
            for pk, queue in local_queues.in_bulk(ids).items()
        }
    return {
        pk: {"key": f"{workload.namespace}/{workload.name}", "workload_id": pk}
        for pk, workload in Workload.objects.only("namespace", "name").in_bulk(ids).items()
    }


def name_rows(group: Group, rows: list[dict[str, Any]]) -> None:
    """Replace id keys by names; missing ids (none, or deleted meanwhile) are unattributed."""
    if group.named_by is None:
        return
    names = _names(group.named_by, {row["key"] for row in rows if row["key"] is not None})
    unattributed = {"key": UNATTRIBUTED, **dict.fromkeys(FOREIGN_KEYS)}
    for row in rows:
        row.update(names.get(row["key"], unattributed))
