"""Plain Kubernetes ResourceQuota and GPU pods -> Kueue-shaped (v1beta2) objects, so the Kueue
sync, ingest, store and read layer serve a cluster without a batch scheduler unchanged
(docs/architecture.md "Quota sources"). The Workload shape is ``quotas.sources.common``'s.

Pure functions on the API server's dicts; nothing here talks to a server or reads the clock.

* A namespace whose ResourceQuotas have a ``requests.nvidia.com/gpu`` line (``spec.hard``, else
  ``status.hard``) is a **ClusterQueue** named after the namespace: no cohort, no borrowing, no
  lending (``borrowingLimit`` and ``lendingLimit`` 0), one resource group of ``nvidia.com/gpu``
  in ``FLAVOR``. A quota without a GPU line is ignored.
* **Several GPU quotas in one namespace** (``namespace_figures``): Kubernetes charges a pod to
  every quota whose scope matches it and admits it only when it fits in all of them. Quotas
  without scopes each charge every pod, so the namespace can hold no more than the smallest:
  nominal = the smallest hard limit, in use = the largest ``status.used``. Only when every GPU
  quota is scoped (``spec.scopes`` / ``spec.scopeSelector``, e.g. one per PriorityClass) do they
  split the pods between them: nominal and in use are then the sums.
* ``status.flavorsUsage`` total = ``status.used``: what the quota charges, every pod that is
  neither Succeeded nor Failed, bound to a node or not; borrowed is always 0.
* A hard limit or usage that is not a quantity is passed on as written, so ingest skips and counts
  that ClusterQueue like any malformed Kueue object; a GPU quota without a namespace becomes a
  ClusterQueue without a name, skipped and counted the same way.
* **Workloads** are the GPU pods' owners (``owner_of``): a Job; a Deployment, read from its
  ReplicaSet's name (the Deployment controller names it ``<deployment>-<pod-template-hash>``;
  reading the ReplicaSet's own owner would need access to ReplicaSets and a third WATCH); any
  other controller as it is; a pod without owner is its own workload. The Workload is named
  ``<kind>-<name>`` (``job-detr-train``, ``deployment-triton-vision``) in the ClusterQueue of its
  namespace, one pod set of its live pods sharing their requests.
* A workload's state (``to_workload``): some live pod bound to a node -> admitted (the quota
  charged it at creation, the scheduler placed it), holding its bound pods' requests; live pods,
  none bound -> pending (``QuotaReserved=False``, the scheduler's reason, e.g. ``Unschedulable``):
  their requests are pending demand although the quota already charges them (a pod the quota
  refuses is never created); every pod Succeeded or Failed -> finished. An admitted workload's
  unbound pods (a Deployment scaling up) hold nothing and are not pending demand.
* A terminating pod counts until it is gone: the quota stops charging it once its deletion grace
  has run out, which this translation, reading no clock, does not see (the pod is removed moments
  later).
* **Preemption by PriorityClass**: a live pod whose ``DisruptionTarget`` condition is True with
  reason ``PreemptionByScheduler`` gives its workload Kueue's ``Preempted`` condition (reason
  ``PreemptionByScheduler``, the time the scheduler marked the first pod, the message naming the
  pods), which ingest records as a ``preempted`` transition, as for a Kueue preemption. No
  ``Evicted`` condition: the workload holds its GPUs until its pods are gone, as the quota charges
  them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from core.mig import GPU_RESOURCE
from quotas import constants as c
from quotas.ingest.fields import Malformed, gpu_total
from quotas.ingest.resources import add_requests, pod_requests
from quotas.kueue.payloads import Kind
from quotas.sources import common
from quotas.sources.common import KUEUE_VERSION, as_dict, quantity, text

RESOURCE_QUOTA = Kind("ResourceQuota", "resourcequotas", "", True)
SCHEDULER = "resourcequota"
GPU_QUOTA = f"requests.{GPU_RESOURCE}"
# The ResourceQuotas a translated ClusterQueue stands for, comma-separated.
QUOTAS_ANNOTATION = "gpu-ledger.io/resourcequotas"
# The ReplicaSet a Deployment's workload was read from (the newest, during a rollout).
REPLICA_SET_ANNOTATION = "gpu-ledger.io/replicasets"
TEMPLATE_HASH = "pod-template-hash"
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
NAMESPACE_LABEL = "kubernetes.io/metadata.name"


# --- ResourceQuotas -> ClusterQueues ---------------------------------------------------------


def gpu_line(quota: Mapping[str, Any]) -> Any:
    """The quota's ``requests.nvidia.com/gpu`` hard limit as written (``spec.hard``, else
    ``status.hard``); None when it has no GPU line."""
    for part in ("spec", "status"):
        hard = as_dict(as_dict(quota.get(part)).get("hard"))
        if GPU_QUOTA in hard:
            return hard[GPU_QUOTA]
    return None


def has_gpu_line(quota: Any) -> bool:
    return isinstance(quota, dict) and gpu_line(quota) is not None


def _namespace(obj: Mapping[str, Any]) -> str:
    namespace = as_dict(obj.get("metadata")).get("namespace")
    return namespace if isinstance(namespace, str) else ""


def _scoped(quota: Mapping[str, Any]) -> bool:
    spec = as_dict(quota.get("spec"))
    selector = as_dict(spec.get("scopeSelector"))
    return bool(spec.get("scopes")) or bool(selector.get("matchExpressions"))


def _used(quota: Mapping[str, Any]) -> Any:
    return as_dict(as_dict(quota.get("status")).get("used")).get(GPU_QUOTA, "0")


def namespace_figures(quotas: list[Mapping[str, Any]]) -> tuple[str, str]:
    """(nominal, in use) of a namespace's GPU quotas, as quantities (see the module docstring);
    a value that is not a quantity comes back as written, for ingest to refuse."""
    hard = [(gpu_line(q), quantity(gpu_line(q))) for q in quotas]
    used = [(_used(q), quantity(_used(q))) for q in quotas]
    for raw, read in hard + used:
        if read is None:
            return str(raw), "0"
    unscoped = [i for i, q in enumerate(quotas) if not _scoped(q)]
    if unscoped:
        nominal = min(hard[i][1] or Decimal(0) for i in unscoped)
        in_use = max(used[i][1] or Decimal(0) for i in unscoped)
    else:
        nominal = sum((h or Decimal(0) for _, h in hard), Decimal(0))
        in_use = sum((u or Decimal(0) for _, u in used), Decimal(0))
    return text(nominal), text(in_use)


def cluster_queue(
    namespace: str, quotas: list[Mapping[str, Any]], counts: tuple[int, int] = (0, 0)
) -> dict[str, Any]:
    """A namespace's GPU quotas as a Kueue ClusterQueue; ``counts`` = its (pending, admitted)
    workloads."""
    listed = sorted(quotas, key=common.name_of)
    nominal, in_use = namespace_figures(listed)
    created = sorted(str(as_dict(q.get("metadata")).get("creationTimestamp") or "") for q in listed)
    metadata: dict[str, Any] = {
        "name": namespace,
        "labels": {c.LABEL_SCHEDULER: SCHEDULER},
        "annotations": {QUOTAS_ANNOTATION: ",".join(common.name_of(q) for q in listed)},
    }
    version = common.newest_version(listed)
    if version:
        metadata["resourceVersion"] = version
    if created and created[0]:
        metadata["creationTimestamp"] = created[0]
    resource = {
        "name": GPU_RESOURCE,
        "nominalQuota": nominal,
        "borrowingLimit": "0",
        "lendingLimit": "0",
    }
    used = {"name": GPU_RESOURCE, "total": in_use, "borrowed": "0"}
    pending, admitted = counts
    return {
        "apiVersion": KUEUE_VERSION,
        "kind": "ClusterQueue",
        "metadata": metadata,
        "spec": {
            "cohortName": "",
            "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: namespace}} if namespace else {},
            "resourceGroups": common.resource_groups(resource),
        },
        "status": {
            "flavorsUsage": [{"name": common.FLAVOR, "resources": [used]}],
            "pendingWorkloads": pending,
            "reservingWorkloads": admitted,
            "admittedWorkloads": admitted,
        },
    }


def cluster_queues(
    quotas: Iterable[Mapping[str, Any]], counts: Mapping[str, tuple[int, int]] | None = None
) -> dict[str, dict[str, Any]]:
    """Every namespace with a GPU quota as a ClusterQueue, by name (quotas without a GPU line
    are ignored)."""
    by_namespace: dict[str, list[Mapping[str, Any]]] = {}
    for quota in quotas:
        if has_gpu_line(quota):
            by_namespace.setdefault(_namespace(quota), []).append(quota)
    found = counts or {}
    return {
        namespace: cluster_queue(namespace, listed, found.get(namespace, (0, 0)))
        for namespace, listed in sorted(by_namespace.items())
    }


# --- GPU pods -> Workloads -------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    kind: str
    name: str
    uid: str = ""
    api_version: str = ""
    replica_set: str = ""

    @property
    def workload(self) -> str:
        """The Workload's name: ``<kind>-<name>``, as Kueue names a job's Workload."""
        return f"{self.kind.lower()}-{self.name}"


@dataclass(frozen=True)
class PodFacts:
    """What a workload's translation needs of one GPU pod."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    created: str
    owner: Owner
    requests: Mapping[str, Decimal]
    phase: str
    bound: bool
    started: str
    priority_class: str
    priority: int | None
    # (when, message) of the scheduler's preemption mark, None when not being preempted.
    preempted: tuple[str, str] | None
    # (reason, message, when) of PodScheduled=False, None when not refused.
    unschedulable: tuple[str, str, str] | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.owner.workload)

    @property
    def live(self) -> bool:
        return self.phase not in TERMINAL_PHASES


def owner_of(pod: Mapping[str, Any]) -> Owner:
    """The pod's workload owner (see the module docstring)."""
    meta = as_dict(pod.get("metadata"))
    refs = [as_dict(r) for r in meta.get("ownerReferences") or [] if isinstance(r, dict)]
    ref = next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)
    if ref is None or not ref.get("kind") or not ref.get("name"):
        return Owner("Pod", str(meta.get("name") or ""), str(meta.get("uid") or ""), "v1")
    kind, name = str(ref["kind"]), str(ref["name"])
    template_hash = as_dict(meta.get("labels")).get(TEMPLATE_HASH)
    if (
        kind == "ReplicaSet"
        and isinstance(template_hash, str)
        and template_hash
        and name.endswith(f"-{template_hash}")
        and len(name) > len(template_hash) + 1
    ):
        deployment = name[: -len(template_hash) - 1]
        return Owner("Deployment", deployment, "", "apps/v1", replica_set=name)
    return Owner(kind, name, str(ref.get("uid") or ""), str(ref.get("apiVersion") or ""))


def _condition(status: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return next(
        (as_dict(x) for x in status.get("conditions") or [] if as_dict(x).get("type") == kind),
        {},
    )


def pod_facts(pod: Any) -> PodFacts | None:
    """A GPU pod's facts; None for an object that is not a readable pod (its Pod row is
    skipped and counted by ingest) or a pod that requests no GPU."""
    if not isinstance(pod, dict):
        return None
    meta, spec, status = (as_dict(pod.get(k)) for k in ("metadata", "spec", "status"))
    namespace, name = meta.get("namespace"), meta.get("name")
    if not (isinstance(namespace, str) and namespace and isinstance(name, str) and name):
        return None
    try:
        requests = pod_requests(spec)
    except Malformed:
        return None
    if gpu_total(requests) <= 0:
        return None
    disruption = _condition(status, DISRUPTION_TARGET)
    preempted = None
    if disruption.get("status") == "True" and disruption.get("reason") == PREEMPTION_BY_SCHEDULER:
        preempted = (
            str(disruption.get("lastTransitionTime") or ""),
            str(disruption.get("message") or ""),
        )
    scheduled = _condition(status, "PodScheduled")
    unschedulable = None
    if scheduled.get("status") == "False":
        unschedulable = (
            str(scheduled.get("reason") or "Unschedulable"),
            str(scheduled.get("message") or ""),
            str(scheduled.get("lastTransitionTime") or ""),
        )
    priority = spec.get("priority")
    return PodFacts(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        created=str(meta.get("creationTimestamp") or ""),
        owner=owner_of(pod),
        requests={k: v for k, v in requests.items() if v > 0},
        phase=str(status.get("phase") or ""),
        bound=bool(spec.get("nodeName")),
        started=str(status.get("startTime") or ""),
        priority_class=str(spec.get("priorityClassName") or ""),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
        preempted=preempted,
        unschedulable=unschedulable,
    )


def _sum(pods: Iterable[PodFacts]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for pod in pods:
        total = add_requests(total, pod.requests)
    return total


def _earliest(values: Iterable[str]) -> str:
    return min((v for v in values if v), default="")


@dataclass
class WorkloadFacts:
    """A workload's state and figures from its pods (``workload_state``)."""

    state: str  # "admitted", "pending" or "finished"
    live: list[PodFacts] = field(default_factory=list)
    bound: list[PodFacts] = field(default_factory=list)


def workload_state(pods: list[PodFacts]) -> WorkloadFacts:
    live = [p for p in pods if p.live]
    bound = [p for p in live if p.bound]
    state = "finished" if not live else "admitted" if bound else "pending"
    return WorkloadFacts(state, live, bound)


def _conditions(pods: list[PodFacts], facts: WorkloadFacts) -> list[dict[str, Any]]:
    condition = common.condition
    created = _earliest(p.created for p in pods)
    if facts.state == "pending":
        refused = [p.unschedulable for p in facts.live if p.unschedulable]
        reason, message, at = refused[0] if refused else ("Pending", "not bound to a node yet", "")
        return [condition(c.COND_QUOTA_RESERVED, "False", reason[:200], message, at or created)]
    holding = facts.bound or pods
    charged = f"charged to the namespace's ResourceQuota; {len(holding)} pod(s) bound to a node"
    conditions = [
        condition(
            c.COND_QUOTA_RESERVED,
            "True",
            "QuotaCharged",
            charged,
            _earliest(p.created for p in (facts.live or pods)) or created,
        ),
        condition(
            c.COND_ADMITTED,
            "True",
            "Bound",
            charged,
            _earliest(p.started for p in holding) or created,
        ),
    ]
    marked = sorted((p for p in facts.live if p.preempted), key=lambda p: p.name)
    if marked:
        first = min(marked, key=lambda p: (p.preempted or ("", ""))[0])
        names = ", ".join(p.name for p in marked)
        message = (
            f"{len(marked)} of {len(facts.live)} pod(s) being preempted by the scheduler "
            f"({names}): {(first.preempted or ('', ''))[1]}"
        )
        at = (first.preempted or ("", ""))[0]
        conditions.append(condition(c.COND_PREEMPTED, "True", PREEMPTION_BY_SCHEDULER, message, at))
    if facts.state == "finished":
        failed = any(p.phase == "Failed" for p in pods)
        reason = "Failed" if failed else c.FINISHED_SUCCEEDED
        message = "a pod failed" if failed else "every pod succeeded"
        conditions.append(condition(c.COND_FINISHED, "True", reason, message, None))
    return conditions


def _owner_references(owner: Owner, pods: list[PodFacts]) -> list[dict[str, Any]]:
    ref: dict[str, Any] = {"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name}
    if owner.uid:
        ref["uid"] = owner.uid
    ref["controller"] = True
    if owner.kind == "Pod" or owner.uid:
        return [ref]
    # No uid to join the pods by (a Deployment read from its ReplicaSets' names): each pod is
    # an owner, as on Kueue's Workload of a plain pod group, so ingest joins them by their uid.
    pod_refs = [
        {"apiVersion": "v1", "kind": "Pod", "name": p.name, "uid": p.uid}
        for p in sorted(pods, key=lambda p: p.name)
        if p.uid
    ]
    return [ref, *pod_refs]


def to_workload(pods: list[PodFacts]) -> dict[str, Any]:
    """One owner's GPU pods (at least one) as a Kueue Workload (see the module docstring)."""
    first = min(pods, key=lambda p: (p.created, p.name))
    owner = first.owner
    facts = workload_state(pods)
    counted = facts.live or pods
    labels = {c.LABEL_SCHEDULER: SCHEDULER}
    if owner.uid:
        # Kueue's job-uid label: ingest joins each pod to its Workload by its owner's uid.
        labels[c.LABEL_JOB_UID] = owner.uid
    annotations = {}
    replica_sets = sorted({p.owner.replica_set for p in pods if p.owner.replica_set})
    if replica_sets:
        annotations[REPLICA_SET_ANNOTATION] = ",".join(replica_sets)
    metadata: dict[str, Any] = {
        "name": owner.workload,
        "namespace": first.namespace,
        "creationTimestamp": first.created,
        "ownerReferences": _owner_references(owner, pods),
    }
    if owner.uid:
        metadata["uid"] = owner.uid
    versions = ({"metadata": {"resourceVersion": p.resource_version}} for p in pods)
    version = common.newest_version(versions)
    if version:
        metadata["resourceVersion"] = version
    source = {"metadata": metadata, "spec": {"priorityClassName": first.priority_class}}
    held = None
    if facts.state != "pending":
        held = {k: text(v) for k, v in _sum(facts.bound or counted).items()}
    workload = common.workload(
        source,
        name=owner.workload,
        queue=first.namespace,
        labels=labels,
        annotations=annotations,
        pod_set=common.gang_pod_set(
            "main", len(counted), {k: text(v) for k, v in _sum(counted).items()}
        ),
        conditions=_conditions(pods, facts),
        held=held,
    )
    if first.priority is not None:
        workload["spec"]["priority"] = first.priority
    return workload


def group_pods(pods: Iterable[PodFacts]) -> dict[tuple[str, str], list[PodFacts]]:
    """GPU pods by workload key (namespace, Workload name)."""
    grouped: dict[tuple[str, str], list[PodFacts]] = {}
    for pod in pods:
        grouped.setdefault(pod.key, []).append(pod)
    return grouped


def workloads(pods: Iterable[PodFacts]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every owner of these GPU pods as a Workload, by (namespace, name)."""
    return {key: to_workload(found) for key, found in sorted(group_pods(pods).items())}


def workload_counts(states: Iterable[tuple[str, str]]) -> dict[str, tuple[int, int]]:
    """Per namespace, (pending, admitted) workloads from (namespace, state) pairs."""
    pending: Counter[str] = Counter()
    admitted: Counter[str] = Counter()
    for namespace, state in states:
        if state == "pending":
            pending[namespace] += 1
        elif state == "admitted":
            admitted[namespace] += 1
    return {ns: (pending[ns], admitted[ns]) for ns in sorted(set(pending) | set(admitted))}
