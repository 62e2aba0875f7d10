"""What the Kubernetes API server would LIST about the simulated fleet at one moment.

v1beta2 Kueue objects (ResourceFlavors, Cohorts, ClusterQueues with their quotas and usage,
LocalQueues, WorkloadPriorityClasses, Workloads with Kueue's conditions, admission and requeue
state), the Running Pods that hold GPUs and the Nodes with their GPU capacity, as the ``simulate``
command hands them to the real ``quotas.ingest.snapshot_from_lists``; and each ClusterQueue's
pending workloads as Kueue's visibility API lists them (read by ``quotas.sync.pending_positions``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from demo.simulation.scenario import (
    A100_PRODUCT,
    H100_PRODUCT,
    MIG_QUOTA,
    PRIORITY_CLASSES,
    TEAMS,
    SimFleet,
    SimGpu,
    SimNode,
    SimWorkload,
    local_queue_name,
    pod_uid,
    stable_uid,
)
from demo.simulation.scheduler import REQUEUE_BACKOFF, quota_shortfall, waiting_order

KUEUE_API = "kueue.x-k8s.io/v1beta2"
VISIBILITY_API = "visibility.kueue.x-k8s.io/v1beta2"
TEAM_LABEL = "gpuledger.io/team"
POOL_LABEL = "nodepool"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


def iso_time(moment: datetime) -> str:
    """A moment as the API server writes timestamps: UTC, whole seconds, a Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def list_payloads(fleet: SimFleet, at: datetime) -> dict[str, dict]:
    """LIST payloads per ``quotas.ingest.snapshot_from_lists`` keyword, as of ``at``."""
    version = KUEUE_API

    def listing(kind: str, items: list[dict], api: str = version) -> dict:
        return {
            "apiVersion": api,
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": str(int(at.timestamp()))},
            "items": items,
        }

    created = iso_time(fleet.start - timedelta(days=30))
    flavors = [
        _flavor(fleet, "h100", {POOL_LABEL: "h100-a", GPU_PRODUCT_LABEL: H100_PRODUCT}, created),
        _flavor(fleet, "a100", {POOL_LABEL: "a100", GPU_PRODUCT_LABEL: A100_PRODUCT}, created),
        _flavor(fleet, "a100-mig", {POOL_LABEL: "a100-mig"}, created),
    ]
    # h100 nodes sit in two pools; the flavor selects on the product label only.
    flavors[0]["spec"]["nodeLabels"] = {GPU_PRODUCT_LABEL: H100_PRODUCT}
    cohorts = [
        {
            "apiVersion": version,
            "kind": "Cohort",
            "metadata": {
                "name": name,
                "uid": stable_uid(fleet.seed, "cohort", name),
                "creationTimestamp": created,
            },  # fmt: skip
            "spec": {},
        }
        for name in ("research", "prod")
    ]
    queues = [_cluster_queue(fleet, team, created) for team in TEAMS]
    local_queues = [_local_queue(fleet, team, created) for team in TEAMS]
    priority = [
        {
            "apiVersion": version,
            "kind": "WorkloadPriorityClass",
            "metadata": {
                "name": name,
                "uid": stable_uid(fleet.seed, "wpc", name),
                "creationTimestamp": created,
            },  # fmt: skip
            "value": value,
            "description": f"{name} priority",
        }
        for name, value in PRIORITY_CLASSES.items()
    ]
    workloads = [_workload(fleet, w, at) for w in fleet.workloads if w.created <= at]
    pods = [
        pod_object(fleet, w, pod, gpus)
        for w in fleet.workloads
        if w.holding
        for pod, gpus in w.placement.items()
    ]
    nodes = [node_object(fleet, node, created) for node in fleet.nodes]
    return {
        "resource_flavors": listing("ResourceFlavor", flavors),
        "cohorts": listing("Cohort", cohorts),
        "cluster_queues": listing("ClusterQueue", queues),
        "local_queues": listing("LocalQueue", local_queues),
        "workloads": listing("Workload", workloads),
        "workload_priority_classes": listing("WorkloadPriorityClass", priority),
        "pods": listing("Pod", pods, api="v1"),
        "nodes": listing("Node", nodes, api="v1"),
    }


def _flavor(fleet: SimFleet, name: str, labels: dict[str, str], created: str) -> dict:
    """A ResourceFlavor selecting nodes by ``labels``, tolerating the GPU taint."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {
            "name": name,
            "uid": stable_uid(fleet.seed, "flavor", name),
            "creationTimestamp": created,
        },  # fmt: skip
        "spec": {
            "nodeLabels": labels,
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],  # fmt: skip
        },
    }


def _cluster_queue(fleet: SimFleet, team: str, created: str) -> dict:
    """The team's ClusterQueue: its quotas (and MIG quotas) in spec, what it holds in status."""
    namespace, cohort, quotas = TEAMS[team]
    flavors = []
    usage = []
    for flavor, (nominal, borrow, lend) in quotas.items():
        resource: dict[str, str] = {"name": "nvidia.com/gpu", "nominalQuota": str(nominal)}
        if borrow is not None:
            resource["borrowingLimit"] = str(borrow)
        if lend is not None:
            resource["lendingLimit"] = str(lend)
        flavors.append({"name": flavor, "resources": [resource]})
        total = fleet.held_gpus(team, flavor)
        usage.append(
            {
                "name": flavor,
                "resources": [
                    {
                        "name": "nvidia.com/gpu",
                        "total": str(total),
                        "borrowed": str(max(0, total - nominal)),
                    }
                ],
            }
        )
    groups = [{"coveredResources": ["nvidia.com/gpu"], "flavors": flavors}]
    if team == "platform":
        mig_resources = [{"name": r, "nominalQuota": str(q)} for r, q in MIG_QUOTA.items()]
        groups.append(
            {
                "coveredResources": list(MIG_QUOTA),
                "flavors": [{"name": "a100-mig", "resources": mig_resources}],
            }
        )
        mig_usage: dict[str, int] = dict.fromkeys(MIG_QUOTA, 0)
        for w in fleet.workloads:
            if w.holding and w.team == team and w.resource in mig_usage:
                mig_usage[w.resource] += w.gpus
        usage.append(
            {
                "name": "a100-mig",
                "resources": [
                    {"name": r, "total": str(v), "borrowed": "0"} for r, v in mig_usage.items()
                ],
            }
        )
    mine = [w for w in fleet.workloads if w.team == team and w.created <= fleet.now]
    admitted = sum(1 for w in mine if w.holding)
    pending = sum(1 for w in mine if w.admitted_at is None and w.finished_at is None)
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {
            "name": team,
            "uid": stable_uid(fleet.seed, "cq", team),
            "creationTimestamp": created,
            "labels": {TEAM_LABEL: team},
        },
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "preemption": {
                "reclaimWithinCohort": "Any",
                "withinClusterQueue": "LowerPriority",
                "borrowWithinCohort": {"policy": "Never"},
            },
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": groups,
            "stopPolicy": "None",
        },
        "status": {
            "admittedWorkloads": admitted,
            "reservingWorkloads": admitted,
            "pendingWorkloads": pending,
            "flavorsUsage": usage,
            "flavorsReservation": usage,
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads",
                    "lastTransitionTime": created,
                },
            ],  # fmt: skip
        },
    }


def _local_queue(fleet: SimFleet, team: str, created: str) -> dict:
    """The LocalQueue in the team's namespace that feeds its ClusterQueue."""
    namespace = TEAMS[team][0]
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {
            "name": local_queue_name(team),
            "namespace": namespace,
            "uid": stable_uid(fleet.seed, "lq", team),
            "creationTimestamp": created,
        },
        "spec": {"clusterQueue": team},
        "status": {},
    }


def _conditions(fleet: SimFleet, workload: SimWorkload, at: datetime) -> list[dict]:
    """Kueue's conditions as of ``at``, with Kueue's own resets on re-admission."""
    conditions: dict[str, dict] = {}

    def put(kind: str, status: str, reason: str, message: str, when: datetime) -> None:
        conditions[kind] = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": iso_time(when),
        }

    cq = workload.team
    put("QuotaReserved", "False", "Pending", "insufficient unused quota", workload.created)
    for event in workload.history:
        when = event["at"]
        if when > at:
            break
        if event["kind"] == "admitted":
            put("QuotaReserved", "True", "QuotaReserved",
                f"Quota reserved in ClusterQueue {cq}", when)  # fmt: skip
            put("Admitted", "True", "Admitted", "The workload is admitted", when)
            for kind in ("Evicted", "Preempted"):
                if kind in conditions:
                    previous = conditions[kind]["message"]
                    put(kind, "False", "QuotaReserved", f"Previously: {previous}", when)
            if not workload.ghost:
                ready = when + timedelta(seconds=fleet.step)
                if ready <= at:
                    message = "All pods reached readiness and the workload is running"
                    put("PodsReady", "True", "Started", message, ready)
        elif event["kind"] == "evicted":
            preemptor = next(w for w in fleet.workloads if w.key == event["preemptor"])
            uid = stable_uid(fleet.seed, "wl", preemptor.key)
            job_uid = stable_uid(fleet.seed, "job", preemptor.key)
            message = (
                f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to "
                f"reclamation within the cohort; preemptor path: "
                f"/{TEAMS[preemptor.team][1]}/{preemptor.team}; "
                f"preemptee path: /{TEAMS[workload.team][1]}/{workload.team}"
            )
            put("Evicted", "True", "Preempted", message, when)
            put("Preempted", "True", "InCohortReclamation", message, when)
            put("QuotaReserved", "False", "Pending", "Preempted; waiting for quota", when)
            put("Admitted", "False", "NoReservation", "The workload has no reservation", when)
            put("PodsReady", "False", "WaitForStart", "Not all pods are ready", when)
            put("Requeued", "True", "Preempted", message, when)
        elif event["kind"] == "finished":
            put("Finished", "True", "Succeeded", "Job finished successfully", when)
            put("PodsReady", "False", "PodsCompleted", "Pods completed", when)
    reserved = conditions["QuotaReserved"]
    if (
        reserved["status"] == "False"
        and "Finished" not in conditions
        and not _backing_off(workload, at)
    ):
        # Kueue rewrites the message at each scheduling attempt (the transition time stays):
        # what the queue's quota and the cohort's lending leave it short of, as of now.
        more = quota_shortfall(fleet, workload)
        if more:
            reserved["message"] = (
                f"couldn't assign flavors to pod set main: insufficient unused quota for "
                f"{workload.resource} in flavor {workload.flavor}, {more} more needed"
            )
    return list(conditions.values())


def _backing_off(workload: SimWorkload, at: datetime) -> bool:
    """Whether an evicted workload still waits out its requeue backoff at ``at``."""
    return workload.evict_at is not None and at < workload.evict_at + REQUEUE_BACKOFF


def pending_workloads(fleet: SimFleet, at: datetime) -> dict[str, dict]:
    """ClusterQueue name → what Kueue's visibility API answers for its ``pendingworkloads`` at
    ``at``: the workloads waiting in its queue in admission order, with 0-based positions in the
    ClusterQueue and the LocalQueue (workloads backing off after an eviction are not queued)."""
    items: dict[str, list[dict]] = {team: [] for team in TEAMS}
    in_local_queue: dict[str, int] = {}
    for workload in waiting_order(fleet, at):
        if _backing_off(workload, at):
            continue
        queue = items[workload.team]
        local_queue = local_queue_name(workload.team)
        queue.append(
            {
                "metadata": {
                    "name": workload.name,
                    "namespace": workload.namespace,
                    "creationTimestamp": iso_time(workload.created),
                },
                "priority": PRIORITY_CLASSES[workload.priority_class],
                "localQueueName": local_queue,
                "positionInClusterQueue": len(queue),
                "positionInLocalQueue": in_local_queue.get(local_queue, 0),
            }
        )
        in_local_queue[local_queue] = in_local_queue.get(local_queue, 0) + 1
    return {
        name: {
            "kind": "PendingWorkloadsSummary",
            "apiVersion": VISIBILITY_API,
            "metadata": {"creationTimestamp": None},
            "items": queue,
        }
        for name, queue in items.items()
    }


def _workload(fleet: SimFleet, workload: SimWorkload, at: datetime) -> dict:
    """The Workload as of ``at``: pod set, admission while it holds quota, requeue state."""
    uid = stable_uid(fleet.seed, "wl", workload.key)
    job_uid = stable_uid(fleet.seed, "job", workload.key)
    owner_api = {
        "Job": "batch/v1",
        "JobSet": "jobset.x-k8s.io/v1alpha2",
        "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
        "Pod": "v1",
    }[workload.owner_kind]
    if workload.owner_kind == "Pod":
        job_uid = pod_uid(fleet.seed, workload.namespace, workload.owner_name)
    resources = {
        "cpu": str(12 * workload.gpus_per_pod),
        workload.resource: str(workload.gpus_per_pod),
    }
    pod_set = {
        "name": "main",
        "count": workload.pods,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "nvcr.io/nvidia/pytorch:25.08-py3",
                        "resources": {
                            "requests": resources,
                            "limits": {workload.resource: str(workload.gpus_per_pod)},
                        },
                    },
                ],  # fmt: skip
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 30,
            }
        },
    }
    status: dict = {"conditions": _conditions(fleet, workload, at)}
    holding = workload.admitted_at is not None and workload.admitted_at <= at
    finished = workload.finished_at is not None and workload.finished_at <= at
    if holding or finished:
        total = {"cpu": str(12 * workload.gpus), workload.resource: str(workload.gpus)}
        status["admission"] = {
            "clusterQueue": workload.team,
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": workload.pods,
                    "flavors": {"cpu": workload.flavor, workload.resource: workload.flavor},
                    "resourceUsage": total,
                }
            ],
        }
    if workload.evict_at is not None and workload.evict_at <= at:
        status["requeueState"] = {
            "count": 1,
            "requeueAt": iso_time(workload.evict_at + REQUEUE_BACKOFF),
        }
        status["accumulatedPastExecutionTimeSeconds"] = int(
            (workload.evict_at - (workload.history[0]["at"])).total_seconds()
        )
    return {
        "apiVersion": KUEUE_API,
        "kind": "Workload",
        "metadata": {
            "name": workload.name,
            "namespace": workload.namespace,
            "uid": uid,
            "creationTimestamp": iso_time(workload.created),
            "labels": {"kueue.x-k8s.io/job-uid": job_uid},
            "ownerReferences": [
                {
                    "apiVersion": owner_api,
                    "kind": workload.owner_kind,
                    "name": workload.owner_name,
                    "uid": job_uid,
                    "controller": True,
                },
            ],  # fmt: skip
        },
        "spec": {
            "active": True,
            "podSets": [pod_set],
            "priority": PRIORITY_CLASSES[workload.priority_class],
            "priorityClassRef": {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": workload.priority_class,
            },
            "queueName": local_queue_name(workload.team),
        },
        "status": status,
    }


def pod_object(fleet: SimFleet, workload: SimWorkload, pod: str, gpus: list[SimGpu]) -> dict:
    """A Running pod of the workload on the node of its GPUs, with Kueue's labels."""
    uid = pod_uid(fleet.seed, workload.namespace, pod)
    job_uid = stable_uid(fleet.seed, "job", workload.key)
    owner = (
        []
        if workload.owner_kind == "Pod"
        else [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": workload.owner_name,
                "uid": job_uid,
                "controller": True,
            }
        ]  # fmt: skip
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod,
            "namespace": workload.namespace,
            "uid": uid,
            "labels": {
                "kueue.x-k8s.io/cluster-queue-name": workload.team,
                "kueue.x-k8s.io/local-queue-name": local_queue_name(workload.team),
                "kueue.x-k8s.io/podset": "main",
            },
            "annotations": {"kueue.x-k8s.io/workload": workload.name},
            "ownerReferences": owner,
            "creationTimestamp": iso_time(workload.pod_started[pod]),
        },
        "spec": {
            "nodeName": gpus[0].node.name,
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {workload.resource: str(workload.gpus_per_pod)},
                        "limits": {workload.resource: str(workload.gpus_per_pod)},
                    },
                },
            ],  # fmt: skip
        },
        "status": {"phase": "Running", "startTime": iso_time(workload.pod_started[pod])},
    }


def node_object(fleet: SimFleet, node: SimNode, created: str) -> dict:
    """The Node with its pool and GPU product labels and its GPU (and MIG) capacity."""
    whole = [g for g in node.gpus if not g.profile]
    capacity: dict[str, str] = {"cpu": "224", "memory": "2064Gi", "pods": "110"}
    capacity["nvidia.com/gpu"] = str(len(whole) + sum(1 for g in whole if g.time_sliced))
    for gpu in node.gpus:
        if gpu.profile:
            key = f"nvidia.com/mig-{gpu.profile}"
            capacity[key] = str(int(capacity.get(key, "0")) + 1)
    labels = {
        "kubernetes.io/hostname": node.name,
        POOL_LABEL: node.pool,
        GPU_PRODUCT_LABEL: node.product,
        "nvidia.com/gpu.count": str(len({g.index for g in node.gpus})),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "uid": stable_uid(fleet.seed, "node", node.name),
            "labels": labels,
            "creationTimestamp": created,
        },  # fmt: skip
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }
