"""The Volcano fleet of ``bench/sync.py --scheduler volcano``: the Kueue fleet's shape in
Volcano's own kinds, copied from the fixtures of tests/fixtures/volcano (schema-true
``scheduling.volcano.sh/v1beta1`` Queues and PodGroups, v1 Pods).

* Queues: ``root`` (the scheduler's own), ``POOLS`` parent queues ``pool-NN`` under it (the
  product's Cohorts) and ``queues`` leaf queues ``q-NNNN`` (its ClusterQueues), each leaf under
  pool ``q % POOLS`` and with its own namespace ``team-NNNN``. A leaf deserves 40 GPUs (every
  fifth 36, so its 40 in use borrow 4), capability deserved + 8, a guarantee of 8 on every
  other one, ``reclaimable: false`` on every tenth; a pool deserves its children's sum plus 40
  of its own; ``root`` the pools' sum. ``status`` carries the PodGroup counts and the GPUs
  allocated (a parent: its children's sum), as Volcano's controllers write them.
* Per leaf, 50 PodGroups of Volcano Jobs (``<job>-<job uid>``, minMember 2, 2 GPUs a pod):
  ``RUNNING`` Running with their 2 pods bound, ``INQUEUE`` Inqueue with their 2 pods created and
  unbound, ``PENDING`` Pending (Unschedulable, no pods yet), ``COMPLETED`` Completed (pods
  deleted). 1,000 leaves: 50,000 PodGroups, 20,000 GPU pods, as many as the Kueue fleet's.
* ``admit``: what Volcano's enqueue action does to one Pending PodGroup per queue: its phase
  becomes Inqueue, and the controller moves the queue's counts (``pending`` - 1, ``inqueue``
  + 1). Each change is at least three object events for the sync: the Workload, its
  ClusterQueue (its counts, and its usage takes the reservation) and its pool's Cohort (a
  translated Cohort's resourceVersion is its children's newest). A queue event translated after
  the PodGroup events of other queues also changes those queues' usage, so a ClusterQueue can
  change twice; the watch stops at three per change.
"""

from __future__ import annotations

import copy
from typing import Any

VOLCANO_GROUP = "scheduling.volcano.sh"
VERSIONS = ("v1beta1",)
QUEUE_KIND = f"Queue.{VOLCANO_GROUP}"
POD_GROUP_KIND = f"PodGroup.{VOLCANO_GROUP}"
POOLS = 10
RUNNING, INQUEUE, PENDING, COMPLETED = 9, 1, 15, 25  # per queue: 50 PodGroups
MEMBERS = 2  # minMember, pods per gang
GPUS_PER_POD = 2
# Object events the sync applies per ``admit`` change (see the module docstring).
EVENTS_PER_CHANGE = 3


def generate(api: Any, queues: int, nodes: int, managed_fields: Any, uid: Any) -> dict[str, int]:
    """Fill the server with the Volcano fleet; returns object counts ("Queue": the leaves)."""
    from tests.scheduler_fixtures import scheduler_items

    fixture_queues = {q["metadata"]["name"]: q for q in scheduler_items("volcano", QUEUE_KIND)}
    groups = {
        g["status"]["phase"]: g
        for g in scheduler_items("volcano", POD_GROUP_KIND)
        if g["metadata"]["name"].startswith(("llama-pretrain", "ddp", "protein", "tokenizer"))
    }
    pods = {p["metadata"]["name"]: p for p in scheduler_items("volcano", "Pod")}
    templates = {
        "leaf": fixture_queues["team-v1"],
        "pool": fixture_queues["research"],
        "root": fixture_queues["root"],
        "running_pod": pods["llama-pretrain-worker-0"],
        "unbound_pod": pods["ddp-smoke-worker-0"],
        **groups,
    }
    leaves = [_leaf(templates["leaf"], q, managed_fields, uid) for q in range(queues)]
    pools = [_pool(templates["pool"], p, leaves, managed_fields, uid) for p in range(POOLS)]
    root = _parent(templates["root"], "root", "", pools, managed_fields, uid("vq", 10**6))
    group_objs, pod_objs = [], []
    for q in range(queues):
        for w in range(RUNNING + INQUEUE + PENDING + COMPLETED):
            group, phase = _pod_group(templates, q, w, managed_fields, uid)
            group_objs.append(group)
            if phase in ("Running", "Inqueue"):
                pod_objs.extend(_pods(templates, group, q * 100 + w, nodes, managed_fields, uid))
    api.load(QUEUE_KIND, [root, *pools, *leaves])
    api.load(POD_GROUP_KIND, group_objs)
    api.load("Pod", pod_objs)
    return {
        "Queue": len(leaves),
        "parent Queue": 1 + len(pools),
        "PodGroup": len(group_objs),
        "Pod": len(pod_objs),
    }


def _gpus(resources: dict[str, Any]) -> int:
    return int(resources.get("nvidia.com/gpu", "0"))


def _leaf(template: dict[str, Any], q: int, managed_fields: Any, uid: Any) -> dict[str, Any]:
    queue = copy.deepcopy(template)
    in_use = (RUNNING + INQUEUE) * MEMBERS * GPUS_PER_POD
    allocated = RUNNING * MEMBERS * GPUS_PER_POD
    deserved = in_use - (4 if q % 5 == 0 else 0)
    queue["metadata"].update(
        name=f"q-{q:04d}",
        uid=uid("vq", q),
        labels={"gpuledger.io/team": f"team-{q % 200:03d}"},
        managedFields=managed_fields("vc-controller-manager"),
    )
    queue["metadata"].pop("resourceVersion", None)
    spec = queue["spec"]
    spec.update(
        weight=1 + q % 4,
        reclaimable=q % 10 != 3,
        parent=f"pool-{q % POOLS:02d}",
        deserved={"cpu": str(deserved * 24), "nvidia.com/gpu": str(deserved)},
        capability={"nvidia.com/gpu": str(deserved + 8)},
    )
    if q % 2:
        spec["guarantee"] = {"resource": {"nvidia.com/gpu": "8"}}
    else:
        spec.pop("guarantee", None)
    queue["status"].update(
        state="Open",
        pending=PENDING,
        inqueue=INQUEUE,
        running=RUNNING,
        completed=COMPLETED,
        allocated={
            "cpu": str(allocated * 24),
            "memory": f"{allocated * 256}Gi",
            "nvidia.com/gpu": str(allocated),
        },
    )
    return queue


def _parent(
    template: dict[str, Any],
    name: str,
    parent: str,
    children: list[dict[str, Any]],
    managed_fields: Any,
    uid_: str,
) -> dict[str, Any]:
    """A parent queue deserving its children's sum plus 40 of its own (``root``: the sum)."""
    queue = copy.deepcopy(template)
    queue["metadata"].update(
        name=name, uid=uid_, managedFields=managed_fields("vc-controller-manager")
    )
    queue["metadata"].pop("resourceVersion", None)
    below = sum(_gpus(c["spec"]["deserved"]) for c in children)
    deserved = below + (40 if parent else 0)
    allocated = sum(_gpus(c["status"]["allocated"]) for c in children)
    queue["spec"].update(
        deserved={"nvidia.com/gpu": str(deserved)}, capability={"nvidia.com/gpu": str(deserved)}
    )
    if parent:
        queue["spec"]["parent"] = parent
    queue["status"]["allocated"] = {"nvidia.com/gpu": str(allocated)}
    return queue


def _pool(
    template: dict[str, Any], p: int, leaves: list[dict[str, Any]], managed_fields: Any, uid: Any
) -> dict[str, Any]:
    name = f"pool-{p:02d}"
    children = [q for q in leaves if q["spec"]["parent"] == name]
    return _parent(template, name, "root", children, managed_fields, uid("vp", p))


def _pod_group(
    templates: dict[str, Any], q: int, w: int, managed_fields: Any, uid: Any
) -> tuple[dict[str, Any], str]:
    """PodGroup ``w`` of queue ``q``: Running, Inqueue, Pending or Completed by its place."""
    if w < RUNNING:
        phase = "Running"
    elif w < RUNNING + INQUEUE:
        phase = "Inqueue"
    elif w < RUNNING + INQUEUE + PENDING:
        phase = "Pending"
    else:
        phase = "Completed"
    index = q * 100 + w
    group = copy.deepcopy(templates[phase])
    job, job_uid = f"job-{index:07d}", uid("vjob", index)
    group["metadata"].update(
        name=f"{job}-{job_uid}",
        namespace=f"team-{q:04d}",
        uid=uid("pg", index),
        creationTimestamp=f"2026-08-2{w % 2}T{w % 24:02d}:00:00Z",
        managedFields=managed_fields("vc-controller-manager"),
    )
    group["metadata"].pop("resourceVersion", None)
    group["metadata"]["ownerReferences"][0].update(name=job, uid=job_uid)
    gpus = MEMBERS * GPUS_PER_POD
    group["spec"].update(
        minMember=MEMBERS,
        queue=f"q-{q:04d}",
        minResources={
            "cpu": str(gpus * 24),
            "memory": f"{gpus * 256}Gi",
            "nvidia.com/gpu": str(gpus),
        },
        minTaskMember={"worker": MEMBERS},
    )
    for cond in group["status"].get("conditions") or []:
        cond["lastTransitionTime"] = f"2026-08-22T08:{w:02d}:00Z"
    if phase == "Running":
        group["status"]["running"] = MEMBERS
    if phase == "Completed":
        group["status"]["succeeded"] = MEMBERS
    return group, phase


def _pods(
    templates: dict[str, Any],
    group: dict[str, Any],
    index: int,
    nodes: int,
    managed_fields: Any,
    uid: Any,
) -> list[dict[str, Any]]:
    """The pods of a Running (bound, four to a node) or Inqueue (unbound) gang."""
    running = group["status"]["phase"] == "Running"
    template = templates["running_pod" if running else "unbound_pod"]
    job = group["metadata"]["ownerReferences"][0]["name"]
    queue = group["spec"]["queue"]
    pods = []
    for p in range(MEMBERS):
        pod = copy.deepcopy(template)
        pod_index = index * MEMBERS + p
        pod["metadata"].update(
            name=f"{job}-worker-{p}",
            namespace=group["metadata"]["namespace"],
            uid=uid("vpod", pod_index),
            managedFields=managed_fields("kubelet"),
        )
        pod["metadata"].pop("resourceVersion", None)
        meta = pod["metadata"]
        for section in ("labels", "annotations"):
            meta[section].update(
                {
                    "volcano.sh/job-name": job,
                    "volcano.sh/queue-name": queue,
                    "volcano.sh/task-index": str(p),
                }
            )
        meta["labels"]["volcano.sh/job-namespace"] = meta["namespace"]
        meta["annotations"]["scheduling.k8s.io/group-name"] = group["metadata"]["name"]
        meta["ownerReferences"][0].update(
            name=job, uid=group["metadata"]["ownerReferences"][0]["uid"]
        )
        container = pod["spec"]["containers"][0]
        for section in ("requests", "limits"):
            container["resources"][section]["nvidia.com/gpu"] = str(GPUS_PER_POD)
        if running:
            pod["spec"]["nodeName"] = f"gpu-node-{(pod_index // 4) % nodes:05d}"
        pods.append(pod)
    return pods


def admit(api: Any, count: int) -> int:
    """Move one Pending PodGroup of each of ``count`` queues to Inqueue, and the queue's counts
    with it (see the module docstring)."""
    with api._lock:
        pending = [
            key
            for key, g in api._stores[f"podgroups.{VOLCANO_GROUP}"].objects.items()
            if g["status"].get("phase") == "Pending"
        ]
    seen: set[str] = set()
    done = 0
    for namespace, name in pending:
        if namespace in seen:
            continue
        seen.add(namespace)

        def enqueue(obj: dict[str, Any]) -> None:
            obj["status"]["phase"] = "Inqueue"

        def count_it(obj: dict[str, Any]) -> None:
            obj["status"]["pending"] -= 1
            obj["status"]["inqueue"] += 1

        group = api.modify(POD_GROUP_KIND, name, enqueue, namespace=namespace)
        api.modify(QUEUE_KIND, group["spec"]["queue"], count_it)
        done += 1
        if done >= count:
            break
    return done
