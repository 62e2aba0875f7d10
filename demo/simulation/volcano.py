"""The simulated fleet as a Volcano cluster would show it: Queues, PodGroups and their pods.

The demo's second cluster runs Volcano instead of Kueue. The world is the same scenario (teams,
nodes, workloads, the small scheduler); only what the API server would LIST differs:

* ``root`` and one parent Queue per cohort (``research``, ``prod``) whose ``deserved`` is its
  children's; a leaf Queue per team whose ``deserved`` is the team's whole-GPU quota over all
  flavors (Volcano's queues name no node pool), ``capability`` that plus its borrowing limits
  (none when a flavor has no limit), ``guarantee`` its quota minus what it may lend, and in
  ``status`` what its bound pods hold and its PodGroups per phase;
* a PodGroup per workload (``<job>-<job uid>``, owned by a ``batch.volcano.sh`` Job, or
  ``podgroup-<pod uid>`` for a bare pod): ``Pending`` until admitted, ``Inqueue`` while it holds
  its reservation with no pod bound (the ghost), ``Running``, ``Completed``;
* the pods, scheduled by ``volcano``, joined to their PodGroup by
  ``scheduling.k8s.io/group-name``.

``list_payloads`` hands them through the product's own Volcano translation
(``quotas.sources.volcano``), so the demo writes a Volcano cluster's rows exactly as its sync
does. MIG workloads keep their MIG requests in ``minResources``; Volcano's queues here, as
usually, carry whole-GPU quota only.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from core.mig import GPU_RESOURCE
from demo.simulation.kubernetes import iso_time, node_object, pod_object
from demo.simulation.scenario import (
    TEAMS,
    SimFleet,
    SimWorkload,
    pod_uid,
    stable_uid,
)
from quotas.sources import volcano
from quotas.sources.common import KUEUE_VERSION, source_flavor

VOLCANO_API = "scheduling.volcano.sh/v1beta1"
JOB_API = "batch.volcano.sh/v1alpha1"
TEAM_LABEL = "gpuledger.io/team"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"


def _team_quota(team: str) -> tuple[int, int | None, int]:
    """(deserved, capability or None, guarantee) of the team's leaf Queue, in whole GPUs."""
    quotas = TEAMS[team][2]
    deserved = sum(nominal for nominal, _, _ in quotas.values())
    borrows = [borrow for _, borrow, _ in quotas.values()]
    capability = None if None in borrows else deserved + sum(b or 0 for b in borrows)
    lendable = sum(nominal if lend is None else lend for nominal, _, lend in quotas.values())
    return deserved, capability, max(0, deserved - lendable)


def _phase(workload: SimWorkload, at: datetime) -> str:
    if workload.finished_at is not None and workload.finished_at <= at:
        return "Completed"
    if workload.admitted_at is None or workload.admitted_at > at:
        return "Pending"
    return "Running" if workload.placement else "Inqueue"


def pod_group_name(fleet: SimFleet, workload: SimWorkload) -> str:
    if workload.owner_kind == "Pod":
        return f"podgroup-{pod_uid(fleet.seed, workload.namespace, workload.owner_name)}"
    return f"{workload.owner_name}-{stable_uid(fleet.seed, 'job', workload.key)}"


def _queue(
    fleet: SimFleet, name: str, parent: str, spec: dict[str, Any], status: dict[str, Any]
) -> dict[str, Any]:
    labels = {TEAM_LABEL: name} if name in TEAMS else {}
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Queue",
        "metadata": {
            "name": name,
            "uid": stable_uid(fleet.seed, "volcano-queue", name),
            "resourceVersion": str(int(fleet.now.timestamp())),
            "creationTimestamp": iso_time(fleet.start - timedelta(days=30)),
            "labels": labels,
        },
        "spec": {"weight": 1, "reclaimable": True, **({"parent": parent} if parent else {})} | spec,
        "status": {"state": "Open", **status},
    }


def _queues(fleet: SimFleet, phases: dict[str, str]) -> list[dict[str, Any]]:
    counts: dict[str, dict[str, int]] = {team: {} for team in TEAMS}
    for workload in fleet.workloads:
        phase = phases.get(workload.key)
        if phase:
            key = phase.lower()
            counts[workload.team][key] = counts[workload.team].get(key, 0) + 1
    leaves = []
    parents: dict[str, int] = {}
    for team, (_, cohort, _) in TEAMS.items():
        deserved, capability, guarantee = _team_quota(team)
        parents[cohort] = parents.get(cohort, 0) + deserved
        spec: dict[str, Any] = {
            "deserved": {GPU_RESOURCE: str(deserved)},
            "guarantee": {"resource": {GPU_RESOURCE: str(guarantee)}},
        }
        if capability is not None:
            spec["capability"] = {GPU_RESOURCE: str(capability)}
        held = sum(
            len(gpus)
            for w in fleet.workloads
            if w.team == team and w.holding and w.resource == GPU_RESOURCE
            for gpus in w.placement.values()
        )
        phase_counts = {k: counts[team].get(k, 0) for k in ("pending", "inqueue", "running")}
        status = {
            **phase_counts,
            "completed": counts[team].get("completed", 0),
            "unknown": 0,
            "reservation": {},
            "allocated": {GPU_RESOURCE: str(held)},
        }
        leaves.append(_queue(fleet, team, cohort, spec, status))
    tops = [
        _queue(fleet, cohort, volcano.ROOT, {"deserved": {GPU_RESOURCE: str(gpus)}}, {})
        for cohort, gpus in parents.items()
    ]
    everything = {"deserved": {GPU_RESOURCE: str(sum(parents.values()))}}
    root = _queue(fleet, volcano.ROOT, "", everything, {})
    return [root, *tops, *leaves]


def _conditions(fleet: SimFleet, workload: SimWorkload, phase: str) -> list[dict[str, Any]]:
    if phase == "Pending":
        return [
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": f"queue resource quota insufficient: {workload.gpus} GPUs requested",
                "lastTransitionTime": iso_time(workload.created),
                "transitionID": stable_uid(fleet.seed, "pg-pending", workload.key),
            }
        ]
    admitted = [e["at"] for e in workload.history if e["kind"] == "admitted"]
    scheduled = (admitted[-1] if admitted else workload.created) + timedelta(seconds=fleet.step)
    if phase == "Inqueue":
        return []
    return [
        {
            "type": "Scheduled",
            "status": "True",
            "reason": "tasks in gang are ready to be scheduled",
            "message": "",
            "lastTransitionTime": iso_time(scheduled),
            "transitionID": stable_uid(fleet.seed, "pg-scheduled", workload.key),
        }
    ]


def _pod_group(fleet: SimFleet, workload: SimWorkload, phase: str) -> dict[str, Any]:
    job_uid = stable_uid(fleet.seed, "job", workload.key)
    owner = (
        {"apiVersion": "v1", "kind": "Pod", "name": workload.owner_name}
        if workload.owner_kind == "Pod"
        else {"apiVersion": JOB_API, "kind": "Job", "name": workload.owner_name}
    )
    owner["uid"] = (
        pod_uid(fleet.seed, workload.namespace, workload.owner_name)
        if workload.owner_kind == "Pod"
        else job_uid
    )
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": _conditions(fleet, workload, phase),
    }
    if phase == "Running":
        status["running"] = len(workload.placement)
    if phase == "Completed":
        status["succeeded"] = workload.pods
    return {
        "apiVersion": VOLCANO_API,
        "kind": "PodGroup",
        "metadata": {
            "name": pod_group_name(fleet, workload),
            "namespace": workload.namespace,
            "uid": stable_uid(fleet.seed, "podgroup", workload.key),
            "creationTimestamp": iso_time(workload.created),
            "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "minMember": workload.pods,
            "queue": workload.team,
            "priorityClassName": workload.priority_class,
            "minResources": {
                "cpu": str(12 * workload.gpus),
                workload.resource: str(workload.gpus),
            },
            "minTaskMember": {"worker": workload.pods},
        },
        "status": status,
    }


def _volcano_pod(fleet: SimFleet, workload: SimWorkload, pod: str, gpus: list) -> dict[str, Any]:
    """The Kueue demo's pod, scheduled by Volcano and named in its PodGroup instead."""
    obj = pod_object(fleet, workload, pod, gpus)
    group = pod_group_name(fleet, workload)
    obj["metadata"]["labels"] = {
        "volcano.sh/job-name": workload.owner_name,
        "volcano.sh/queue-name": workload.team,
    }
    obj["metadata"]["annotations"] = {
        GROUP_ANNOTATION: group,
        "volcano.sh/queue-name": workload.team,
    }
    if workload.owner_kind != "Pod":
        obj["metadata"]["ownerReferences"][0]["apiVersion"] = JOB_API
    obj["spec"]["schedulerName"] = "volcano"
    obj["spec"]["priorityClassName"] = workload.priority_class
    return obj


def volcano_objects(fleet: SimFleet, at: datetime) -> dict[str, list[dict[str, Any]]]:
    """The Volcano Queues, PodGroups and GPU pods the API server would LIST at ``at``."""
    shown = [w for w in fleet.workloads if w.created <= at]
    phases = {w.key: _phase(w, at) for w in shown}
    return {
        "queues": _queues(fleet, phases),
        "podgroups": [_pod_group(fleet, w, phases[w.key]) for w in shown],
        "pods": [
            _volcano_pod(fleet, w, pod, gpus)
            for w in shown
            if w.holding
            for pod, gpus in w.placement.items()
        ],
    }


def list_payloads(fleet: SimFleet, at: datetime) -> dict[str, dict]:
    """LIST payloads per ``quotas.ingest.snapshot_from_lists`` keyword, as the Volcano source
    serves the sync: the Queues and PodGroups translated by ``quotas.sources.volcano``."""
    objects = volcano_objects(fleet, at)
    groups = objects["podgroups"]
    reserved = volcano.reserved_gpus(volcano.reservation(g) for g in groups)
    cohorts, cluster_queues = volcano.translate_queues(objects["queues"], reserved)
    version = str(int(at.timestamp()))

    def listing(kind: str, items: list[dict], api: str = KUEUE_VERSION) -> dict:
        return {
            "apiVersion": api,
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": version},
            "items": items,
        }

    created = iso_time(fleet.start - timedelta(days=30))
    return {
        "resource_flavors": listing("ResourceFlavor", [source_flavor(volcano.SCHEDULER)]),
        "cohorts": listing("Cohort", cohorts),
        "cluster_queues": listing("ClusterQueue", cluster_queues),
        "local_queues": listing("LocalQueue", []),
        "workloads": listing("Workload", [volcano.pod_group_to_workload(g) for g in groups]),
        "workload_priority_classes": listing("WorkloadPriorityClass", []),
        "pods": listing("Pod", objects["pods"], api="v1"),
        "nodes": listing("Node", [node_object(fleet, n, created) for n in fleet.nodes], api="v1"),
    }
