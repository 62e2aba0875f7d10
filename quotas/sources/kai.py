"""KAI Scheduler queues and PodGroups -> Kueue-shaped (v1beta2) objects, so the Kueue sync,
ingest, store and read layer serve a KAI cluster unchanged (docs/architecture.md "Quota
sources"). The classification, the own-quota rule and the Workload shape are
``quotas.sources.common``'s, shared with Volcano.

Pure functions on the API server's dicts; nothing here talks to a server.

* A ``Queue`` (``scheduling.run.ai/v2``) named by another queue's ``spec.parentQueue`` is a
  **Cohort** (``parentName`` = its own ``parentQueue``); its own quota is
  max(0, quota - the sum of its children's nominal), so its subtree's nominal is its quota.
  ``limit`` gives the Cohort a ``borrowingLimit`` (limit - quota; −1: none).
* Every other queue is a **ClusterQueue** with ``cohortName`` = ``spec.parentQueue`` (none: no
  cohort; KAI's top queues share the cluster, which Kueue cannot express without a cohort the
  cluster does not have), one resource group of ``nvidia.com/gpu`` in ``FLAVOR``:
  nominal = ``spec.resources.gpu.quota`` (absent: 0), borrowingLimit = limit - quota (limit −1
  or absent: no limit), no lendingLimit: KAI lends every unused GPU of a queue's quota to
  over-quota work of other queues and reclaims it when the queue needs it, which is Kueue's
  reading of a quota without lendingLimit. ``status.flavorsUsage``: ``status.allocated`` (the
  GPUs of the queue's bound pods; KAI gang-schedules pods directly, there is no reservation
  state to add), borrowed = max(0, allocated - nominal).
* **Unlimited quota (−1)**: KAI never counts such a queue over its quota (its deserved is
  whatever it asks for), and Kueue has no unlimited nominal. A very large nominal would swamp
  every sum the product makes (cohort and fleet nominal, utilisation, lendable quota) and an
  absent one reads as 0 (all of it borrowed). So the nominal is what the queue holds
  (``status.allocated``): nothing borrowed, nothing unused to lend (lendingLimit 0), and the
  label ``QUOTA_LABEL`` keeps the quota as written (``-1``). An unlimited parent likewise: its
  own quota tops its children's nominal up to what it holds (its ``status.allocated`` counts
  its children's pods), so its subtree never shows borrowing either.
* ``overQuotaWeight`` becomes ``spec.fairSharing.weight`` and the label ``WEIGHT_LABEL``;
  ``priority`` the label ``PRIORITY_LABEL``. Queues carry no workload counts: the ClusterQueue's
  pending and admitted counts are its PodGroups' (``workload_counts``).
* A ``PodGroup`` (``scheduling.run.ai/v2alpha2``) is a **Workload** named like the PodGroup
  without ``pg-`` and the trailing ``-<owner uid>``; its ClusterQueue is ``spec.queue`` (else
  the ``kai.scheduler/queue`` label). One pod set of ``minMember`` pods sharing
  ``status.resourcesStatus.requested`` (else ``allocated``). Its state, first match wins:
  ``status.phase`` Successful / Failed -> finished; something in
  ``status.resourcesStatus.allocated`` -> holds it (QuotaReserved and Admitted: its pods are
  bound); something requested -> pending, the reason the newest true ``schedulingConditions``
  entry's first ``reasons[].reason`` (e.g. ``NonPreemptibleOverQuota``); nothing requested or
  allocated (no pod of it left, and no phase saying how its job ended) -> inactive
  (``spec.active: false``, reason ``NoPods``): neither pending demand nor held quota, and not
  called finished since its owner's completion is not visible here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from decimal import Decimal
from typing import Any

from core.mig import GPU_RESOURCE
from quotas import constants as c
from quotas.kueue.payloads import Kind
from quotas.sources import common
from quotas.sources.common import KUEUE_VERSION, as_dict, name_of, quantity, text

KAI_GROUP = "scheduling.run.ai"
QUEUE_VERSIONS = ("v2",)
POD_GROUP_VERSIONS = ("v2alpha2",)
QUEUE = Kind("Queue", "queues", KAI_GROUP, False)
POD_GROUP = Kind("PodGroup", "podgroups", KAI_GROUP, True)
SCHEDULER = "kai"
UNLIMITED = Decimal(-1)
WEIGHT_LABEL = "gpu-ledger.io/kai-over-quota-weight"
PRIORITY_LABEL = "gpu-ledger.io/kai-priority"
QUOTA_LABEL = "gpu-ledger.io/kai-gpu-quota"
PREEMPTIBILITY_LABEL = "gpu-ledger.io/kai-preemptibility"
NO_PODS = "NoPods"
FINISHED_PHASES = {"Successful": c.FINISHED_SUCCEEDED, "Succeeded": c.FINISHED_SUCCEEDED}
FAILED_PHASES = frozenset({"Failed"})


# --- queues ----------------------------------------------------------------------------------


def parent_of(queue: Mapping[str, Any]) -> str:
    """The queue's ``spec.parentQueue``; "" for a top queue."""
    parent = as_dict(queue.get("spec")).get("parentQueue")
    return parent if isinstance(parent, str) and parent != name_of(queue) else ""


def parent_names(queues: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The queues that are Cohorts: those another queue names as its parent."""
    return common.parent_names(queues, parent_of)


def _gpu(queue: Mapping[str, Any]) -> dict[str, Any]:
    return as_dict(as_dict(as_dict(queue.get("spec")).get("resources")).get("gpu"))


def _bound(value: Any) -> Decimal | None:
    """A quota or limit as written; None for −1 (unlimited) and absent."""
    amount = quantity(value)
    return None if amount is None or amount == UNLIMITED else amount


def allocated(queue: Mapping[str, Any]) -> Decimal:
    """``status.allocated`` GPUs: ``nvidia.com/gpu``, else the first entry ending in ``/gpu``."""
    found = as_dict(as_dict(queue.get("status")).get("allocated"))
    key = (
        GPU_RESOURCE
        if GPU_RESOURCE in found
        else next((k for k in sorted(found) if str(k).endswith("/gpu")), None)
    )
    return (quantity(found.get(key)) if key else None) or Decimal(0)


def is_unlimited(queue: Mapping[str, Any]) -> bool:
    return quantity(_gpu(queue).get("quota")) == UNLIMITED


def nominal(queue: Mapping[str, Any]) -> Decimal:
    """The quota (absent: 0); unlimited: what the queue holds (see the module docstring)."""
    if is_unlimited(queue):
        return allocated(queue)
    return _bound(_gpu(queue).get("quota")) or Decimal(0)


def _limits(queue: Mapping[str, Any], quota: Decimal) -> dict[str, str]:
    limit = _bound(_gpu(queue).get("limit"))
    return {} if limit is None else {"borrowingLimit": text(max(Decimal(0), limit - quota))}


def _weight(queue: Mapping[str, Any]) -> Decimal | None:
    return quantity(_gpu(queue).get("overQuotaWeight"))


def _labels(queue: Mapping[str, Any]) -> dict[str, str]:
    labels = common.labels_of(queue, SCHEDULER)
    gpu = _gpu(queue)
    if gpu.get("quota") is not None:
        labels[QUOTA_LABEL] = str(gpu["quota"])
    if gpu.get("overQuotaWeight") is not None:
        labels[WEIGHT_LABEL] = str(gpu["overQuotaWeight"])
    priority = as_dict(queue.get("spec")).get("priority")
    if priority is not None:
        labels[PRIORITY_LABEL] = str(priority)
    return labels


def queue_to_cohort(queue: Mapping[str, Any], children: list[Mapping[str, Any]]) -> dict[str, Any]:
    """A parent queue as a Kueue Cohort whose own quota tops its children's up to its quota."""
    subtree = nominal(queue)
    own = common.own_quota(subtree, (nominal(q) for q in children))
    resource = {"name": GPU_RESOURCE, "nominalQuota": text(own), **_limits(queue, subtree)}
    return common.cohort(
        queue, children, resource, _labels(queue), parent_of(queue), _weight(queue)
    )


def queue_to_cluster_queue(
    queue: Mapping[str, Any], counts: tuple[int, int] = (0, 0)
) -> dict[str, Any]:
    """A leaf queue as a Kueue ClusterQueue; ``counts`` = its (pending, admitted) PodGroups."""
    quota = nominal(queue)
    resource: dict[str, Any] = {
        "name": GPU_RESOURCE,
        "nominalQuota": text(quota),
        **_limits(queue, quota),
    }
    if is_unlimited(queue):
        resource["lendingLimit"] = "0"
    pending, admitted = counts
    return {
        "apiVersion": KUEUE_VERSION,
        "kind": "ClusterQueue",
        "metadata": common.metadata(queue, _labels(queue)),
        "spec": {
            "cohortName": parent_of(queue),
            "namespaceSelector": {},
            **common.fair_sharing(_weight(queue)),
            "resourceGroups": common.resource_groups(resource),
        },
        "status": {
            "flavorsUsage": common.usage(allocated(queue), quota),
            "pendingWorkloads": pending,
            "reservingWorkloads": admitted,
            "admittedWorkloads": admitted,
        },
    }


def translate_queues(
    queues: Iterable[Mapping[str, Any]],
    counts: Mapping[str, tuple[int, int]] | None = None,
    only: Collection[str] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(Cohorts, ClusterQueues) of a complete list of KAI queues; ``counts`` per queue as
    ``workload_counts`` gives them; ``only`` these queues when given
    (``common.translate_queues``)."""
    found = counts or {}
    return common.translate_queues(
        queues,
        parent_of,
        queue_to_cohort,
        lambda q: queue_to_cluster_queue(q, found.get(name_of(q), (0, 0))),
        (),
        only,
    )


def queues_as(
    kind: str,
    queues: Iterable[Mapping[str, Any]],
    counts: Mapping[str, tuple[int, int]] | None = None,
    only: Collection[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The queues translated to ``kind`` ("Cohort" or "ClusterQueue"), by name."""
    return common.objects_of(kind, translate_queues(queues, counts, only))


# --- PodGroups -------------------------------------------------------------------------------


def workload_name(pod_group: Mapping[str, Any]) -> str:
    """The PodGroup's name without ``pg-`` and the trailing ``-<owner uid>`` the podgrouper
    adds (an owner reference's uid, or the top owner's)."""
    meta = as_dict(pod_group.get("metadata"))
    uids: list[Any] = [as_dict(ref).get("uid") for ref in meta.get("ownerReferences") or []]
    top = as_dict(meta.get("annotations")).get("kai.scheduler/top-owner-metadata")
    if isinstance(top, str):
        uids += [line[4:].strip() for line in top.splitlines() if line.startswith("uid:")]
    name = common.strip_uid(name_of(pod_group), uids)
    short = name.removeprefix("pg-")
    return short if short and name != name_of(pod_group) else name


def queue_of(pod_group: Mapping[str, Any]) -> str:
    """``spec.queue``, else the ``kai.scheduler/queue`` label."""
    queue = as_dict(pod_group.get("spec")).get("queue")
    if isinstance(queue, str) and queue:
        return queue
    label = as_dict(as_dict(pod_group.get("metadata")).get("labels")).get(c.KAI_QUEUE_LABEL)
    return label if isinstance(label, str) else ""


def _resources(pod_group: Mapping[str, Any], which: str) -> dict[str, Any]:
    """``status.resourcesStatus[which]``, the entries above 0."""
    found = as_dict(as_dict(as_dict(pod_group.get("status")).get("resourcesStatus")).get(which))
    return {k: v for k, v in found.items() if (quantity(v) or Decimal(0)) > 0}


def _why_pending(pod_group: Mapping[str, Any]) -> dict[str, Any]:
    """The newest true scheduling condition, its first detailed reason as ``reason``."""
    status = as_dict(pod_group.get("status"))
    true = [
        as_dict(x)
        for x in status.get("schedulingConditions") or []
        if as_dict(x).get("status") == "True"
    ]
    if not true:
        return {}
    newest = max(true, key=lambda x: str(x.get("lastTransitionTime") or ""))
    detailed = [as_dict(r) for r in newest.get("reasons") or [] if as_dict(r).get("reason")]
    first = detailed[0] if detailed else {}
    return {
        "reason": str(first.get("reason") or newest.get("reason") or "Unschedulable")[:200],
        "message": str(first.get("message") or newest.get("message") or ""),
        "at": newest.get("lastTransitionTime"),
    }


def state_of(pod_group: Mapping[str, Any]) -> str:
    """ "finished", "admitted", "pending" or "empty" (see the module docstring)."""
    phase = as_dict(pod_group.get("status")).get("phase")
    if phase in FINISHED_PHASES or phase in FAILED_PHASES:
        return "finished"
    if _resources(pod_group, "allocated"):
        return "admitted"
    if _resources(pod_group, "requested"):
        return "pending"
    return "empty"


def _conditions(pod_group: Mapping[str, Any], state: str) -> list[dict[str, Any]]:
    created = as_dict(pod_group.get("metadata")).get("creationTimestamp")
    condition = common.condition
    if state == "pending":
        why = _why_pending(pod_group)
        return [
            condition(
                c.COND_QUOTA_RESERVED,
                "False",
                why.get("reason") or "Pending",
                why.get("message") or "",
                why.get("at") or created,
            )
        ]
    if state == "empty":
        waiting = "no pod of this PodGroup requests or holds resources"
        return [condition(c.COND_QUOTA_RESERVED, "False", NO_PODS, waiting, created)]
    # KAI records no bind time on the PodGroup: the reservation dates from its creation.
    bound = "pods bound by KAI Scheduler"
    conditions = [
        condition(c.COND_QUOTA_RESERVED, "True", "Allocated", bound, created),
        condition(c.COND_ADMITTED, "True", "Allocated", bound, created),
    ]
    if state == "finished":
        phase = str(as_dict(pod_group.get("status")).get("phase"))
        reason = FINISHED_PHASES.get(phase, "Failed")
        conditions.append(condition(c.COND_FINISHED, "True", reason, f"PodGroup {phase}", None))
    return conditions


def pod_group_to_workload(pod_group: Mapping[str, Any]) -> dict[str, Any]:
    """A PodGroup as a Kueue Workload (see the module docstring)."""
    spec = as_dict(pod_group.get("spec"))
    state = state_of(pod_group)
    held = _resources(pod_group, "allocated")
    labels = common.labels_of(pod_group, SCHEDULER)
    if isinstance(spec.get("preemptibility"), str):
        labels[PREEMPTIBILITY_LABEL] = spec["preemptibility"]
    totals = _resources(pod_group, "requested") or held
    return common.workload(
        pod_group,
        name=workload_name(pod_group),
        queue=queue_of(pod_group),
        labels=labels,
        annotations={c.KAI_GROUP_NAME: name_of(pod_group)},
        pod_set=common.gang_pod_set("main", spec.get("minMember"), totals),
        conditions=_conditions(pod_group, state),
        held=held if state in ("admitted", "finished") else None,
        active=state != "empty",
    )


def group_facts(pod_group: Mapping[str, Any]) -> tuple[str, str] | None:
    """(its queue, "pending" or "admitted") for a PodGroup that waits or holds, else None."""
    state = state_of(pod_group)
    return (queue_of(pod_group), state) if state in ("pending", "admitted") else None


def workload_counts(facts: Iterable[tuple[str, str] | None]) -> dict[str, tuple[int, int]]:
    """Per queue, (pending, admitted) PodGroups."""
    found: dict[str, tuple[int, int]] = {}
    for entry in facts:
        if entry is not None:
            pending, admitted = found.get(entry[0], (0, 0))
            waits = entry[1] == "pending"
            found[entry[0]] = (pending + waits, admitted + (not waits))
    return found


SOURCE = common.Source(
    name=SCHEDULER,
    group=KAI_GROUP,
    queue=QUEUE,
    pod_group=POD_GROUP,
    queue_versions=QUEUE_VERSIONS,
    pod_group_versions=POD_GROUP_VERSIONS,
    parent_names=parent_names,
    parent_of=parent_of,
    queues_as=queues_as,
    pod_group_to_workload=pod_group_to_workload,
    group_facts=group_facts,
    summarize=workload_counts,
)
