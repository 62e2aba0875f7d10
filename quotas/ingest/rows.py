"""The rows of the Kueue ingest: a raw snapshot in, dataclass rows out, gathered in a batch.

``KueueSnapshot`` holds raw LIST items per kind; ``KueueBatch`` holds what ``build_snapshot`` made
of them (one row type per Kubernetes kind, plus transitions and teams) and ``IngestStats`` what it
skipped; ``QueueSampleRow`` is one per-window ClusterQueue x flavor figure.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from quotas.choices import HOLDING_STATES

logger = logging.getLogger(__name__)


@dataclass
class KueueSnapshot:
    """Raw LIST items per kind at one moment; only ``complete`` kinds may mark objects deleted."""

    observed_at: datetime
    resource_flavors: list[dict] = field(default_factory=list)
    cohorts: list[dict] = field(default_factory=list)
    cluster_queues: list[dict] = field(default_factory=list)
    local_queues: list[dict] = field(default_factory=list)
    workloads: list[dict] = field(default_factory=list)
    workload_priority_classes: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)
    nodes: list[dict] = field(default_factory=list)
    complete: frozenset[str] = frozenset()


@dataclass
class IngestStats:
    records_read: int = 0
    skipped: int = 0
    skip_reasons: Counter[str] = field(default_factory=Counter)

    def skip(self, kind: str, ident: str, reason: str, detail: str = "") -> None:
        self.skipped += 1
        self.skip_reasons[f"{kind}: {reason}"] += 1
        logger.warning("Skipping %s %s: %s %s", kind, ident or "?", reason, detail)


@dataclass
class ObjectMeta:
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    created_at: datetime | None = None
    owner_references: list[dict] = field(default_factory=list)


@dataclass
class FlavorRow:
    meta: ObjectMeta
    node_labels: dict[str, str]
    node_taints: list[dict]
    tolerations: list[dict]
    topology_name: str
    gpu_model: str


@dataclass
class QuotaRow:
    flavor_name: str
    resource: str
    position: int
    nominal: Decimal
    borrowing_limit: Decimal | None  # None = unlimited
    lending_limit: Decimal | None  # None = all unused nominal quota is lendable


@dataclass
class QueueUsageRow:
    """A ClusterQueue's or LocalQueue's usage (or reservation) of one flavor and resource."""

    flavor_name: str
    resource: str
    total: Decimal
    borrowed: Decimal


@dataclass
class CohortRow:
    meta: ObjectMeta
    parent_name: str
    implicit: bool
    fair_weight: Decimal | None
    weighted_share: int | None
    resource_groups: list[dict]
    quotas: list[QuotaRow]
    # The field manager that last wrote spec.resourceGroups (managedFields).
    quota_manager: str = ""
    # Which scheduler's object this row was read from (quotas/sources).
    scheduler: str = "kueue"


@dataclass
class ClusterQueueRow:
    meta: ObjectMeta
    cohort_name: str
    team_name: str
    team_from_label: bool  # False: named after the queue, an admin's choice may override it
    namespace_selector: dict
    queueing_strategy: str
    stop_policy: str
    reclaim_within_cohort: str
    within_cluster_queue: str
    borrow_within_cohort: str
    borrow_within_cohort_max_priority: int | None
    fair_weight: Decimal | None
    weighted_share: int | None
    pending_workloads: int
    reserving_workloads: int
    admitted_workloads: int
    active: bool
    quotas: list[QuotaRow]
    usage: list[QueueUsageRow]
    reservation: list[QueueUsageRow]
    # The field manager that last wrote spec.resourceGroups / stopPolicy (managedFields).
    quota_manager: str = ""
    # Which scheduler's object this row was read from (quotas/sources).
    scheduler: str = "kueue"


@dataclass
class LocalQueueRow:
    meta: ObjectMeta
    cluster_queue_name: str
    pending_workloads: int
    reserving_workloads: int
    admitted_workloads: int
    usage: list[QueueUsageRow]


@dataclass
class PriorityClassRow:
    meta: ObjectMeta
    value: int
    description: str


@dataclass
class WorkloadRow:
    meta: ObjectMeta
    owner_kind: str
    owner_name: str
    owner_uid: str
    job_uid: str
    queue_name: str
    cluster_queue_name: str
    priority: int
    priority_class_name: str
    active: bool
    pod_sets: list[dict]
    requested_gpus: float
    admitted_gpus: float
    flavors: dict[str, str]
    state: str
    state_reason: str
    state_message: str
    quota_reserved_at: datetime | None
    admitted_at: datetime | None
    finished_at: datetime | None
    accumulated_execution_seconds: int
    requeue_count: int
    requeue_at: datetime | None
    requests: dict[str, Decimal]  # whole gang, per resource
    usage: dict[tuple[str, str], Decimal]  # (flavor, resource) held now; empty unless holding
    podset_flavors: dict[str, dict[str, str]]  # pod set -> {resource: flavor}
    owner_pod_uids: tuple[str, ...]  # Pods in ownerReferences (plain pods, LWS)
    borrowing: bool = False
    borrowed_gpus: float = 0.0
    # status.schedulingStats.evictions, summed: evictions whose times the conditions may not show.
    evictions_total: int = 0
    # Which scheduler's object this row was read from (quotas/sources).
    scheduler: str = "kueue"
    # The PodGroup a translated Workload stands for (Volcano, KAI), whose pods name it.
    pod_group: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.meta.namespace, self.meta.name)

    @property
    def holding(self) -> bool:
        return self.state in HOLDING_STATES


@dataclass
class TransitionRow:
    workload_namespace: str
    workload_name: str
    kind: str
    at: datetime
    reason: str = ""
    message: str = ""
    preemptor_uid: str = ""
    preemptor_job_uid: str = ""
    preemptor_path: str = ""
    requeue_at: datetime | None = None


@dataclass
class PodRow:
    """A pod that requests GPUs, joined to its Workload when it can be."""

    meta: ObjectMeta
    node_name: str
    phase: str
    started_at: datetime | None
    finished_at: datetime | None
    gpus: float
    resource: str
    requests: dict[str, Decimal]
    workload_name: str
    joined_by: str
    cluster_queue_name: str
    local_queue_name: str
    podset: str
    flavor: str

    @property
    def running(self) -> bool:
        return self.phase == "Running" and bool(self.node_name)


@dataclass
class NodeRow:
    meta: ObjectMeta
    gpu_product: str
    node_pool: str
    flavor: str
    gpu_capacity: int
    gpu_allocatable: int
    mig_allocatable: dict[str, int]


@dataclass
class TeamRow:
    name: str
    cluster_queues: list[str]
    namespaces: list[str]


@dataclass
class KueueBatch:
    observed_at: datetime
    flavors: list[FlavorRow] = field(default_factory=list)
    cohorts: list[CohortRow] = field(default_factory=list)
    cluster_queues: list[ClusterQueueRow] = field(default_factory=list)
    local_queues: list[LocalQueueRow] = field(default_factory=list)
    priority_classes: list[PriorityClassRow] = field(default_factory=list)
    workloads: list[WorkloadRow] = field(default_factory=list)
    transitions: list[TransitionRow] = field(default_factory=list)
    pods: list[PodRow] = field(default_factory=list)
    nodes: list[NodeRow] = field(default_factory=list)
    teams: list[TeamRow] = field(default_factory=list)
    # Identities of every object read per kind, skipped ones included, so a malformed object is
    # never mistaken for a deleted one. Kinds holding an object without a readable identity are
    # in ``unidentified`` and are not marked deleted this round.
    seen: dict[str, set[tuple[str, ...]]] = field(default_factory=lambda: defaultdict(set))
    unidentified: set[str] = field(default_factory=set)
    stats: IngestStats = field(default_factory=IngestStats)


@dataclass
class QueueSampleRow:
    cluster_queue_name: str
    flavor_name: str
    resource: str
    total: Decimal
    reserved: Decimal
    borrowed: Decimal
    lent: Decimal
    nominal: Decimal
    borrowing_limit: Decimal | None
    lending_limit: Decimal | None
    # None: unknown (a scheduler's metrics that do not export it).
    pending_demand: Decimal | None
    pending_workloads: int | None
    admitted_workloads: int | None
