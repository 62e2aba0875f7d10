"""Kueue, Pod and Node LIST payloads -> plain rows. Pure: no database, no network (STYLE rule 10).

``snapshot_from_lists`` wraps raw LIST payloads; ``build_snapshot`` turns them into a ``KueueBatch``
of dataclass rows that ``quotas.store.write_snapshot`` upserts; ``build_queue_samples`` and
``cohort_totals`` derive per-window queue figures from a batch.

Both Kueue API versions are read per object by its ``apiVersion`` (DESIGN "Upstream facts"):
v1beta1 ``spec.cohort`` / ``priorityClassName`` + ``priorityClassSource`` /
``accumulatedPastExexcutionTimeSeconds`` (the typo is in the API) / LocalQueue ``flavorUsage``;
v1beta2 ``spec.cohortName`` / ``priorityClassRef`` / ``accumulatedPastExecutionTimeSeconds`` /
``flavorsUsage``. A malformed object (missing metadata or name, wrong types, unknown apiVersion,
unparsable quantity or time) is logged, counted in ``stats.skip_reasons`` and left out; the rest of
the batch is kept.

Readings worth knowing:

* Workload state, first match wins: ``Finished=True`` -> succeeded (reason ``Succeeded``) or
  failed (any other reason); ``Evicted=True`` -> inactive (deactivation reasons or
  ``spec.active: false``), preempted (``Preempted=True``), requeued (``Requeued`` not True while
  ``status.requeueState.requeueAt`` is set: waiting out a backoff), else evicted;
  ``spec.active: false`` -> inactive; ``Admitted=True`` -> admitted; ``QuotaReserved=True`` ->
  quota_reserved; else pending. An eviction in progress therefore no longer counts as holding.
* ``admitted_gpus`` and the per-flavor usage come from ``status.admission`` only while the
  Workload holds quota (admitted / quota_reserved): finished Workloads keep ``status.admission``
  but hold nothing. Their flavors are kept for history.
* GPUs are counted as GPU equivalents: ``nvidia.com/gpu`` one each, ``nvidia.com/mig-Ng.*`` N/7.
* One transition per condition occurrence, keyed (workload, kind, lastTransitionTime):
  QuotaReserved/Admitted/PodsReady/Preempted/Finished when True; Evicted when True (as
  ``deactivated`` for the deactivation reasons); Requeued when True, or when False with a
  ``requeueState.requeueAt`` (the backoff, carrying ``requeue_at``).
* Borrowing by admission order: per ClusterQueue, flavor and GPU resource, holding Workloads are
  ordered by ``quota_reserved_at`` then namespace/name; the part of each one's usage that takes
  the running sum above the flavor's nominal quota is its ``borrowed_gpus``.
* Team of a ClusterQueue: the first of ``team_labels`` present on it, else the queue's name,
  slugified (``Team.name`` is a slug). A LocalQueue's namespace goes to the team of its queue;
  when LocalQueues of one namespace point at queues of different teams, the first by
  (namespace, name) wins.
* A Node's flavor is the ResourceFlavor whose ``nodeLabels`` all match the node's labels; the one
  with the most labels wins, then the name. Flavors without ``nodeLabels`` match no node.
"""

from __future__ import annotations

import functools
import logging
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.utils.text import slugify

from core.mig import GPU_RESOURCE, MIG_RESOURCE_PREFIX, mig_slices
from core.quantity import parse_quantity
from core.timewindows import ensure_aware
from quotas import constants as c
from quotas.choices import HOLDING_STATES, TransitionKind, WorkloadState

logger = logging.getLogger(__name__)

ZERO = Decimal(0)
PENDING_STATES = frozenset(
    {
        WorkloadState.PENDING,
        WorkloadState.EVICTED,
        WorkloadState.PREEMPTED,
        WorkloadState.REQUEUED,
    }
)
KINDS = tuple(c.LIST_KINDS.values())
NAMESPACED_KINDS = frozenset({"LocalQueue", "Workload", "Pod"})
_PREEMPTOR_UIDS = re.compile(r"\(UID: (?P<uid>[^,)\s]+)(?:, JobUID: (?P<job_uid>[^)\s]+))?\)")
_PREEMPTOR_PATH = re.compile(r"preemptor path: (?P<path>[^;]+)")


class Malformed(ValueError):
    """An object we cannot read; ``reason`` is the short code counted in ``skip_reasons``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


# ---------------------------------------------------------------------------------------------
# Snapshot and rows


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
class UsageRow:
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
    usage: list[UsageRow]
    reservation: list[UsageRow]


@dataclass
class LocalQueueRow:
    meta: ObjectMeta
    cluster_queue_name: str
    pending_workloads: int
    reserving_workloads: int
    admitted_workloads: int
    usage: list[UsageRow]


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
    pending_demand: Decimal
    pending_workloads: int
    admitted_workloads: int


# ---------------------------------------------------------------------------------------------
# Small readers: each raises Malformed instead of letting a KeyError or TypeError through.


def _dict(value: object, what: str, *, required: bool = False) -> dict:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise Malformed("wrong_type", f"{what} is not an object")
    return value


def _list(value: object, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed("wrong_type", f"{what} is not a list")
    return value


def _str(value: object, what: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise Malformed("wrong_type", f"{what} is not a string")
    return value


def _int(value: object, what: str, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed("wrong_type", f"{what} is not an integer")
    return value


def _bool(value: object, what: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise Malformed("wrong_type", f"{what} is not a boolean")
    return value


def _str_map(value: object, what: str) -> dict[str, str]:
    mapping = _dict(value, what)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise Malformed("wrong_type", f"{what} has non-string entries")
    return mapping


# The same few quantity strings ("8", "500m", "64Gi") recur across tens of thousands of objects;
# Decimals are immutable, so one parse per distinct string serves them all.
_parse_text = functools.lru_cache(maxsize=4096)(parse_quantity)


def _parse(value: object) -> Decimal:
    # Only strings are cached: True == 1 and 1 == 1.0 share a cache entry.
    return _parse_text(value) if type(value) is str else parse_quantity(value)


def _quantity(value: object, what: str) -> Decimal:
    try:
        return _parse(value)
    except ValueError as exc:
        raise Malformed("bad_quantity", f"{what}: {value!r}") from exc


def _optional_quantity(value: object, what: str) -> Decimal | None:
    return None if value is None else _quantity(value, what)


def _time(value: object, what: str) -> datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise Malformed("bad_time", f"{what}: {value!r}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise Malformed("bad_time", f"{what}: {value!r}") from exc
    if moment.tzinfo is None:
        raise Malformed("bad_time", f"{what} has no offset: {value!r}")
    return moment.astimezone(UTC)


def _int_or_none(value: object, what: str) -> int | None:
    return None if value is None else _int(value, what)


def is_gpu_resource(resource: str) -> bool:
    return resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)


def gpu_equivalent(resource: str, amount: Decimal) -> Decimal:
    """GPUs an amount of a resource stands for: 1 per ``nvidia.com/gpu``, N/7 per MIG ``Ng``."""
    if resource == GPU_RESOURCE:
        return amount
    if resource.startswith(MIG_RESOURCE_PREFIX):
        slices = mig_slices(resource[len(MIG_RESOURCE_PREFIX) :])
        if slices is None:
            raise Malformed("bad_mig_profile", resource)
        return amount * Decimal(slices) / c.MIG_COMPUTE_SLICES
    return ZERO


def _gpus(requests: Mapping[str, Decimal]) -> Decimal:
    return sum((gpu_equivalent(r, v) for r, v in requests.items() if is_gpu_resource(r)), ZERO)


def _to_float(value: Decimal) -> float:
    return round(float(value), 6)


# ---------------------------------------------------------------------------------------------
# Snapshot


def snapshot_from_lists(observed_at: datetime, **lists: dict | None) -> KueueSnapshot:
    """Wrap raw LIST payloads (``{"items": [...]}``) keyed like ``KueueSnapshot``'s fields.

    A kind is complete when its payload is a LIST with an ``items`` list and no ``continue``
    token (the pagination was followed to the end). A missing, ``None`` or malformed payload
    (a failed LIST) leaves the kind incomplete. Items without ``apiVersion``/``kind`` (the API
    server leaves them out on built-in types) inherit them from the LIST.
    """
    unknown = set(lists) - set(c.LIST_KINDS)
    if unknown:
        raise TypeError(f"unknown LIST keyword(s): {', '.join(sorted(unknown))}")
    complete: set[str] = set()
    values: dict[str, list[dict]] = {}
    for keyword, kind in c.LIST_KINDS.items():
        payload = lists.get(keyword)
        values[keyword] = []
        if payload is None:
            continue
        items = payload.get("items") if isinstance(payload, dict) else None
        if not isinstance(items, list):
            logger.warning("%s LIST payload has no items list; treating it as failed", kind)
            continue
        list_meta = payload.get("metadata")
        token = list_meta.get("continue") if isinstance(list_meta, dict) else None
        if token:
            logger.warning("%s LIST is a partial page (continue token); not complete", kind)
        else:
            complete.add(kind)
        api_version = payload.get("apiVersion")
        values[keyword] = [_with_type(item, api_version, kind) for item in items]
    return KueueSnapshot(
        observed_at=ensure_aware(observed_at), complete=frozenset(complete), **values
    )


def _with_type(item: Any, api_version: object, kind: str) -> Any:
    if not isinstance(item, dict) or ("apiVersion" in item and "kind" in item):
        return item
    return {"apiVersion": api_version, "kind": kind, **item}


# ---------------------------------------------------------------------------------------------
# Build


def build_snapshot(
    snap: KueueSnapshot,
    team_labels: Sequence[str],
    node_pool_labels: Sequence[str] = c.NODE_POOL_LABELS,
) -> KueueBatch:
    """Turn a snapshot into rows. Never raises on bad objects: they are skipped and counted."""
    batch = KueueBatch(observed_at=ensure_aware(snap.observed_at))
    read = _Reader(batch)
    batch.flavors = read.each("ResourceFlavor", snap.resource_flavors, _flavor)
    explicit_cohorts = read.each("Cohort", snap.cohorts, _cohort)
    batch.cluster_queues = read.each(
        "ClusterQueue",
        snap.cluster_queues,
        lambda item, meta: _cluster_queue(item, meta, team_labels),
    )
    batch.cohorts = _with_implicit_cohorts(
        explicit_cohorts, batch.cluster_queues, batch.seen["Cohort"]
    )
    batch.local_queues = read.each("LocalQueue", snap.local_queues, _local_queue)
    batch.priority_classes = read.each(
        "WorkloadPriorityClass", snap.workload_priority_classes, _priority_class
    )
    lq_targets = {
        (lq.meta.namespace, lq.meta.name): lq.cluster_queue_name for lq in batch.local_queues
    }
    class_values = {pc.meta.name: pc.value for pc in batch.priority_classes}
    parsed = read.each(
        "Workload",
        snap.workloads,
        lambda item, meta: _workload(item, meta, lq_targets, class_values),
    )
    batch.workloads = [row for row, _ in parsed]
    batch.transitions = [t for _, transitions in parsed for t in transitions]
    _infer_borrowing(batch.workloads, batch.cluster_queues)
    batch.nodes = [
        row
        for row in read.each(
            "Node",
            snap.nodes,
            lambda item, meta: _node(item, meta, batch.flavors, node_pool_labels),
        )
        if row is not None
    ]
    joiner = _PodJoiner(batch.workloads)
    batch.pods = [
        row
        for row in read.each("Pod", snap.pods, lambda item, meta: _pod(item, meta, joiner))
        if row is not None
    ]
    _fill_flavor_gpu_models(batch.flavors, batch.nodes)
    batch.teams = _teams(batch.cluster_queues, batch.local_queues)
    logger.info(
        "Kueue snapshot: %d read, %d skipped, %d workloads, %d pods, %d transitions",
        batch.stats.records_read,
        batch.stats.skipped,
        len(batch.workloads),
        len(batch.pods),
        len(batch.transitions),
    )
    return batch


class _Reader:
    """Runs one parser per item, skipping (and counting) what cannot be read."""

    def __init__(self, batch: KueueBatch) -> None:
        self.batch = batch

    def each(self, kind: str, items: Iterable[Any], parse: Any) -> list:
        rows = []
        for item in items:
            self.batch.stats.records_read += 1
            ident = ""
            try:
                meta = _meta(item, kind)
                ident = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
                key = (meta.namespace, meta.name) if kind in NAMESPACED_KINDS else (meta.name,)
                if key in self.batch.seen[kind]:
                    raise Malformed("duplicate", "listed twice")
                self.batch.seen[kind].add(key)
                _check_api_version(item, kind)
                rows.append(parse(item, meta))
            except Malformed as exc:
                if exc.reason in {"missing_metadata", "missing_name", "missing_namespace"}:
                    self.batch.unidentified.add(kind)
                self.batch.stats.skip(kind, ident, exc.reason, exc.detail)
        return rows


def _check_api_version(item: dict, kind: str) -> None:
    api_version = item.get("apiVersion")
    if api_version not in c.API_VERSIONS[kind]:
        raise Malformed("unknown_api_version", repr(api_version))
    if item.get("kind") not in (None, kind):
        raise Malformed("unexpected_kind", repr(item.get("kind")))


def _meta(item: Any, kind: str) -> ObjectMeta:
    if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
        raise Malformed("missing_metadata")
    metadata = item["metadata"]
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise Malformed("missing_name")
    namespace = metadata.get("namespace")
    if kind in NAMESPACED_KINDS:
        if not isinstance(namespace, str) or not namespace:
            raise Malformed("missing_namespace")
    else:
        namespace = ""
    owners = _list(metadata.get("ownerReferences"), "metadata.ownerReferences")
    if not all(isinstance(o, dict) for o in owners):
        raise Malformed("wrong_type", "metadata.ownerReferences")
    return ObjectMeta(
        name=name,
        namespace=namespace,
        uid=_str(metadata.get("uid"), "metadata.uid"),
        resource_version=_str(metadata.get("resourceVersion"), "metadata.resourceVersion"),
        labels=_str_map(metadata.get("labels"), "metadata.labels"),
        annotations=_str_map(metadata.get("annotations"), "metadata.annotations"),
        created_at=_time(metadata.get("creationTimestamp"), "metadata.creationTimestamp"),
        owner_references=owners,
    )


def _flavor(item: dict, meta: ObjectMeta) -> FlavorRow:
    spec = _dict(item.get("spec"), "spec")
    node_labels = _str_map(spec.get("nodeLabels"), "spec.nodeLabels")
    return FlavorRow(
        meta=meta,
        node_labels=node_labels,
        node_taints=_list(spec.get("nodeTaints"), "spec.nodeTaints"),
        tolerations=_list(spec.get("tolerations"), "spec.tolerations"),
        topology_name=_str(spec.get("topologyName"), "spec.topologyName"),
        gpu_model=node_labels.get(c.LABEL_GPU_PRODUCT, ""),
    )


def _resource_groups(spec: dict) -> list[QuotaRow]:
    rows = []
    for group in _list(spec.get("resourceGroups"), "spec.resourceGroups"):
        group = _dict(group, "resourceGroup", required=True)
        for position, flavor in enumerate(_list(group.get("flavors"), "resourceGroup.flavors")):
            flavor = _dict(flavor, "flavorQuotas", required=True)
            flavor_name = _str(flavor.get("name"), "flavorQuotas.name")
            if not flavor_name:
                raise Malformed("missing_name", "flavorQuotas.name")
            for quota in _list(flavor.get("resources"), "flavorQuotas.resources"):
                quota = _dict(quota, "resourceQuota", required=True)
                resource = _str(quota.get("name"), "resourceQuota.name")
                if not resource:
                    raise Malformed("missing_name", "resourceQuota.name")
                what = f"{flavor_name}/{resource}"
                rows.append(
                    QuotaRow(
                        flavor_name=flavor_name,
                        resource=resource,
                        position=position,
                        nominal=_quantity(quota.get("nominalQuota", "0"), f"{what} nominalQuota"),
                        borrowing_limit=_optional_quantity(
                            quota.get("borrowingLimit"), f"{what} borrowingLimit"
                        ),
                        lending_limit=_optional_quantity(
                            quota.get("lendingLimit"), f"{what} lendingLimit"
                        ),
                    )
                )
    return rows


def _fair_sharing(item: dict) -> tuple[Decimal | None, int | None]:
    spec = _dict(item.get("spec"), "spec")
    status = _dict(item.get("status"), "status")
    weight = _dict(spec.get("fairSharing"), "spec.fairSharing").get("weight")
    share = _dict(status.get("fairSharing"), "status.fairSharing").get("weightedShare")
    return (
        _optional_quantity(weight, "spec.fairSharing.weight"),
        _int_or_none(share, "status.fairSharing.weightedShare"),
    )


def _cohort(item: dict, meta: ObjectMeta) -> CohortRow:
    spec = _dict(item.get("spec"), "spec")
    parent_key = "parent" if item.get("apiVersion") == c.V1ALPHA1 else "parentName"
    fair_weight, weighted_share = _fair_sharing(item)
    return CohortRow(
        meta=meta,
        parent_name=_str(spec.get(parent_key), f"spec.{parent_key}"),
        implicit=False,
        fair_weight=fair_weight,
        weighted_share=weighted_share,
        resource_groups=_list(spec.get("resourceGroups"), "spec.resourceGroups"),
        quotas=_resource_groups(spec),
    )


def _usage(entries: object, what: str) -> list[UsageRow]:
    rows = []
    for flavor in _list(entries, what):
        flavor = _dict(flavor, what, required=True)
        flavor_name = _str(flavor.get("name"), f"{what}.name")
        for resource in _list(flavor.get("resources"), f"{what}.resources"):
            resource = _dict(resource, f"{what}.resources", required=True)
            name = _str(resource.get("name"), f"{what}.resources.name")
            rows.append(
                UsageRow(
                    flavor_name=flavor_name,
                    resource=name,
                    total=_quantity(resource.get("total", "0"), f"{what} {name} total"),
                    borrowed=_quantity(resource.get("borrowed", "0"), f"{what} {name} borrowed"),
                )
            )
    return rows


def _condition(conditions: list[dict], kind: str) -> dict | None:
    for cond in conditions:
        if cond.get("type") == kind:
            return cond
    return None


def _conditions(status: dict) -> list[dict]:
    conditions = _list(status.get("conditions"), "status.conditions")
    for cond in conditions:
        cond = _dict(cond, "status.conditions[]", required=True)
        _str(cond.get("type"), "condition.type")
        _str(cond.get("status"), "condition.status")
        _str(cond.get("reason"), "condition.reason")
        _str(cond.get("message"), "condition.message")
    return conditions


def _team_name(labels: Mapping[str, str], team_labels: Sequence[str]) -> str:
    """The team from the first of ``team_labels`` present, else ``""``."""
    for label in team_labels:
        value = slugify(labels.get(label, ""))[:100]
        if value:
            return value
    return ""


def _cluster_queue(item: dict, meta: ObjectMeta, team_labels: Sequence[str]) -> ClusterQueueRow:
    spec = _dict(item.get("spec"), "spec")
    status = _dict(item.get("status"), "status")
    preemption = _dict(spec.get("preemption"), "spec.preemption")
    borrow = _dict(preemption.get("borrowWithinCohort"), "spec.preemption.borrowWithinCohort")
    cohort_key = "cohort" if item.get("apiVersion") == c.V1BETA1 else "cohortName"
    fair_weight, weighted_share = _fair_sharing(item)
    active = _condition(_conditions(status), c.COND_ACTIVE)
    team_name = _team_name(meta.labels, team_labels)
    return ClusterQueueRow(
        meta=meta,
        cohort_name=_str(spec.get(cohort_key), f"spec.{cohort_key}"),
        team_name=team_name or slugify(meta.name)[:100] or meta.name[:100],
        team_from_label=bool(team_name),
        namespace_selector=_dict(spec.get("namespaceSelector"), "spec.namespaceSelector"),
        queueing_strategy=_str(spec.get("queueingStrategy"), "spec.queueingStrategy"),
        stop_policy=_str(spec.get("stopPolicy"), "spec.stopPolicy"),
        reclaim_within_cohort=_str(preemption.get("reclaimWithinCohort"), "reclaimWithinCohort"),
        within_cluster_queue=_str(preemption.get("withinClusterQueue"), "withinClusterQueue"),
        borrow_within_cohort=_str(borrow.get("policy"), "borrowWithinCohort.policy"),
        borrow_within_cohort_max_priority=_int_or_none(
            borrow.get("maxPriorityThreshold"), "borrowWithinCohort.maxPriorityThreshold"
        ),
        fair_weight=fair_weight,
        weighted_share=weighted_share,
        pending_workloads=_int(status.get("pendingWorkloads"), "status.pendingWorkloads"),
        reserving_workloads=_int(status.get("reservingWorkloads"), "status.reservingWorkloads"),
        admitted_workloads=_int(status.get("admittedWorkloads"), "status.admittedWorkloads"),
        active=active is None or active.get("status") == "True",
        quotas=_resource_groups(spec),
        usage=_usage(status.get("flavorsUsage"), "status.flavorsUsage"),
        reservation=_usage(status.get("flavorsReservation"), "status.flavorsReservation"),
    )


def _with_implicit_cohorts(
    explicit: list[CohortRow], cluster_queues: list[ClusterQueueRow], listed: set[tuple[str, ...]]
) -> list[CohortRow]:
    """Explicit Cohorts plus those only named by a ClusterQueue or as a parent.

    A Cohort that was listed but skipped as malformed is not made up as an implicit one.
    """
    known = {row.meta.name for row in explicit} | {key[-1] for key in listed}
    named = sorted(
        {cq.cohort_name for cq in cluster_queues if cq.cohort_name}
        | {row.parent_name for row in explicit if row.parent_name}
    )
    implicit = [
        CohortRow(
            meta=ObjectMeta(name=name),
            parent_name="",
            implicit=True,
            fair_weight=None,
            weighted_share=None,
            resource_groups=[],
            quotas=[],
        )
        for name in named
        if name not in known
    ]
    return explicit + implicit


def _local_queue(item: dict, meta: ObjectMeta) -> LocalQueueRow:
    spec = _dict(item.get("spec"), "spec")
    status = _dict(item.get("status"), "status")
    usage_key = "flavorUsage" if item.get("apiVersion") == c.V1BETA1 else "flavorsUsage"
    cluster_queue = _str(spec.get("clusterQueue"), "spec.clusterQueue")
    if not cluster_queue:
        raise Malformed("missing_field", "spec.clusterQueue")
    return LocalQueueRow(
        meta=meta,
        cluster_queue_name=cluster_queue,
        pending_workloads=_int(status.get("pendingWorkloads"), "status.pendingWorkloads"),
        reserving_workloads=_int(status.get("reservingWorkloads"), "status.reservingWorkloads"),
        admitted_workloads=_int(status.get("admittedWorkloads"), "status.admittedWorkloads"),
        usage=_usage(status.get(usage_key), f"status.{usage_key}"),
    )


def _priority_class(item: dict, meta: ObjectMeta) -> PriorityClassRow:
    return PriorityClassRow(
        meta=meta,
        value=_int(item.get("value"), "value"),
        description=_str(item.get("description"), "description"),
    )


# ---------------------------------------------------------------------------------------------
# Workloads


def _container_requests(container: object, what: str) -> dict[str, Decimal]:
    container = _dict(container, what, required=True)
    resources = _dict(container.get("resources"), f"{what}.resources")
    requests = _dict(resources.get("requests"), f"{what}.resources.requests")
    limits = _dict(resources.get("limits"), f"{what}.resources.limits")
    # Kubernetes defaults a missing request to its limit (always so for extended resources).
    merged = {**limits, **requests}
    result = {}
    for name, value in merged.items():
        try:
            result[name] = _parse(value)
        except ValueError as exc:  # the message is built only when needed: this is a hot loop
            raise Malformed("bad_quantity", f"{what} {name}: {value!r}") from exc
    return result


def _add(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> dict[str, Decimal]:
    result = dict(total)
    for name, value in more.items():
        result[name] = result.get(name, ZERO) + value
    return result


def _max(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> dict[str, Decimal]:
    # max(x, y) per resource, a missing one counting as 0; written out because it runs for every
    # pod and pod set (builtin max keeps x on a tie, and so does this).
    result = {}
    for name, value in a.items():
        other = b.get(name, ZERO)
        result[name] = other if other > value else value
    for name, other in b.items():
        if name not in a:
            result[name] = other if other > ZERO else ZERO
    return result


def pod_requests(spec: dict) -> dict[str, Decimal]:
    """Effective pod requests by the Kubernetes rule.

    max(Σ app containers + Σ sidecars, max over init containers of (its request + the sidecars
    started before it)), plus ``spec.overhead``. Sidecars are init containers with
    ``restartPolicy: Always``.
    """
    containers: dict[str, Decimal] = {}
    for index, container in enumerate(_list(spec.get("containers"), "spec.containers")):
        containers = _add(containers, _container_requests(container, f"containers[{index}]"))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for index, container in enumerate(_list(spec.get("initContainers"), "spec.initContainers")):
        requests = _container_requests(container, f"initContainers[{index}]")
        if container.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, requests)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(sidecars, requests))
    effective = _max(_add(containers, sidecars), init_peak)
    overhead = _dict(spec.get("overhead"), "spec.overhead")
    return _add(effective, {k: _quantity(v, f"overhead {k}") for k, v in overhead.items()})


def _owner(meta: ObjectMeta) -> dict:
    refs = meta.owner_references
    controller = next((ref for ref in refs if ref.get("controller") is True), None)
    return (
        controller
        or next((ref for ref in refs if ref.get("kind") != "Pod"), None)
        or (refs[0] if refs else {})
    )


def _priority_class_name(spec: dict, api_version: str) -> str:
    if api_version == c.V1BETA1:
        return _str(spec.get("priorityClassName"), "spec.priorityClassName")
    ref = _dict(spec.get("priorityClassRef"), "spec.priorityClassRef")
    return _str(ref.get("name"), "spec.priorityClassRef.name")


def _pod_sets(spec: dict) -> tuple[list[dict], dict[str, Decimal]]:
    pod_sets = []
    totals: dict[str, Decimal] = {}
    for index, pod_set in enumerate(_list(spec.get("podSets"), "spec.podSets")):
        pod_set = _dict(pod_set, f"podSets[{index}]", required=True)
        template = _dict(pod_set.get("template"), f"podSets[{index}].template")
        per_pod = pod_requests(_dict(template.get("spec"), f"podSets[{index}].template.spec"))
        count = _int(pod_set.get("count"), f"podSets[{index}].count", default=1)
        entry: dict[str, object] = {
            "name": _str(pod_set.get("name"), f"podSets[{index}].name"),
            "count": count,
            "gpus_per_pod": _to_float(_gpus(per_pod)),
            "resources": {name: str(value) for name, value in sorted(per_pod.items())},
        }
        # How long an evicted pod may take to stop: an input of the reclaim-time estimate.
        grace = _int_or_none(
            _dict(template.get("spec"), "template.spec").get("terminationGracePeriodSeconds"),
            f"podSets[{index}].template.spec.terminationGracePeriodSeconds",
        )
        if grace is not None:
            entry["termination_grace_period_seconds"] = grace
        pod_sets.append(entry)
        totals = _add(totals, {name: value * count for name, value in per_pod.items()})
    return pod_sets, totals


def _admission(status: dict) -> tuple[str, dict[tuple[str, str], Decimal], dict[str, dict]]:
    admission = _dict(status.get("admission"), "status.admission")
    usage: dict[tuple[str, str], Decimal] = {}
    podset_flavors: dict[str, dict[str, str]] = {}
    assignments = _list(admission.get("podSetAssignments"), "admission.podSetAssignments")
    for index, assignment in enumerate(assignments):
        what = f"podSetAssignments[{index}]"
        assignment = _dict(assignment, what, required=True)
        flavors = _str_map(assignment.get("flavors"), f"{what}.flavors")
        podset_flavors[_str(assignment.get("name"), f"{what}.name")] = flavors
        for resource, value in _dict(assignment.get("resourceUsage"), what).items():
            key = (flavors.get(resource, ""), resource)
            usage[key] = usage.get(key, ZERO) + _quantity(value, f"{what} {resource}")
    return _str(admission.get("clusterQueue"), "admission.clusterQueue"), usage, podset_flavors


def _state(conditions: list[dict], active: bool, requeue_at: datetime | None) -> tuple[str, dict]:
    """The state and the condition that decided it (see the module docstring)."""

    def true(kind: str) -> dict | None:
        cond = _condition(conditions, kind)
        return cond if cond is not None and cond.get("status") == "True" else None

    if finished := true(c.COND_FINISHED):
        succeeded = finished.get("reason") == c.FINISHED_SUCCEEDED
        return (WorkloadState.SUCCEEDED if succeeded else WorkloadState.FAILED), finished
    if evicted := true(c.COND_EVICTED):
        if not active or evicted.get("reason") in c.DEACTIVATION_REASONS:
            return WorkloadState.INACTIVE, evicted
        if preempted := true(c.COND_PREEMPTED):
            return WorkloadState.PREEMPTED, preempted
        requeued = _condition(conditions, c.COND_REQUEUED)
        if requeue_at is not None and (requeued is None or requeued.get("status") != "True"):
            return WorkloadState.REQUEUED, requeued or evicted
        return WorkloadState.EVICTED, evicted
    if not active:
        return WorkloadState.INACTIVE, {}
    if admitted := true(c.COND_ADMITTED):
        return WorkloadState.ADMITTED, admitted
    if reserved := true(c.COND_QUOTA_RESERVED):
        return WorkloadState.QUOTA_RESERVED, reserved
    return WorkloadState.PENDING, _condition(conditions, c.COND_QUOTA_RESERVED) or {}


def parse_preemptor(message: str) -> tuple[str, str, str]:
    """(UID, JobUID, preemptor path) from a Kueue preemption message; empty when absent."""
    uids = _PREEMPTOR_UIDS.search(message)
    path = _PREEMPTOR_PATH.search(message)
    return (
        uids["uid"] if uids else "",
        (uids["job_uid"] or "") if uids else "",
        path["path"].strip() if path else "",
    )


def _transitions(
    meta: ObjectMeta, conditions: list[dict], requeue_at: datetime | None
) -> list[TransitionRow]:
    simple = {
        c.COND_QUOTA_RESERVED: TransitionKind.QUOTA_RESERVED,
        c.COND_ADMITTED: TransitionKind.ADMITTED,
        c.COND_PODS_READY: TransitionKind.PODS_READY,
        c.COND_FINISHED: TransitionKind.FINISHED,
    }
    rows = []
    for cond in conditions:
        kind_name, status = cond.get("type"), cond.get("status")
        reason = cond.get("reason") or ""
        at = _time(cond.get("lastTransitionTime"), f"condition {kind_name} lastTransitionTime")
        if at is None:
            continue
        row = TransitionRow(
            workload_namespace=meta.namespace,
            workload_name=meta.name,
            kind="",
            at=at,
            reason=reason[:200],
            message=cond.get("message") or "",
        )
        if kind_name in simple and status == "True":
            row.kind = simple[kind_name]
        elif kind_name == c.COND_EVICTED and status == "True":
            deactivated = reason in c.DEACTIVATION_REASONS
            row.kind = TransitionKind.DEACTIVATED if deactivated else TransitionKind.EVICTED
        elif kind_name == c.COND_PREEMPTED and status == "True":
            row.kind = TransitionKind.PREEMPTED
            row.preemptor_uid, row.preemptor_job_uid, row.preemptor_path = parse_preemptor(
                row.message
            )
        elif kind_name == c.COND_REQUEUED and (status == "True" or requeue_at is not None):
            row.kind = TransitionKind.REQUEUED
            row.requeue_at = requeue_at if status != "True" else None
        else:
            continue
        rows.append(row)
    return rows


def _workload(
    item: dict,
    meta: ObjectMeta,
    lq_targets: Mapping[tuple[str, str], str],
    class_values: Mapping[str, int],
) -> tuple[WorkloadRow, list[TransitionRow]]:
    spec = _dict(item.get("spec"), "spec", required=True)
    status = _dict(item.get("status"), "status")
    api_version = item["apiVersion"]
    conditions = _conditions(status)
    active = _bool(spec.get("active"), "spec.active", default=True)
    requeue_state = _dict(status.get("requeueState"), "status.requeueState")
    requeue_at = _time(requeue_state.get("requeueAt"), "requeueState.requeueAt")
    state, deciding = _state(conditions, active, requeue_at)
    pod_sets, requests = _pod_sets(spec)
    admitted_cq, usage, podset_flavors = _admission(status)
    holding = state in HOLDING_STATES
    queue_name = _str(spec.get("queueName"), "spec.queueName")
    class_name = _priority_class_name(spec, api_version)
    priority = _int_or_none(spec.get("priority"), "spec.priority")
    accumulated_key = (
        "accumulatedPastExexcutionTimeSeconds"
        if api_version == c.V1BETA1
        else "accumulatedPastExecutionTimeSeconds"
    )
    owner = _owner(meta)

    def true_time(kind: str) -> datetime | None:
        cond = _condition(conditions, kind)
        if cond is None or cond.get("status") != "True":
            return None
        return _time(cond.get("lastTransitionTime"), f"{kind} lastTransitionTime")

    flavors: dict[str, str] = {}
    for (flavor, resource), _amount in usage.items():
        flavors.setdefault(resource, flavor)
    row = WorkloadRow(
        meta=meta,
        owner_kind=_str(owner.get("kind"), "ownerReference.kind"),
        owner_name=_str(owner.get("name"), "ownerReference.name"),
        owner_uid=_str(owner.get("uid"), "ownerReference.uid"),
        job_uid=meta.labels.get(c.LABEL_JOB_UID, ""),
        queue_name=queue_name,
        cluster_queue_name=admitted_cq or lq_targets.get((meta.namespace, queue_name), ""),
        priority=priority if priority is not None else class_values.get(class_name, 0),
        priority_class_name=class_name,
        active=active,
        pod_sets=pod_sets,
        requested_gpus=_to_float(_gpus(requests)),
        admitted_gpus=_to_float(
            sum((gpu_equivalent(r, v) for (_, r), v in usage.items() if is_gpu_resource(r)), ZERO)
        )
        if holding
        else 0.0,
        flavors=flavors,
        state=state,
        state_reason=(deciding.get("reason") or "")[:200],
        state_message=deciding.get("message") or "",
        quota_reserved_at=true_time(c.COND_QUOTA_RESERVED),
        admitted_at=true_time(c.COND_ADMITTED),
        finished_at=true_time(c.COND_FINISHED),
        accumulated_execution_seconds=max(
            0, _int(status.get(accumulated_key), f"status.{accumulated_key}")
        ),
        requeue_count=max(0, _int(requeue_state.get("count"), "requeueState.count")),
        requeue_at=requeue_at,
        requests=requests,
        usage=usage if holding else {},
        podset_flavors=podset_flavors,
        owner_pod_uids=tuple(
            ref.get("uid") or "" for ref in meta.owner_references if ref.get("kind") == "Pod"
        ),
    )
    return row, _transitions(meta, conditions, requeue_at)


def _infer_borrowing(workloads: list[WorkloadRow], cluster_queues: list[ClusterQueueRow]) -> None:
    """Mark the Workloads whose admission (in admission order) took their queue above nominal."""
    nominal = {
        (cq.meta.name, q.flavor_name, q.resource): q.nominal
        for cq in cluster_queues
        for q in cq.quotas
        if is_gpu_resource(q.resource)
    }
    holders: dict[tuple[str, str, str], list[tuple[WorkloadRow, Decimal]]] = defaultdict(list)
    for row in workloads:
        for (flavor, resource), amount in row.usage.items():
            key = (row.cluster_queue_name, flavor, resource)
            if key in nominal and amount > 0:
                holders[key].append((row, amount))
    far_future = datetime.max.replace(tzinfo=UTC)
    for key, rows in holders.items():
        running = ZERO
        rows.sort(key=lambda pair: (pair[0].quota_reserved_at or far_future, pair[0].key))
        for row, amount in rows:
            above = max(ZERO, running + amount - max(nominal[key], running))
            running += amount
            if above > 0:
                row.borrowing = True
                row.borrowed_gpus = _to_float(
                    Decimal(str(row.borrowed_gpus)) + gpu_equivalent(key[2], above)
                )


# ---------------------------------------------------------------------------------------------
# Pods and nodes


class _PodJoiner:
    """Pod -> Workload: annotation, then group name, then the owner chain to the job UID."""

    def __init__(self, workloads: list[WorkloadRow]) -> None:
        self.by_name = {row.key: row for row in workloads}
        self.by_job_uid: dict[tuple[str, str], WorkloadRow] = {}
        for row in workloads:
            if row.job_uid:
                self.by_job_uid.setdefault((row.meta.namespace, row.job_uid), row)
            for uid in row.owner_pod_uids:
                if uid:
                    self.by_job_uid.setdefault((row.meta.namespace, uid), row)

    def join(self, meta: ObjectMeta) -> tuple[str, str, WorkloadRow | None]:
        """(workload name, how it was joined, the Workload row when in this snapshot)."""
        namespace = meta.namespace
        named = meta.annotations.get(c.ANNOTATION_WORKLOAD)
        if named:
            return named, "annotation", self.by_name.get((namespace, named))
        for key in (c.PREBUILT_WORKLOAD_NAME, c.POD_GROUP_NAME):
            group = meta.annotations.get(key) or meta.labels.get(key)
            if group and (namespace, group) in self.by_name:
                return group, key, self.by_name[(namespace, group)]
        candidates = [("owner", ref.get("uid") or "") for ref in meta.owner_references] + [
            ("jobset", meta.labels.get(c.LABEL_JOBSET_UID, "")),
            ("pod_uid", meta.uid),
        ]
        for how, uid in candidates:
            row = self.by_job_uid.get((namespace, uid)) if uid else None
            if row is not None:
                return row.meta.name, how, row
        prebuilt = meta.annotations.get(c.PREBUILT_WORKLOAD_NAME) or meta.labels.get(
            c.PREBUILT_WORKLOAD_NAME
        )
        if prebuilt:
            return prebuilt, c.PREBUILT_WORKLOAD_NAME, None
        return "", "", None


def _pod(item: dict, meta: ObjectMeta, joiner: _PodJoiner) -> PodRow | None:
    spec = _dict(item.get("spec"), "spec", required=True)
    status = _dict(item.get("status"), "status")
    requests = {r: v for r, v in pod_requests(spec).items() if is_gpu_resource(r) and v > 0}
    if not requests:
        return None
    workload_name, joined_by, workload = joiner.join(meta)
    podset = meta.labels.get(c.LABEL_PODSET, "")
    resource = max(sorted(requests), key=lambda r: gpu_equivalent(r, requests[r]))
    flavor = ""
    if workload is not None:
        podset_flavors = workload.podset_flavors.get(podset) or next(
            iter(workload.podset_flavors.values()), {}
        )
        flavor = podset_flavors.get(resource, "")
    finished_at = None
    for state in _list(status.get("containerStatuses"), "status.containerStatuses"):
        terminated = _dict(_dict(state, "containerStatus").get("state"), "state").get("terminated")
        finished = _time(_dict(terminated, "terminated").get("finishedAt"), "finishedAt")
        if finished is not None and (finished_at is None or finished > finished_at):
            finished_at = finished
    return PodRow(
        meta=meta,
        node_name=_str(spec.get("nodeName"), "spec.nodeName"),
        phase=_str(status.get("phase"), "status.phase"),
        started_at=_time(status.get("startTime"), "status.startTime"),
        finished_at=finished_at,
        gpus=_to_float(_gpus(requests)),
        resource=resource,
        requests=requests,
        workload_name=workload_name,
        joined_by=joined_by,
        cluster_queue_name=meta.labels.get(c.LABEL_CLUSTER_QUEUE)
        or (workload.cluster_queue_name if workload else ""),
        local_queue_name=meta.labels.get(c.LABEL_LOCAL_QUEUE)
        or (workload.queue_name if workload else ""),
        podset=podset,
        flavor=flavor,
    )


def _count(value: object, what: str) -> int:
    amount = _quantity(value, what)
    return int(amount) if amount > 0 else 0


def _node(
    item: dict, meta: ObjectMeta, flavors: list[FlavorRow], pool_labels: Sequence[str]
) -> NodeRow | None:
    status = _dict(item.get("status"), "status")
    capacity = _dict(status.get("capacity"), "status.capacity")
    allocatable = _dict(status.get("allocatable"), "status.allocatable")
    mig = {
        name: _count(value, f"allocatable {name}")
        for name, value in sorted(allocatable.items())
        if name.startswith(MIG_RESOURCE_PREFIX)
    }
    gpu_capacity = _count(capacity.get(GPU_RESOURCE, "0"), "capacity nvidia.com/gpu")
    product = meta.labels.get(c.LABEL_GPU_PRODUCT, "")
    if not gpu_capacity and not mig and not product:
        return None
    matching = [
        flavor
        for flavor in flavors
        if flavor.node_labels
        and all(meta.labels.get(k) == v for k, v in flavor.node_labels.items())
    ]
    matching.sort(key=lambda flavor: (-len(flavor.node_labels), flavor.meta.name))
    return NodeRow(
        meta=meta,
        gpu_product=product,
        node_pool=next((meta.labels[k] for k in pool_labels if meta.labels.get(k)), ""),
        flavor=matching[0].meta.name if matching else "",
        gpu_capacity=gpu_capacity,
        gpu_allocatable=_count(allocatable.get(GPU_RESOURCE, "0"), "allocatable nvidia.com/gpu"),
        mig_allocatable=mig,
    )


def _fill_flavor_gpu_models(flavors: list[FlavorRow], nodes: list[NodeRow]) -> None:
    """A flavor without the product in its nodeLabels takes its nodes' most common product."""
    products: dict[str, Counter[str]] = defaultdict(Counter)
    for node in nodes:
        if node.flavor and node.gpu_product:
            products[node.flavor][node.gpu_product] += 1
    for flavor in flavors:
        if not flavor.gpu_model and products.get(flavor.meta.name):
            counts = products[flavor.meta.name]
            flavor.gpu_model = min(counts, key=lambda p: (-counts[p], p))


def _teams(
    cluster_queues: list[ClusterQueueRow], local_queues: list[LocalQueueRow]
) -> list[TeamRow]:
    teams: dict[str, TeamRow] = {}
    team_of_queue = {}
    for cq in sorted(cluster_queues, key=lambda row: row.meta.name):
        team = teams.setdefault(cq.team_name, TeamRow(cq.team_name, [], []))
        team.cluster_queues.append(cq.meta.name)
        team_of_queue[cq.meta.name] = team
    claimed: set[str] = set()
    for lq in sorted(local_queues, key=lambda row: (row.meta.namespace, row.meta.name)):
        owner = team_of_queue.get(lq.cluster_queue_name)
        if owner is not None and lq.meta.namespace not in claimed:
            claimed.add(lq.meta.namespace)
            owner.namespaces.append(lq.meta.namespace)
    return sorted(teams.values(), key=lambda team: team.name)


# ---------------------------------------------------------------------------------------------
# Queue figures


def _usage_map(rows: list[UsageRow], resource: str) -> dict[str, UsageRow]:
    return {row.flavor_name: row for row in rows if row.resource == resource}


def cohort_totals(
    batch: KueueBatch, resource: str = GPU_RESOURCE
) -> dict[tuple[str, str], dict[str, Decimal]]:
    """Per (cohort, flavor): ``nominal`` (members' plus the cohort's own quota), ``reserved``
    (members' flavorsReservation), ``total`` (members' flavorsUsage) and ``borrowed``.

    Cohort status carries no usage, so member ClusterQueues are summed (DESIGN). Implicit cohorts
    count like explicit ones. A parent cohort's figures include its whole subtree.
    """
    own: dict[tuple[str, str], dict[str, Decimal]] = defaultdict(
        lambda: {"nominal": ZERO, "reserved": ZERO, "total": ZERO, "borrowed": ZERO}
    )
    for cohort_row in batch.cohorts:
        for quota in cohort_row.quotas:
            if quota.resource == resource:
                own[(cohort_row.meta.name, quota.flavor_name)]["nominal"] += quota.nominal
    for cq in batch.cluster_queues:
        if not cq.cohort_name:
            continue
        for quota in cq.quotas:
            if quota.resource == resource:
                own[(cq.cohort_name, quota.flavor_name)]["nominal"] += quota.nominal
        usage = _usage_map(cq.usage, resource)
        for flavor, row in _usage_map(cq.reservation or cq.usage, resource).items():
            own[(cq.cohort_name, flavor)]["reserved"] += row.total
        for flavor, row in usage.items():
            own[(cq.cohort_name, flavor)]["total"] += row.total
            own[(cq.cohort_name, flavor)]["borrowed"] += row.borrowed
    parents = {row.meta.name: row.parent_name for row in batch.cohorts if row.parent_name}
    totals: dict[tuple[str, str], dict[str, Decimal]] = {}
    for (cohort, flavor), figures in own.items():
        seen = set()
        node: str | None = cohort
        while node and node not in seen:  # a parentName cycle is Kueue's error, not a hang here
            seen.add(node)
            target = totals.setdefault(
                (node, flavor), {"nominal": ZERO, "reserved": ZERO, "total": ZERO, "borrowed": ZERO}
            )
            for name, value in figures.items():
                target[name] += value
            node = parents.get(node)
    return totals


def build_queue_samples(batch: KueueBatch, resource: str = GPU_RESOURCE) -> list[QueueSampleRow]:
    """One row per ClusterQueue x flavor covering ``resource``.

    * ``total`` / ``borrowed`` from ``status.flavorsUsage`` (admitted), ``reserved`` from
      ``status.flavorsReservation`` (falls back to usage when absent).
    * ``pending_demand`` / ``pending_workloads``: pending (pending, evicted, preempted, requeued;
      not inactive) Workloads' requested amount of ``resource``, all put on the first flavor of
      the queue that covers the resource (Kueue tries flavors in order; which one a pending
      Workload would get is not knowable here).
    * ``admitted_workloads``: admitted Workloads holding ``resource`` in that flavor.
    * ``lent`` is inferred per direct cohort and flavor: what members borrow is first taken from
      the cohort's own quota, and the rest is attributed to member queues in proportion to their
      unused lendable quota, ``min(nominal - reserved, lendingLimit)`` (no lendingLimit: all of
      the unused nominal), never more than that lendable amount. Nested cohorts are not
      followed: borrowing is matched with lenders of the same cohort.
    """
    pending: dict[str, tuple[Decimal, int]] = defaultdict(lambda: (ZERO, 0))
    admitted: Counter[tuple[str, str]] = Counter()
    for row in batch.workloads:
        if row.state in PENDING_STATES and row.active and row.requests.get(resource, ZERO) > 0:
            demand, count = pending[row.cluster_queue_name]
            pending[row.cluster_queue_name] = (demand + row.requests[resource], count + 1)
        if row.state == WorkloadState.ADMITTED:
            for flavor, res in row.usage:
                if res == resource:
                    admitted[(row.cluster_queue_name, flavor)] += 1
    samples = []
    for cq in sorted(batch.cluster_queues, key=lambda row: row.meta.name):
        quotas = sorted((q for q in cq.quotas if q.resource == resource), key=lambda q: q.position)
        usage = _usage_map(cq.usage, resource)
        reservation = _usage_map(cq.reservation, resource) or usage
        flavors = [q.flavor_name for q in quotas] + sorted(
            (set(usage) | set(reservation)) - {q.flavor_name for q in quotas}
        )
        by_flavor = {q.flavor_name: q for q in quotas}
        for index, flavor in enumerate(flavors):
            quota = by_flavor.get(flavor)
            used = usage.get(flavor) or reservation.get(flavor)
            demand, count = pending[cq.meta.name] if index == 0 else (ZERO, 0)
            samples.append(
                QueueSampleRow(
                    cluster_queue_name=cq.meta.name,
                    flavor_name=flavor,
                    resource=resource,
                    total=used.total if used and flavor in usage else ZERO,
                    reserved=reservation[flavor].total if flavor in reservation else ZERO,
                    borrowed=used.borrowed if used else ZERO,
                    lent=ZERO,
                    nominal=quota.nominal if quota else ZERO,
                    borrowing_limit=quota.borrowing_limit if quota else None,
                    lending_limit=quota.lending_limit if quota else None,
                    pending_demand=demand,
                    pending_workloads=count,
                    admitted_workloads=admitted[(cq.meta.name, flavor)],
                )
            )
    _attribute_lending(batch, samples, resource)
    return samples


def _attribute_lending(batch: KueueBatch, samples: list[QueueSampleRow], resource: str) -> None:
    cohort_of = {cq.meta.name: cq.cohort_name for cq in batch.cluster_queues if cq.cohort_name}
    own_quota: dict[tuple[str, str], Decimal] = defaultdict(lambda: ZERO)
    for cohort_row in batch.cohorts:
        for quota in cohort_row.quotas:
            if quota.resource == resource:
                own_quota[(cohort_row.meta.name, quota.flavor_name)] += quota.nominal
    groups: dict[tuple[str, str], list[QueueSampleRow]] = defaultdict(list)
    for sample in samples:
        cohort = cohort_of.get(sample.cluster_queue_name)
        if cohort:
            groups[(cohort, sample.flavor_name)].append(sample)
    for key, members in groups.items():
        to_place = sum((m.borrowed for m in members), ZERO) - own_quota[key]
        if to_place <= 0:
            continue
        lendable = {}
        for member in members:
            unused = max(ZERO, member.nominal - member.reserved)
            cap = member.lending_limit
            lendable[id(member)] = unused if cap is None else min(unused, max(ZERO, cap))
        pool = sum(lendable.values(), ZERO)
        if pool <= 0:
            continue
        share = min(Decimal(1), to_place / pool)
        for member in members:
            member.lent = (lendable[id(member)] * share).quantize(Decimal("0.000001"))
