"""Workloads -> rows and transitions; WorkloadPriorityClasses; borrowing by admission order.

* Workload state, first match wins: ``Finished=True`` -> succeeded (reason ``Succeeded``) or
  failed (any other reason); ``Evicted=True`` -> inactive (deactivation reasons or
  ``spec.active: false``), preempted (``Preempted=True``), requeued (``Requeued`` not True while
  ``status.requeueState.requeueAt`` is set: waiting out a backoff), else evicted;
  ``spec.active: false`` -> inactive; ``Admitted=True`` -> admitted; ``QuotaReserved=True`` ->
  quota_reserved; else pending. An eviction in progress therefore no longer counts as holding.
* ``admitted_gpus`` and the per-flavor usage come from ``status.admission`` only while the
  Workload holds quota (admitted / quota_reserved): finished Workloads keep ``status.admission``
  but hold nothing. Their flavors are kept for history.
* One transition per condition occurrence, keyed (workload, kind, lastTransitionTime):
  QuotaReserved/Admitted/PodsReady/Preempted/Finished when True; Evicted when True (as
  ``deactivated`` for the deactivation reasons); Requeued when True, or when False with a
  ``requeueState.requeueAt`` (the backoff, carrying ``requeue_at``).
* Borrowing by admission order: per ClusterQueue, flavor and GPU resource, holding Workloads are
  ordered by ``quota_reserved_at`` then namespace/name; the part of each one's usage that takes
  the running sum above the flavor's nominal quota is its ``borrowed_gpus``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal

from quotas import constants as c
from quotas.choices import HOLDING_STATES, TransitionKind, WorkloadState
from quotas.ingest.fields import (
    ZERO,
    find_condition,
    gpu_equivalent,
    gpu_total,
    is_gpu_resource,
    read_bool,
    read_conditions,
    read_dict,
    read_int,
    read_list,
    read_optional_int,
    read_quantity,
    read_str,
    read_str_map,
    read_time,
    to_float,
)
from quotas.ingest.resources import add_requests, pod_requests
from quotas.ingest.rows import (
    ClusterQueueRow,
    ObjectMeta,
    PriorityClassRow,
    TransitionRow,
    WorkloadRow,
)

# States whose Workloads wait for quota: their requests are a queue's pending demand.
PENDING_STATES = frozenset(
    {
        WorkloadState.PENDING,
        WorkloadState.EVICTED,
        WorkloadState.PREEMPTED,
        WorkloadState.REQUEUED,
    }
)
_PREEMPTOR_UIDS = re.compile(r"\(UID: (?P<uid>[^,)\s]+)(?:, JobUID: (?P<job_uid>[^)\s]+))?\)")
_PREEMPTOR_PATH = re.compile(r"preemptor path: (?P<path>[^;]+)")


def parse_priority_class(item: dict, meta: ObjectMeta) -> PriorityClassRow:
    """A WorkloadPriorityClass and its value."""
    return PriorityClassRow(
        meta=meta,
        value=read_int(item.get("value"), "value"),
        description=read_str(item.get("description"), "description"),
    )


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
        return read_str(spec.get("priorityClassName"), "spec.priorityClassName")
    ref = read_dict(spec.get("priorityClassRef"), "spec.priorityClassRef")
    return read_str(ref.get("name"), "spec.priorityClassRef.name")


def _pod_sets(spec: dict) -> tuple[list[dict], dict[str, Decimal]]:
    pod_sets = []
    totals: dict[str, Decimal] = {}
    for index, pod_set in enumerate(read_list(spec.get("podSets"), "spec.podSets")):
        pod_set = read_dict(pod_set, f"podSets[{index}]", required=True)
        template = read_dict(pod_set.get("template"), f"podSets[{index}].template")
        per_pod = pod_requests(read_dict(template.get("spec"), f"podSets[{index}].template.spec"))
        count = read_int(pod_set.get("count"), f"podSets[{index}].count", default=1)
        entry: dict[str, object] = {
            "name": read_str(pod_set.get("name"), f"podSets[{index}].name"),
            "count": count,
            "gpus_per_pod": to_float(gpu_total(per_pod)),
            "resources": {name: str(value) for name, value in sorted(per_pod.items())},
        }
        # How long an evicted pod may take to stop: an input of the reclaim-time estimate.
        grace = read_optional_int(
            read_dict(template.get("spec"), "template.spec").get("terminationGracePeriodSeconds"),
            f"podSets[{index}].template.spec.terminationGracePeriodSeconds",
        )
        if grace is not None:
            entry["termination_grace_period_seconds"] = grace
        # Which ResourceFlavors the pods may land on: the quota what-if needs it.
        selector = read_dict(template.get("spec"), "template.spec").get("nodeSelector")
        if isinstance(selector, dict) and selector:
            entry["node_selector"] = {str(k): str(v) for k, v in sorted(selector.items())}
        pod_sets.append(entry)
        totals = add_requests(totals, {name: value * count for name, value in per_pod.items()})
    return pod_sets, totals


def _admission(status: dict) -> tuple[str, dict[tuple[str, str], Decimal], dict[str, dict]]:
    admission = read_dict(status.get("admission"), "status.admission")
    usage: dict[tuple[str, str], Decimal] = {}
    podset_flavors: dict[str, dict[str, str]] = {}
    assignments = read_list(admission.get("podSetAssignments"), "admission.podSetAssignments")
    for index, assignment in enumerate(assignments):
        what = f"podSetAssignments[{index}]"
        assignment = read_dict(assignment, what, required=True)
        flavors = read_str_map(assignment.get("flavors"), f"{what}.flavors")
        podset_flavors[read_str(assignment.get("name"), f"{what}.name")] = flavors
        for resource, value in read_dict(assignment.get("resourceUsage"), what).items():
            key = (flavors.get(resource, ""), resource)
            usage[key] = usage.get(key, ZERO) + read_quantity(value, f"{what} {resource}")
    return read_str(admission.get("clusterQueue"), "admission.clusterQueue"), usage, podset_flavors


def _state(conditions: list[dict], active: bool, requeue_at: datetime | None) -> tuple[str, dict]:
    """The state and the condition that decided it (see the module docstring)."""

    def true(kind: str) -> dict | None:
        cond = find_condition(conditions, kind)
        return cond if cond is not None and cond.get("status") == "True" else None

    if finished := true(c.COND_FINISHED):
        succeeded = finished.get("reason") == c.FINISHED_SUCCEEDED
        return (WorkloadState.SUCCEEDED if succeeded else WorkloadState.FAILED), finished
    if evicted := true(c.COND_EVICTED):
        if not active or evicted.get("reason") in c.DEACTIVATION_REASONS:
            return WorkloadState.INACTIVE, evicted
        if preempted := true(c.COND_PREEMPTED):
            return WorkloadState.PREEMPTED, preempted
        requeued = find_condition(conditions, c.COND_REQUEUED)
        if requeue_at is not None and (requeued is None or requeued.get("status") != "True"):
            return WorkloadState.REQUEUED, requeued or evicted
        return WorkloadState.EVICTED, evicted
    if not active:
        return WorkloadState.INACTIVE, {}
    if admitted := true(c.COND_ADMITTED):
        return WorkloadState.ADMITTED, admitted
    if reserved := true(c.COND_QUOTA_RESERVED):
        return WorkloadState.QUOTA_RESERVED, reserved
    return WorkloadState.PENDING, find_condition(conditions, c.COND_QUOTA_RESERVED) or {}


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
        at = read_time(cond.get("lastTransitionTime"), f"condition {kind_name} lastTransitionTime")
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


def parse_workload(
    item: dict,
    meta: ObjectMeta,
    lq_targets: Mapping[tuple[str, str], str],
    class_values: Mapping[str, int],
) -> tuple[WorkloadRow, list[TransitionRow]]:
    """A Workload's row and the transitions its conditions record."""
    spec = read_dict(item.get("spec"), "spec", required=True)
    status = read_dict(item.get("status"), "status")
    api_version = item["apiVersion"]
    conditions = read_conditions(status)
    active = read_bool(spec.get("active"), "spec.active", default=True)
    requeue_state = read_dict(status.get("requeueState"), "status.requeueState")
    requeue_at = read_time(requeue_state.get("requeueAt"), "requeueState.requeueAt")
    state, deciding = _state(conditions, active, requeue_at)
    pod_sets, requests = _pod_sets(spec)
    admitted_cq, usage, podset_flavors = _admission(status)
    holding = state in HOLDING_STATES
    queue_name = read_str(spec.get("queueName"), "spec.queueName")
    class_name = _priority_class_name(spec, api_version)
    priority = read_optional_int(spec.get("priority"), "spec.priority")
    accumulated_key = (
        "accumulatedPastExexcutionTimeSeconds"
        if api_version == c.V1BETA1
        else "accumulatedPastExecutionTimeSeconds"
    )
    owner = _owner(meta)

    def true_time(kind: str) -> datetime | None:
        cond = find_condition(conditions, kind)
        if cond is None or cond.get("status") != "True":
            return None
        return read_time(cond.get("lastTransitionTime"), f"{kind} lastTransitionTime")

    flavors: dict[str, str] = {}
    for (flavor, resource), _amount in usage.items():
        flavors.setdefault(resource, flavor)
    row = WorkloadRow(
        meta=meta,
        owner_kind=read_str(owner.get("kind"), "ownerReference.kind"),
        owner_name=read_str(owner.get("name"), "ownerReference.name"),
        owner_uid=read_str(owner.get("uid"), "ownerReference.uid"),
        job_uid=meta.labels.get(c.LABEL_JOB_UID, ""),
        queue_name=queue_name,
        # A source without LocalQueues (Volcano, KAI) names the ClusterQueue on the Workload.
        cluster_queue_name=admitted_cq
        or lq_targets.get((meta.namespace, queue_name), "")
        or meta.labels.get(c.LABEL_CLUSTER_QUEUE, ""),
        priority=priority if priority is not None else class_values.get(class_name, 0),
        priority_class_name=class_name,
        active=active,
        pod_sets=pod_sets,
        requested_gpus=to_float(gpu_total(requests)),
        admitted_gpus=to_float(
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
            0, read_int(status.get(accumulated_key), f"status.{accumulated_key}")
        ),
        requeue_count=max(0, read_int(requeue_state.get("count"), "requeueState.count")),
        requeue_at=requeue_at,
        requests=requests,
        usage=usage if holding else {},
        podset_flavors=podset_flavors,
        owner_pod_uids=tuple(
            ref.get("uid") or "" for ref in meta.owner_references if ref.get("kind") == "Pod"
        ),
        evictions_total=_evictions_total(status),
        scheduler=meta.labels.get(c.LABEL_SCHEDULER) or c.DEFAULT_SCHEDULER,
        pod_group=meta.annotations.get(c.VOLCANO_GROUP_NAME)
        or meta.annotations.get(c.KAI_GROUP_NAME, ""),
    )
    return row, _transitions(meta, conditions, requeue_at)


def _evictions_total(status: dict) -> int:
    """``status.schedulingStats.evictions[].count`` summed (every eviction, whatever its reason).

    A malformed entry counts nothing: the counts only number earlier attempts, never the row.
    """
    total = 0
    stats = status.get("schedulingStats")
    evictions = stats.get("evictions") if isinstance(stats, dict) else None
    for entry in evictions if isinstance(evictions, list) else []:
        count = entry.get("count") if isinstance(entry, dict) else None
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            total += count
    return total


def infer_borrowing(workloads: list[WorkloadRow], cluster_queues: list[ClusterQueueRow]) -> None:
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
                row.borrowed_gpus = to_float(
                    Decimal(str(row.borrowed_gpus)) + gpu_equivalent(key[2], above)
                )
