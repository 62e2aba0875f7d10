"""What ``quotas.kueue`` reads and how it checks and trims it: the kinds, complete LIST pages,
watch events, and the fields kept of each object.

A LIST page counts only as a ``<Kind>List`` of the asked kind and group with an ``items`` array
(``list_items``); a watch event only with an object of the watched kind that has a name
(``event_problem``). Objects are trimmed (``slim``) as soon as a page is decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.mig import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from quotas.constants import KUEUE_GROUP
from quotas.kueue.errors import IncompleteList

# What slim keeps of pod specs (and Workload pod templates), pod statuses and node statuses.
CONTAINER_FIELDS = ("name", "resources", "restartPolicy")
POD_SPEC_FIELDS = (
    "containers",
    "initContainers",
    "overhead",
    "nodeName",
    "nodeSelector",
    "priority",
    "priorityClassName",
    "schedulerName",
)
POD_STATUS_FIELDS = ("phase", "startTime", "containerStatuses", "reason")
# The pod conditions kept (by type, and status when given): the scheduler's preemption mark and
# its refusal to place the pod (quotas/sources/resourcequota.py reads both).
POD_CONDITIONS_KEPT = (("DisruptionTarget", None), ("PodScheduled", "False"))
CONTAINER_STATUS_FIELDS = ("name", "state", "restartCount")
NODE_STATUS_FIELDS = ("capacity", "allocatable", "conditions")

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True)
class Kind:
    """One resource type the sync reads."""

    name: str  # Kubernetes kind, as in quotas.ingest.KueueSnapshot.complete
    plural: str
    group: str  # "" for the core group
    namespaced: bool


KINDS: tuple[Kind, ...] = (
    Kind("ResourceFlavor", "resourceflavors", KUEUE_GROUP, False),
    Kind("Cohort", "cohorts", KUEUE_GROUP, False),
    Kind("ClusterQueue", "clusterqueues", KUEUE_GROUP, False),
    Kind("LocalQueue", "localqueues", KUEUE_GROUP, True),
    Kind("Workload", "workloads", KUEUE_GROUP, True),
    Kind("WorkloadPriorityClass", "workloadpriorityclasses", KUEUE_GROUP, False),
    Kind("Pod", "pods", "", True),
    Kind("Node", "nodes", "", False),
)
KINDS_BY_NAME = {kind.name: kind for kind in KINDS}


@dataclass
class ListResult:
    """A complete LIST of one kind: every page was a ``<Kind>List`` and none was left."""

    kind: str
    items: list[dict[str, Any]]
    resource_version: str
    pages: int
    # Objects the server sent that were dropped here (pods that request no GPU).
    filtered: int = 0


@dataclass(frozen=True)
class WatchEvent:
    # ADDED, MODIFIED, DELETED, BOOKMARK; INVALID for an event to skip (``problem`` says why).
    type: str
    object: dict[str, Any]
    resource_version: str
    problem: str = ""


def requests_gpus(pod: Any) -> bool:
    """Whether any container of the pod requests (or limits) whole GPUs or MIG slices."""
    if not isinstance(pod, dict):
        return True  # let ingest see it, count it and log it
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return True
    for group in ("containers", "initContainers"):
        containers = spec.get(group) or []
        if not isinstance(containers, list):
            return True
        for container in containers:
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            for section in ("requests", "limits"):
                values = resources.get(section)
                if not isinstance(values, dict):
                    continue
                for name in values:
                    if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX):
                        return True
    return False


def _slim_containers(containers: Any) -> Any:
    if not isinstance(containers, list):
        return containers
    return [
        {k: c[k] for k in CONTAINER_FIELDS if k in c} if isinstance(c, dict) else c
        for c in containers
    ]


def _kept_conditions(conditions: Any) -> list[Any]:
    """The pod conditions of ``POD_CONDITIONS_KEPT`` (most pods have none of them)."""
    if not isinstance(conditions, list):
        return []
    return [
        found
        for found in conditions
        if isinstance(found, dict)
        and any(
            found.get("type") == kind and (status is None or found.get("status") == status)
            for kind, status in POD_CONDITIONS_KEPT
        )
    ]


def _slim_pod_spec(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    slim = {k: spec[k] for k in POD_SPEC_FIELDS if k in spec}
    for group in ("containers", "initContainers"):
        if group in slim:
            slim[group] = _slim_containers(slim[group])
    return slim


QUOTA_FIELDS = ("f:resourceGroups", "f:stopPolicy")


def _quota_managers(entries: list[Any]) -> list[dict[str, Any]]:
    """managedFields entries owning the quota fields, with only those fields."""
    kept = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("subresource"):
            continue
        spec = (entry.get("fieldsV1") or {}).get("f:spec")
        if not isinstance(spec, dict):
            continue
        owned: dict[str, Any] = {key: {} for key in QUOTA_FIELDS if key in spec}
        if owned:
            kept.append(
                {
                    "manager": entry.get("manager", ""),
                    "operation": entry.get("operation", ""),
                    "time": entry.get("time", ""),
                    "fieldsV1": {"f:spec": owned},
                }
            )
    return kept


def slim(item: Any, api_version: str, kind: str) -> Any:
    """Drop what no reader here uses, as soon as a page is decoded (peak memory at 50,000).

    Kept: all metadata but managedFields (of ClusterQueues and Cohorts, the entries owning the
    quota fields) and the last-applied annotation; for Pods the spec
    fields that decide GPU requests and placement and the status phase and times; for Nodes
    capacity, allocatable and conditions; for Workloads the pod templates' resource fields.
    Everything ``quotas.ingest`` reads is in these sets.
    """
    if not isinstance(item, dict):
        return item
    # Items of core-group lists carry no apiVersion/kind; the list itself does.
    item.setdefault("apiVersion", api_version)
    item.setdefault("kind", kind)
    meta = item.get("metadata")
    if isinstance(meta, dict):
        managed = meta.pop("managedFields", None)
        if kind in ("ClusterQueue", "Cohort") and isinstance(managed, list):
            # Who last wrote the quotas: the audit trail names the field manager.
            kept = _quota_managers(managed)
            if kept:
                meta["managedFields"] = kept
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(LAST_APPLIED, None)
    spec, status = item.get("spec"), item.get("status")
    if kind == "Pod":
        item["spec"] = _slim_pod_spec(spec)
        if isinstance(status, dict):
            slim = {k: status[k] for k in POD_STATUS_FIELDS if k in status}
            if isinstance(slim.get("containerStatuses"), list):
                slim["containerStatuses"] = [
                    {k: c[k] for k in CONTAINER_STATUS_FIELDS if k in c}
                    if isinstance(c, dict)
                    else c
                    for c in slim["containerStatuses"]
                ]
            conditions = _kept_conditions(status.get("conditions"))
            if conditions:
                slim["conditions"] = conditions
            item["status"] = slim
    elif kind == "Node":
        if isinstance(status, dict):
            item["status"] = {k: status[k] for k in NODE_STATUS_FIELDS if k in status}
    elif kind == "Workload" and isinstance(spec, dict) and isinstance(spec.get("podSets"), list):
        for pod_set in spec["podSets"]:
            template = pod_set.get("template") if isinstance(pod_set, dict) else None
            if isinstance(template, dict) and "spec" in template:
                template["spec"] = _slim_pod_spec(template["spec"])
    return item


def _group_of(api_version: Any) -> str | None:
    """The API group of an ``apiVersion`` ("" for the core group), None when there is none."""
    if not isinstance(api_version, str) or not api_version:
        return None
    return api_version.rpartition("/")[0]


def list_items(what: str, doc: Any, kind: Kind) -> list[Any]:
    """The items of one LIST page, when the page is what was asked for; ``IncompleteList`` else."""
    expected = f"{kind.name}List"
    if not isinstance(doc, dict):
        raise IncompleteList(f"{what}: the answer is not a {expected} but {type(doc).__name__}")
    got = doc.get("kind")
    if got == "Status":
        reason = doc.get("reason") or doc.get("status") or "no reason"
        raise IncompleteList(
            f"{what}: the answer is a Status, not a {expected} "
            f"({reason}: {doc.get('message') or 'no message'})"
        )
    if got != expected:
        if not doc:
            shown = "an empty object"
        else:
            shown = f"a {got}" if got else f"no kind; keys {', '.join(sorted(map(str, doc)))}"
        raise IncompleteList(f"{what}: the answer is not a {expected} ({shown})")
    if _group_of(doc.get("apiVersion")) != kind.group:
        raise IncompleteList(
            f"{what}: a {expected} of apiVersion {doc.get('apiVersion')!r}, not of "
            f"{kind.group or 'the core group'}"
        )
    items = doc.get("items")
    if not isinstance(items, list):
        raise IncompleteList(f"{what}: a {expected} without an items array")
    for index, item in enumerate(items):
        other = item.get("kind") if isinstance(item, dict) else None
        if other is not None and other != kind.name:
            raise IncompleteList(f"{what}: item {index} is a {other}, not a {kind.name}")
    return items


def event_problem(obj: Any, kind: Kind, event_type: str) -> str:
    """Why a watch event's object cannot be applied as one of ``kind`` ("" when it can)."""
    if not isinstance(obj, dict):
        return f"its object is {type(obj).__name__}, not a {kind.name}"
    other = obj.get("kind")
    if other is not None and other != kind.name:
        return f"its object is a {other}, not a {kind.name}"
    group = _group_of(obj.get("apiVersion"))
    if group is not None and group != kind.group:
        return f"its object is of apiVersion {obj.get('apiVersion')!r}, not of this watch's group"
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return "its object has no metadata"
    if event_type == "BOOKMARK":
        return ""
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        return "its object has no name"
    if kind.namespaced and not meta.get("namespace"):
        return f"its {kind.name} has no namespace"
    return ""
