"""Volcano queues and PodGroups -> Kueue-shaped (v1beta2) objects, so the Kueue sync, ingest,
store and read layer serve a Volcano cluster unchanged (docs/architecture.md "Quota sources").

Pure functions on the API server's dicts; nothing here talks to a server.

* A ``Queue`` named by another queue's ``spec.parent`` (and ``root``) is a **Cohort**
  (``parentName`` = its parent). Its own quota (``spec.resourceGroups``) is
  max(0, deserved - the sum of its children's deserved): the product adds a cohort's own quota
  to its members' (``quotas.ingest.samples.cohort_totals``: members, own quota and child cohorts),
  so the cohort's total is the queue's deserved.
* Every other queue is a **ClusterQueue** under its parent (``root`` when it names none), one
  resource group of ``nvidia.com/gpu`` in ``FLAVOR``: nominal = deserved (absent: 0),
  borrowingLimit = capability - deserved (no capability: no limit), lendingLimit = 0 when
  ``reclaimable: false``, else deserved - guarantee; ``status.flavorsUsage``: the quota in use,
  ``status.allocated`` (the GPUs of its bound pods) plus the ``minResources`` of its Inqueue
  PodGroups (``reserved_gpus``: reserved, no pod bound yet), as Kueue's usage counts every
  quota reservation; borrowed = max(0, quota in use - deserved).
* A ``PodGroup`` is a **Workload** named like the PodGroup without the ``-<job uid>`` a Volcano
  Job appends; its ClusterQueue is ``spec.queue`` (label ``LABEL_CLUSTER_QUEUE``: Volcano has no
  LocalQueues). Pending is pending demand (``spec.minResources``). Inqueue (Volcano's enqueue
  admitted the gang against its queue's capability; its pods are not bound yet) reserves its
  ``minResources``: QuotaReserved without Admitted, Kueue's own reading of a reservation whose
  pods have not started, so a gang that stays Inqueue with no pod running is a ghost
  reservation like any other. Running and Unknown hold their ``minResources`` (QuotaReserved and
  Admitted at the ``Scheduled`` condition's time), Completed is finished.

Queue ``weight`` becomes ``spec.fairSharing.weight``; weight and ``status.state`` are also kept
as the labels ``WEIGHT_LABEL`` and ``STATE_LABEL`` (stored with the row's labels), and a Closed
or Closing queue gets ``stopPolicy: Hold`` (it admits nothing new; what runs keeps running).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from core.mig import GPU_RESOURCE
from core.quantity import parse_quantity
from quotas import constants as c
from quotas.kueue.payloads import Kind

VOLCANO_GROUP = "scheduling.volcano.sh"
# Versions read, preferred first.
VOLCANO_VERSIONS = ("v1beta1",)
QUEUE = Kind("Queue", "queues", VOLCANO_GROUP, False)
POD_GROUP = Kind("PodGroup", "podgroups", VOLCANO_GROUP, True)
SCHEDULER = "volcano"
# Volcano's top queue: the scheduler creates it, and a queue without a parent hangs under it.
ROOT = "root"
# Volcano quotas name no node pool: every queue's GPUs are one flavor, named as Kueue's
# single-flavor setups usually name theirs. No ResourceFlavor object is served for it.
FLAVOR = "default-flavor"
KUEUE_VERSION = "kueue.x-k8s.io/v1beta2"
WEIGHT_LABEL = "gpu-ledger.io/volcano-weight"
STATE_LABEL = "gpu-ledger.io/volcano-state"
PHASE_ANNOTATION = "gpu-ledger.io/volcano-phase"
CLOSED_STATES = frozenset({"Closed", "Closing"})
HOLDING_PHASES = frozenset({"Running", "Unknown"})
RESERVING_PHASE = "Inqueue"
PENDING_PHASES = frozenset({"Pending"})
FINISHED_PHASES = frozenset({"Completed"})


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    name = _dict(obj.get("metadata")).get("name")
    return name if isinstance(name, str) else ""


def quantity(value: Any) -> Decimal | None:
    """A quantity as a Decimal; None when absent or unreadable."""
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def gpus(resources: Any) -> Decimal | None:
    """``nvidia.com/gpu`` of a resource list; None when it names none."""
    return quantity(_dict(resources).get(GPU_RESOURCE))


def text(amount: Decimal) -> str:
    """A Decimal as a plain Kubernetes quantity: ``16``, ``0.5``, never ``1.6E+1``."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return format(amount.normalize(), "f")


# --- queues ----------------------------------------------------------------------------------


def parent_of(queue: Mapping[str, Any]) -> str:
    """The queue's parent: ``spec.parent``, else ``root`` (``root`` itself has none)."""
    name = name_of(queue)
    parent = _dict(queue.get("spec")).get("parent")
    if isinstance(parent, str) and parent and parent != name:
        return parent
    return "" if name == ROOT else ROOT


def parent_names(queues: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The queues that are Cohorts: those another queue names as parent, and ``root``."""
    listed = list(queues)
    names = {name_of(q) for q in listed}
    parents = {parent_of(q) for q in listed} - {""}
    if ROOT in names:
        parents.add(ROOT)
    return frozenset(parents)


def deserved(queue: Mapping[str, Any]) -> Decimal:
    """``spec.deserved[nvidia.com/gpu]``, 0 when absent."""
    return gpus(_dict(queue.get("spec")).get("deserved")) or Decimal(0)


def _labels(queue: Mapping[str, Any]) -> dict[str, str]:
    meta = _dict(queue.get("metadata"))
    spec = _dict(queue.get("spec"))
    labels = {str(k): str(v) for k, v in _dict(meta.get("labels")).items()}
    labels[c.LABEL_SCHEDULER] = SCHEDULER
    if spec.get("weight") is not None:
        labels[WEIGHT_LABEL] = str(spec["weight"])
    state = _dict(queue.get("status")).get("state")
    if isinstance(state, str) and state:
        labels[STATE_LABEL] = state
    return labels


def _metadata(obj: Mapping[str, Any], labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    meta = _dict(obj.get("metadata"))
    kept: dict[str, Any] = {
        key: meta[key]
        for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        if key in meta
    }
    return {**kept, "labels": labels, **extra}


def _newest_version(versions: Iterable[Any]) -> str:
    """The highest numeric resourceVersion of these (a cohort changes with its children)."""
    numbers = [int(v) for v in versions if isinstance(v, str) and v.isdigit()]
    return str(max(numbers)) if numbers else ""


def _fair_sharing(queue: Mapping[str, Any]) -> dict[str, Any]:
    weight = quantity(_dict(queue.get("spec")).get("weight"))
    return {"fairSharing": {"weight": text(weight)}} if weight is not None else {}


def _group(resource: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "coveredResources": [GPU_RESOURCE],
            "flavors": [{"name": FLAVOR, "resources": [resource]}],
        }
    ]


def queue_to_cohort(queue: Mapping[str, Any], children: list[Mapping[str, Any]]) -> dict[str, Any]:
    """A parent queue as a Kueue Cohort whose own quota tops its children's up to its
    deserved."""
    own = max(Decimal(0), deserved(queue) - sum((deserved(q) for q in children), Decimal(0)))
    meta = _dict(queue.get("metadata"))
    version = _newest_version(
        [meta.get("resourceVersion")]
        + [_dict(q.get("metadata")).get("resourceVersion") for q in children]
    )
    metadata = _metadata(queue, _labels(queue))
    if version:
        metadata["resourceVersion"] = version
    spec: dict[str, Any] = {
        **_fair_sharing(queue),
        "resourceGroups": _group({"name": GPU_RESOURCE, "nominalQuota": text(own)}),
    }
    if parent_of(queue):
        spec["parentName"] = parent_of(queue)
    return {"apiVersion": KUEUE_VERSION, "kind": "Cohort", "metadata": metadata, "spec": spec}


def queue_to_cluster_queue(
    queue: Mapping[str, Any], reserved: Decimal = Decimal(0)
) -> dict[str, Any]:
    """A leaf queue as a Kueue ClusterQueue, ``reserved`` GPUs of Inqueue PodGroups in its
    usage (see the module docstring)."""
    spec = _dict(queue.get("spec"))
    status = _dict(queue.get("status"))
    nominal = deserved(queue)
    resource: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": text(nominal)}
    capability = gpus(spec.get("capability"))
    if capability is not None:
        resource["borrowingLimit"] = text(max(Decimal(0), capability - nominal))
    if spec.get("reclaimable") is False:
        resource["lendingLimit"] = "0"
    else:
        guarantee = gpus(_dict(spec.get("guarantee")).get("resource")) or Decimal(0)
        resource["lendingLimit"] = text(max(Decimal(0), nominal - guarantee))
    in_use = (gpus(status.get("allocated")) or Decimal(0)) + reserved
    used = {
        "name": GPU_RESOURCE,
        "total": text(in_use),
        "borrowed": text(max(Decimal(0), in_use - nominal)),
    }
    kueue_spec: dict[str, Any] = {
        "cohortName": parent_of(queue),
        "namespaceSelector": {},
        **_fair_sharing(queue),
        "resourceGroups": _group(resource),
    }
    if status.get("state") in CLOSED_STATES:
        kueue_spec["stopPolicy"] = "Hold"

    def count(*keys: str) -> int:
        return sum(v for k in keys if isinstance(v := status.get(k), int) and v > 0)

    return {
        "apiVersion": KUEUE_VERSION,
        "kind": "ClusterQueue",
        "metadata": _metadata(queue, _labels(queue)),
        "spec": kueue_spec,
        "status": {
            "flavorsUsage": [{"name": FLAVOR, "resources": [used]}],
            "pendingWorkloads": count("pending"),
            "reservingWorkloads": count("inqueue", "running"),
            "admittedWorkloads": count("running"),
        },
    }


def translate_queues(
    queues: Iterable[Mapping[str, Any]], reserved: Mapping[str, Decimal] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(Cohorts, ClusterQueues) of a complete list of Volcano queues, each by name, with the
    ``reserved`` GPUs of each queue's Inqueue PodGroups (``reserved_gpus``) in its usage."""
    reserved = reserved or {}
    listed = sorted((q for q in queues if name_of(q)), key=name_of)
    parents = parent_names(listed)
    children: dict[str, list[Mapping[str, Any]]] = {}
    for queue in listed:
        children.setdefault(parent_of(queue), []).append(queue)
    cohorts = [
        queue_to_cohort(q, children.get(name_of(q), [])) for q in listed if name_of(q) in parents
    ]
    cluster_queues = [
        queue_to_cluster_queue(q, reserved.get(name_of(q), Decimal(0)))
        for q in listed
        if name_of(q) not in parents
    ]
    return cohorts, cluster_queues


def queues_as(
    kind: str,
    queues: Iterable[Mapping[str, Any]],
    reserved: Mapping[str, Decimal] | None = None,
) -> dict[str, dict[str, Any]]:
    """The queues translated to ``kind`` ("Cohort" or "ClusterQueue"), by name."""
    cohorts, cluster_queues = translate_queues(queues, reserved)
    return {name_of(obj): obj for obj in (cohorts if kind == "Cohort" else cluster_queues)}


# --- PodGroups -------------------------------------------------------------------------------


def workload_name(pod_group: Mapping[str, Any]) -> str:
    """The PodGroup's name without the ``-<job uid>`` a Volcano Job appends (the controller
    owner's uid); other PodGroups keep their name."""
    name = name_of(pod_group)
    for ref in _dict(pod_group.get("metadata")).get("ownerReferences") or []:
        uid = _dict(ref).get("uid")
        if isinstance(uid, str) and uid and name.endswith(f"-{uid}") and len(name) > len(uid) + 1:
            return name[: -len(uid) - 1]
    return name


def _pod_set(spec: Mapping[str, Any]) -> dict[str, Any]:
    """One pod set of ``minMember`` pods sharing ``minResources`` evenly (the gang)."""
    member = spec.get("minMember")
    count = member if isinstance(member, int) and member > 0 else 1
    per_pod: dict[str, str] = {}
    for resource, value in sorted(_dict(spec.get("minResources")).items()):
        amount = quantity(value)
        if amount is not None and amount > 0:
            per_pod[str(resource)] = text(amount / count)
    tasks = _dict(spec.get("minTaskMember"))
    name = next(iter(tasks)) if len(tasks) == 1 else "main"
    container = {"name": name, "resources": {"requests": per_pod}} if per_pod else {"name": name}
    return {"name": name, "count": count, "template": {"spec": {"containers": [container]}}}


def _condition(kind: str, status: str, reason: str, message: str, at: Any) -> dict[str, Any]:
    condition = {"type": kind, "status": status, "reason": reason, "message": message}
    if isinstance(at, str) and at:
        condition["lastTransitionTime"] = at
    return condition


def _conditions(pod_group: Mapping[str, Any], phase: str) -> list[dict[str, Any]]:
    """Kueue conditions for a PodGroup phase, at the times its own conditions give."""
    status = _dict(pod_group.get("status"))
    own = [_dict(cond) for cond in status.get("conditions") or []]
    scheduled = next((x for x in own if x.get("type") == "Scheduled"), None)
    unschedulable = next(
        (x for x in own if x.get("type") == "Unschedulable" and x.get("status") == "True"), None
    )
    created = _dict(pod_group.get("metadata")).get("creationTimestamp")
    if phase in PENDING_PHASES:
        why = unschedulable or {}
        return [
            _condition(
                c.COND_QUOTA_RESERVED,
                "False",
                str(why.get("reason") or "Pending"),
                str(why.get("message") or ""),
                why.get("lastTransitionTime") or created,
            )
        ]
    if phase == RESERVING_PHASE:
        # Volcano records no Inqueue condition: the reservation dates from the newest one it has.
        times = [str(x.get("lastTransitionTime")) for x in own if x.get("lastTransitionTime")]
        at = max(times, default=created)
        waiting = "admitted by Volcano's enqueue, pods not bound yet"
        return [
            _condition(c.COND_QUOTA_RESERVED, "True", RESERVING_PHASE, waiting, at),
            _condition(c.COND_ADMITTED, "False", RESERVING_PHASE, waiting, at),
        ]
    at = (scheduled or {}).get("lastTransitionTime") or created
    reason = str((scheduled or {}).get("reason") or "Scheduled")[:200]
    conditions = [
        _condition(c.COND_QUOTA_RESERVED, "True", "Scheduled", reason, at),
        _condition(c.COND_ADMITTED, "True", "Scheduled", reason, at),
    ]
    if phase in FINISHED_PHASES:
        failed = status.get("failed")
        succeeded = not (isinstance(failed, int) and failed > 0)
        conditions.append(
            _condition(
                c.COND_FINISHED,
                "True",
                c.FINISHED_SUCCEEDED if succeeded else "Failed",
                f"PodGroup {phase}",
                None,
            )
        )
    return conditions


def pod_group_to_workload(pod_group: Mapping[str, Any]) -> dict[str, Any]:
    """A PodGroup as a Kueue Workload (see the module docstring)."""
    spec = _dict(pod_group.get("spec"))
    status = _dict(pod_group.get("status"))
    phase = str(status.get("phase") or "Pending")
    queue = spec.get("queue") if isinstance(spec.get("queue"), str) else ""
    meta = _dict(pod_group.get("metadata"))
    labels = {str(k): str(v) for k, v in _dict(meta.get("labels")).items()}
    labels[c.LABEL_SCHEDULER] = SCHEDULER
    labels[c.LABEL_CLUSTER_QUEUE] = queue or "default"
    annotations = {c.VOLCANO_GROUP_NAME: name_of(pod_group), PHASE_ANNOTATION: phase}
    metadata = _metadata(
        pod_group,
        labels,
        annotations=annotations,
        ownerReferences=list(meta.get("ownerReferences") or []),
    )
    metadata["name"] = workload_name(pod_group)
    pod_set = _pod_set(spec)
    workload_spec: dict[str, Any] = {
        "queueName": labels[c.LABEL_CLUSTER_QUEUE],
        "podSets": [pod_set],
    }
    if isinstance(spec.get("priorityClassName"), str) and spec["priorityClassName"]:
        workload_spec["priorityClassRef"] = {
            "group": "scheduling.k8s.io",
            "kind": "PriorityClass",
            "name": spec["priorityClassName"],
        }
    workload_status: dict[str, Any] = {"conditions": _conditions(pod_group, phase)}
    if phase not in PENDING_PHASES:
        usage = {
            resource: text(quantity(value) or Decimal(0))
            for resource, value in sorted(_dict(spec.get("minResources")).items())
        }
        workload_status["admission"] = {
            "clusterQueue": labels[c.LABEL_CLUSTER_QUEUE],
            "podSetAssignments": [
                {
                    "name": pod_set["name"],
                    "flavors": {GPU_RESOURCE: FLAVOR} if GPU_RESOURCE in usage else {},
                    "resourceUsage": usage,
                    "count": pod_set["count"],
                }
            ],
        }
    return {
        "apiVersion": KUEUE_VERSION,
        "kind": "Workload",
        "metadata": metadata,
        "spec": workload_spec,
        "status": workload_status,
    }


def reservation(pod_group: Mapping[str, Any]) -> tuple[str, Decimal] | None:
    """(its queue, its ``minResources`` GPUs) for an Inqueue PodGroup, else None."""
    if _dict(pod_group.get("status")).get("phase") != RESERVING_PHASE:
        return None
    spec = _dict(pod_group.get("spec"))
    queue = spec.get("queue") if isinstance(spec.get("queue"), str) else ""
    return queue or "default", gpus(spec.get("minResources")) or Decimal(0)


def reserved_gpus(reservations: Iterable[tuple[str, Decimal] | None]) -> dict[str, Decimal]:
    """Per queue, the GPUs its Inqueue PodGroups reserve."""
    found: dict[str, Decimal] = {}
    for entry in reservations:
        if entry is not None:
            found[entry[0]] = found.get(entry[0], Decimal(0)) + entry[1]
    return found
