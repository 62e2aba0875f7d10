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
The parent/child classification, the own-quota rule and the Workload shape are
``quotas.sources.common``'s, shared with KAI.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from decimal import Decimal
from typing import Any

from core.mig import GPU_RESOURCE
from quotas import constants as c
from quotas.kueue.payloads import Kind
from quotas.sources import common
from quotas.sources.common import FLAVOR as FLAVOR
from quotas.sources.common import KUEUE_VERSION, as_dict, gpus, name_of, quantity, text

VOLCANO_GROUP = "scheduling.volcano.sh"
# Versions read, preferred first.
VOLCANO_VERSIONS = ("v1beta1",)
QUEUE = Kind("Queue", "queues", VOLCANO_GROUP, False)
POD_GROUP = Kind("PodGroup", "podgroups", VOLCANO_GROUP, True)
SCHEDULER = "volcano"
# Volcano's top queue: the scheduler creates it, and a queue without a parent hangs under it.
ROOT = "root"
# The name Volcano gives the PodGroup of a pod that names none: ``podgroup-<owner or pod uid>``.
BARE_POD_GROUP_PREFIX = "podgroup"
WEIGHT_LABEL = "gpu-ledger.io/volcano-weight"
STATE_LABEL = "gpu-ledger.io/volcano-state"
PHASE_ANNOTATION = "gpu-ledger.io/volcano-phase"
CLOSED_STATES = frozenset({"Closed", "Closing"})
HOLDING_PHASES = frozenset({"Running", "Unknown"})
RESERVING_PHASE = "Inqueue"
PENDING_PHASES = frozenset({"Pending"})
FINISHED_PHASES = frozenset({"Completed"})


# --- queues ----------------------------------------------------------------------------------


def parent_of(queue: Mapping[str, Any]) -> str:
    """The queue's parent: ``spec.parent``, else ``root`` (``root`` itself has none)."""
    name = name_of(queue)
    parent = as_dict(queue.get("spec")).get("parent")
    if isinstance(parent, str) and parent and parent != name:
        return parent
    return "" if name == ROOT else ROOT


def parent_names(queues: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The queues that are Cohorts: those another queue names as parent, and ``root``."""
    return common.parent_names(queues, parent_of, (ROOT,))


def deserved(queue: Mapping[str, Any]) -> Decimal:
    """``spec.deserved[nvidia.com/gpu]``, 0 when absent."""
    return gpus(as_dict(queue.get("spec")).get("deserved")) or Decimal(0)


def _labels(queue: Mapping[str, Any]) -> dict[str, str]:
    spec = as_dict(queue.get("spec"))
    labels = common.labels_of(queue, SCHEDULER)
    if spec.get("weight") is not None:
        labels[WEIGHT_LABEL] = str(spec["weight"])
    state = as_dict(queue.get("status")).get("state")
    if isinstance(state, str) and state:
        labels[STATE_LABEL] = state
    return labels


def _weight(queue: Mapping[str, Any]) -> Decimal | None:
    return quantity(as_dict(queue.get("spec")).get("weight"))


def queue_to_cohort(queue: Mapping[str, Any], children: list[Mapping[str, Any]]) -> dict[str, Any]:
    """A parent queue as a Kueue Cohort whose own quota tops its children's up to its
    deserved."""
    own = common.own_quota(deserved(queue), (deserved(q) for q in children))
    resource = {"name": GPU_RESOURCE, "nominalQuota": text(own)}
    return common.cohort(
        queue, children, resource, _labels(queue), parent_of(queue), _weight(queue)
    )


def queue_to_cluster_queue(
    queue: Mapping[str, Any], reserved: Decimal = Decimal(0)
) -> dict[str, Any]:
    """A leaf queue as a Kueue ClusterQueue, ``reserved`` GPUs of Inqueue PodGroups in its
    usage (see the module docstring)."""
    spec = as_dict(queue.get("spec"))
    status = as_dict(queue.get("status"))
    nominal = deserved(queue)
    resource: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": text(nominal)}
    capability = gpus(spec.get("capability"))
    if capability is not None:
        resource["borrowingLimit"] = text(max(Decimal(0), capability - nominal))
    if spec.get("reclaimable") is False:
        resource["lendingLimit"] = "0"
    else:
        guarantee = gpus(as_dict(spec.get("guarantee")).get("resource")) or Decimal(0)
        resource["lendingLimit"] = text(max(Decimal(0), nominal - guarantee))
    in_use = (gpus(status.get("allocated")) or Decimal(0)) + reserved
    kueue_spec: dict[str, Any] = {
        "cohortName": parent_of(queue),
        "namespaceSelector": {},
        **common.fair_sharing(_weight(queue)),
        "resourceGroups": common.resource_groups(resource),
    }
    if status.get("state") in CLOSED_STATES:
        kueue_spec["stopPolicy"] = "Hold"

    def count(*keys: str) -> int:
        return sum(v for k in keys if isinstance(v := status.get(k), int) and v > 0)

    return {
        "apiVersion": KUEUE_VERSION,
        "kind": "ClusterQueue",
        "metadata": common.metadata(queue, _labels(queue)),
        "spec": kueue_spec,
        "status": {
            "flavorsUsage": common.usage(in_use, nominal),
            "pendingWorkloads": count("pending"),
            "reservingWorkloads": count("inqueue", "running"),
            "admittedWorkloads": count("running"),
        },
    }


def translate_queues(
    queues: Iterable[Mapping[str, Any]],
    reserved: Mapping[str, Decimal] | None = None,
    only: Collection[str] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(Cohorts, ClusterQueues) of a complete list of Volcano queues, each by name, with the
    ``reserved`` GPUs of each queue's Inqueue PodGroups (``reserved_gpus``) in its usage;
    ``only`` these queues when given (``common.translate_queues``)."""
    found = reserved or {}
    return common.translate_queues(
        queues,
        parent_of,
        queue_to_cohort,
        lambda q: queue_to_cluster_queue(q, found.get(name_of(q), Decimal(0))),
        (ROOT,),
        only,
    )


def queues_as(
    kind: str,
    queues: Iterable[Mapping[str, Any]],
    reserved: Mapping[str, Decimal] | None = None,
    only: Collection[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The queues translated to ``kind`` ("Cohort" or "ClusterQueue"), by name."""
    return common.objects_of(kind, translate_queues(queues, reserved, only))


# --- PodGroups -------------------------------------------------------------------------------


def workload_name(pod_group: Mapping[str, Any]) -> str:
    """The PodGroup's name without the ``-<job uid>`` a Volcano Job appends (the controller
    owner's uid). Volcano's PodGroup controller names the group of a pod that names none
    ``podgroup-<uid>``, the uid of the pod's controller (a ReplicaSet, a Job) or of the pod
    itself, and gives the group the same owner: such a group is named after that owner, or
    every bare pod's group in a namespace would be "podgroup". Other PodGroups keep their
    name."""
    refs = [as_dict(ref) for ref in as_dict(pod_group.get("metadata")).get("ownerReferences") or []]
    name = name_of(pod_group)
    stripped = common.strip_uid(name, (ref.get("uid") for ref in refs))
    if stripped == BARE_POD_GROUP_PREFIX:
        uid = name[len(BARE_POD_GROUP_PREFIX) + 1 :]
        owner = next((ref.get("name") for ref in refs if ref.get("uid") == uid), None)
        return owner if isinstance(owner, str) and owner else name
    return stripped


def _pod_set(spec: Mapping[str, Any]) -> dict[str, Any]:
    """One pod set of ``minMember`` pods sharing ``minResources`` evenly (the gang)."""
    tasks = as_dict(spec.get("minTaskMember"))
    name = next(iter(tasks)) if len(tasks) == 1 else "main"
    return common.gang_pod_set(name, spec.get("minMember"), as_dict(spec.get("minResources")))


def _conditions(pod_group: Mapping[str, Any], phase: str) -> list[dict[str, Any]]:
    """Kueue conditions for a PodGroup phase, at the times its own conditions give."""
    status = as_dict(pod_group.get("status"))
    own = [as_dict(cond) for cond in status.get("conditions") or []]
    scheduled = next((x for x in own if x.get("type") == "Scheduled"), None)
    unschedulable = next(
        (x for x in own if x.get("type") == "Unschedulable" and x.get("status") == "True"), None
    )
    created = as_dict(pod_group.get("metadata")).get("creationTimestamp")
    condition = common.condition
    if phase in PENDING_PHASES:
        why = unschedulable or {}
        return [
            condition(
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
            condition(c.COND_QUOTA_RESERVED, "True", RESERVING_PHASE, waiting, at),
            condition(c.COND_ADMITTED, "False", RESERVING_PHASE, waiting, at),
        ]
    at = (scheduled or {}).get("lastTransitionTime") or created
    reason = str((scheduled or {}).get("reason") or "Scheduled")[:200]
    conditions = [
        condition(c.COND_QUOTA_RESERVED, "True", "Scheduled", reason, at),
        condition(c.COND_ADMITTED, "True", "Scheduled", reason, at),
    ]
    if phase in FINISHED_PHASES:
        failed = status.get("failed")
        succeeded = not (isinstance(failed, int) and failed > 0)
        conditions.append(
            condition(
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
    spec = as_dict(pod_group.get("spec"))
    phase = str(as_dict(pod_group.get("status")).get("phase") or "Pending")
    queue = spec.get("queue") if isinstance(spec.get("queue"), str) else ""
    return common.workload(
        pod_group,
        name=workload_name(pod_group),
        queue=queue or "default",
        labels=common.labels_of(pod_group, SCHEDULER),
        annotations={c.VOLCANO_GROUP_NAME: name_of(pod_group), PHASE_ANNOTATION: phase},
        pod_set=_pod_set(spec),
        conditions=_conditions(pod_group, phase),
        held=None if phase in PENDING_PHASES else as_dict(spec.get("minResources")),
    )


def reservation(pod_group: Mapping[str, Any]) -> tuple[str, Decimal] | None:
    """(its queue, its ``minResources`` GPUs) for an Inqueue PodGroup, else None."""
    if as_dict(pod_group.get("status")).get("phase") != RESERVING_PHASE:
        return None
    spec = as_dict(pod_group.get("spec"))
    queue = spec.get("queue") if isinstance(spec.get("queue"), str) else ""
    return queue or "default", gpus(spec.get("minResources")) or Decimal(0)


def reserved_gpus(reservations: Iterable[tuple[str, Decimal] | None]) -> dict[str, Decimal]:
    """Per queue, the GPUs its Inqueue PodGroups reserve."""
    found: dict[str, Decimal] = {}
    for entry in reservations:
        if entry is not None:
            found[entry[0]] = found.get(entry[0], Decimal(0)) + entry[1]
    return found


SOURCE = common.Source(
    name=SCHEDULER,
    group=VOLCANO_GROUP,
    queue=QUEUE,
    pod_group=POD_GROUP,
    queue_versions=VOLCANO_VERSIONS,
    pod_group_versions=VOLCANO_VERSIONS,
    parent_names=parent_names,
    parent_of=parent_of,
    queues_as=queues_as,
    pod_group_to_workload=pod_group_to_workload,
    group_facts=reservation,
    summarize=reserved_gpus,
)
