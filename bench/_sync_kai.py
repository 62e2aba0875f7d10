"""The KAI Scheduler fleet of ``bench/sync.py --scheduler kai``: the Kueue fleet's shape in KAI's
own kinds, copied from the fixtures of tests/fixtures/kai (``scheduling.run.ai`` v2 Queues,
v2alpha2 PodGroups, v1 Pods).

* Queues: ``POOLS`` department queues ``dept-NN`` (KAI's top queues, the product's Cohorts) and
  ``queues`` leaf queues ``q-NNNN`` (its ClusterQueues) with ``parentQueue`` ``dept-(q % POOLS)``
  and a namespace ``team-NNNN`` each. A leaf's GPU quota is 40 (every fifth 36, so its 40
  allocated borrow 4), its limit quota + 8, overQuotaWeight 1-4; a department's quota its
  children's sum plus 40, limit -1. ``status.allocated`` is the GPUs of bound pods (a
  department: its children's sum), ``requested`` adds the pending gangs'.
* Per leaf, 50 PodGroups (``pg-<job>-<job uid>``, minMember 2, 2 GPUs a pod): ``ALLOCATED``
  with their 2 pods bound, ``PENDING`` requested and unschedulable (over quota; their pods not
  created here), ``DONE`` with nothing requested or allocated (their pods gone). 1,000 leaves:
  50,000 PodGroups, 20,000 GPU pods, as many as the Kueue fleet's.
* ``admit``: one Pending PodGroup per queue gets its GPUs allocated, and the queue's
  ``status.allocated`` grows by them: per change a Workload, its ClusterQueue (counts and usage)
  and its department's Cohort (a translated Cohort's resourceVersion is its children's newest),
  so at least three object events for the sync.
"""

from __future__ import annotations

import copy
from typing import Any

KAI_GROUP = "scheduling.run.ai"
VERSIONS = ("v2", "v2alpha2")
QUEUE_KIND = f"Queue.{KAI_GROUP}"
POD_GROUP_KIND = f"PodGroup.{KAI_GROUP}"
POOLS = 10
ALLOCATED, PENDING, DONE = 10, 15, 25  # per queue: 50 PodGroups
MEMBERS = 2
GPUS_PER_POD = 2
EVENTS_PER_CHANGE = 3


def generate(api: Any, queues: int, nodes: int, managed_fields: Any, uid: Any) -> dict[str, int]:
    """Fill the server with the KAI fleet; returns object counts ("Queue": the leaves)."""
    from tests.scheduler_fixtures import scheduler_items

    fixture_queues = {q["metadata"]["name"]: q for q in scheduler_items("kai", QUEUE_KIND)}
    groups = {
        g["metadata"]["name"].split("-")[1]: g for g in scheduler_items("kai", POD_GROUP_KIND)
    }
    pods = {p["metadata"]["name"]: p for p in scheduler_items("kai", "Pod")}
    templates = {
        "leaf": fixture_queues["kai-team-a"],
        "dept": fixture_queues["dept-research"],
        "allocated": groups["llama"],
        "pending": groups["protein"],
        "done": groups["tokenizer"],
        "pod": pods["llama-pretrain-worker-0"],
    }
    leaves = [_leaf(templates["leaf"], q, managed_fields, uid) for q in range(queues)]
    depts = [_dept(templates["dept"], p, leaves, managed_fields, uid) for p in range(POOLS)]
    group_objs, pod_objs = [], []
    for q in range(queues):
        for w in range(ALLOCATED + PENDING + DONE):
            group, state = _pod_group(templates, q, w, managed_fields, uid)
            group_objs.append(group)
            if state == "allocated":
                pod_objs.extend(
                    _pods(templates["pod"], group, q * 100 + w, nodes, managed_fields, uid)
                )
    api.load(QUEUE_KIND, [*depts, *leaves])
    api.load(POD_GROUP_KIND, group_objs)
    api.load("Pod", pod_objs)
    return {
        "Queue": len(leaves),
        "parent Queue": len(depts),
        "PodGroup": len(group_objs),
        "Pod": len(pod_objs),
    }


def _gpu(value: int) -> dict[str, str]:
    return {"nvidia.com/gpu": str(value)}


def _leaf(template: dict[str, Any], q: int, managed_fields: Any, uid: Any) -> dict[str, Any]:
    queue = copy.deepcopy(template)
    gang = MEMBERS * GPUS_PER_POD
    allocated = ALLOCATED * gang
    quota = allocated - (4 if q % 5 == 0 else 0)
    queue["metadata"].update(
        name=f"q-{q:04d}",
        uid=uid("kq", q),
        labels={"gpuledger.io/team": f"team-{q % 200:03d}"},
        managedFields=managed_fields("kai-scheduler"),
    )
    queue["metadata"].pop("resourceVersion", None)
    queue["spec"]["parentQueue"] = f"dept-{q % POOLS:02d}"
    queue["spec"]["resources"]["gpu"].update(
        quota=quota, limit=quota + 8, overQuotaWeight=1 + q % 4
    )
    queue["status"] = {
        "allocated": _gpu(allocated),
        "allocatedNonPreemptible": {},
        "requested": _gpu(allocated + PENDING * gang),
    }
    return queue


def _dept(
    template: dict[str, Any], p: int, leaves: list[dict[str, Any]], managed_fields: Any, uid: Any
) -> dict[str, Any]:
    name = f"dept-{p:02d}"
    children = [q for q in leaves if q["spec"]["parentQueue"] == name]
    queue = copy.deepcopy(template)
    queue["metadata"].update(name=name, uid=uid("kd", p), managedFields=managed_fields("kai"))
    queue["metadata"].pop("resourceVersion", None)
    below = sum(q["spec"]["resources"]["gpu"]["quota"] for q in children)
    queue["spec"]["resources"]["gpu"].update(quota=below + 40, limit=-1)
    queue["spec"]["displayName"] = f"Department {p}"
    total = {
        key: sum(int(q["status"][key]["nvidia.com/gpu"]) for q in children)
        for key in ("allocated", "requested")
    }
    queue["status"] = {
        "allocated": _gpu(total["allocated"]),
        "allocatedNonPreemptible": {},
        "requested": _gpu(total["requested"]),
    }
    return queue


def _pod_group(
    templates: dict[str, Any], q: int, w: int, managed_fields: Any, uid: Any
) -> tuple[dict[str, Any], str]:
    """PodGroup ``w`` of queue ``q``: allocated, pending or done by its place."""
    if w < ALLOCATED:
        state = "allocated"
    elif w < ALLOCATED + PENDING:
        state = "pending"
    else:
        state = "done"
    index = q * 100 + w
    group = copy.deepcopy(templates[state])
    job, job_uid = f"job-{index:07d}", uid("kjob", index)
    group["metadata"].update(
        name=f"pg-{job}-{job_uid}",
        namespace=f"team-{q:04d}",
        uid=uid("kpg", index),
        creationTimestamp=f"2026-08-2{w % 2}T{w % 24:02d}:00:00Z",
        labels={"kai.scheduler/queue": f"q-{q:04d}"},
        managedFields=managed_fields("pod-grouper"),
    )
    group["metadata"].pop("resourceVersion", None)
    group["metadata"]["annotations"] = {
        "kai.scheduler/top-owner-metadata": (
            f"name: {job}\nuid: {job_uid}\ngroup: kubeflow.org\nversion: v1\nkind: PyTorchJob\n"
        )
    }
    group["metadata"]["ownerReferences"][0].update(name=job, uid=job_uid)
    group["spec"].update(minMember=MEMBERS, queue=f"q-{q:04d}")
    gpus = _gpu(MEMBERS * GPUS_PER_POD)
    status = group["status"]["resourcesStatus"]
    if state == "allocated":
        status.update(allocated=dict(gpus), requested=dict(gpus))
    elif state == "pending":
        status["requested"] = dict(gpus)
    return group, state


def _pods(
    template: dict[str, Any],
    group: dict[str, Any],
    index: int,
    nodes: int,
    managed_fields: Any,
    uid: Any,
) -> list[dict[str, Any]]:
    """The bound pods of an allocated gang, four to a node."""
    job = group["metadata"]["ownerReferences"][0]["name"]
    pods = []
    for p in range(MEMBERS):
        pod = copy.deepcopy(template)
        pod_index = index * MEMBERS + p
        pod["metadata"].update(
            name=f"{job}-worker-{p}",
            namespace=group["metadata"]["namespace"],
            uid=uid("kpod", pod_index),
            managedFields=managed_fields("kubelet"),
        )
        pod["metadata"].pop("resourceVersion", None)
        pod["metadata"]["annotations"]["pod-group-name"] = group["metadata"]["name"]
        pod["metadata"]["labels"].update(
            {
                "kai.scheduler/queue": group["spec"]["queue"],
                "training.kubeflow.org/job-name": job,
                "training.kubeflow.org/replica-index": str(p),
            }
        )
        pod["metadata"]["ownerReferences"][0].update(
            name=job, uid=group["metadata"]["ownerReferences"][0]["uid"]
        )
        for section in ("requests", "limits"):
            resources = pod["spec"]["containers"][0]["resources"]
            if section in resources:
                resources[section]["nvidia.com/gpu"] = str(GPUS_PER_POD)
        pod["spec"]["nodeName"] = f"gpu-node-{(pod_index // 4) % nodes:05d}"
        pods.append(pod)
    return pods


def admit(api: Any, count: int) -> int:
    """Allocate one pending PodGroup of each of ``count`` queues (see the module docstring)."""
    with api._lock:
        pending = [
            key
            for key, g in api._stores[f"podgroups.{KAI_GROUP}"].objects.items()
            if g["status"]["resourcesStatus"].get("requested")
            and not g["status"]["resourcesStatus"].get("allocated")
        ]
    seen: set[str] = set()
    done = 0
    gang = MEMBERS * GPUS_PER_POD
    for namespace, name in pending:
        if namespace in seen:
            continue
        seen.add(namespace)

        def allocate(obj: dict[str, Any]) -> None:
            status = obj["status"]["resourcesStatus"]
            status["allocated"] = dict(status["requested"])
            obj["status"].pop("schedulingConditions", None)

        def grow(obj: dict[str, Any]) -> None:
            held = int(obj["status"]["allocated"].get("nvidia.com/gpu", "0"))
            obj["status"]["allocated"]["nvidia.com/gpu"] = str(held + gang)

        group = api.modify(POD_GROUP_KIND, name, allocate, namespace=namespace)
        api.modify(QUEUE_KIND, group["spec"]["queue"], grow)
        done += 1
        if done >= count:
            break
    return done
