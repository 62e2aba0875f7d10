"""What the quota sources' translators share (``quotas.sources.volcano``, ``quotas.sources.kai``):
reading quantities, the Kueue-shaped (v1beta2) objects they build, and the parent/child
classification of hierarchical queues (docs/architecture.md "Quota sources").

Pure functions on the API server's dicts; nothing here talks to a server.

* A queue another queue names as its parent is a **Cohort** (under its own parent); every other
  queue is a **ClusterQueue** in its parent's cohort. Which queues are parents depends on the
  whole list, so queues are always translated together (``translate_queues``).
* A Cohort's own quota is what its children's quota leaves of its own (``own_quota``): the
  product adds a cohort's own quota to what is below it (``quotas.ingest.samples.cohort_totals``:
  members, own quota and child cohorts), so the cohort's subtree adds up to the queue's quota.
* A translated Cohort's resourceVersion is the newest of its own and its children's: a child's
  quota changing changes its parent's own quota, so the parent changes too.
* ``Source`` is what the client (``quotas.sources.SourceClient``) needs of one source: its kinds
  and versions, and its translators.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from core.mig import GPU_RESOURCE
from core.quantity import parse_quantity
from quotas import constants as c
from quotas.kueue.payloads import Kind

KUEUE_VERSION = "kueue.x-k8s.io/v1beta2"
# The sources' quotas name no node pool: every queue's GPUs are one flavor, named as Kueue's
# single-flavor setups usually name theirs. The client serves it as the cluster's one
# ResourceFlavor (``source_flavor``), which stands for every GPU node.
FLAVOR = "default-flavor"
# The source flavor never changes: one resourceVersion for its LIST and its (empty) WATCH.
FLAVOR_VERSION = "1"

Translated = dict[str, Any]


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    name = as_dict(obj.get("metadata")).get("name")
    return name if isinstance(name, str) else ""


def quantity(value: Any) -> Decimal | None:
    """A quantity (a string, or a JSON number) as a Decimal; None when absent or unreadable."""
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def gpus(resources: Any) -> Decimal | None:
    """``nvidia.com/gpu`` of a resource list; None when it names none."""
    return quantity(as_dict(resources).get(GPU_RESOURCE))


def text(amount: Decimal) -> str:
    """A Decimal as a plain Kubernetes quantity: ``16``, ``0.5``, never ``1.6E+1``."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return format(amount.normalize(), "f")


def labels_of(obj: Mapping[str, Any], scheduler: str) -> dict[str, str]:
    """The object's own labels and ``LABEL_SCHEDULER``."""
    meta = as_dict(obj.get("metadata"))
    labels = {str(k): str(v) for k, v in as_dict(meta.get("labels")).items()}
    labels[c.LABEL_SCHEDULER] = scheduler
    return labels


def metadata(obj: Mapping[str, Any], labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    meta = as_dict(obj.get("metadata"))
    kept: dict[str, Any] = {
        key: meta[key]
        for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        if key in meta
    }
    return {**kept, "labels": labels, **extra}


def newest_version(objects: Iterable[Mapping[str, Any]]) -> str:
    """The highest numeric resourceVersion of these objects."""
    versions = [as_dict(obj.get("metadata")).get("resourceVersion") for obj in objects]
    numbers = [int(v) for v in versions if isinstance(v, str) and v.isdigit()]
    return str(max(numbers)) if numbers else ""


def fair_sharing(weight: Decimal | None) -> dict[str, Any]:
    return {"fairSharing": {"weight": text(weight)}} if weight is not None else {}


def resource_groups(resource: dict[str, Any]) -> list[dict[str, Any]]:
    """One resource group: ``resource`` (``nvidia.com/gpu``) in ``FLAVOR``."""
    return [
        {
            "coveredResources": [GPU_RESOURCE],
            "flavors": [{"name": FLAVOR, "resources": [resource]}],
        }
    ]


def condition(kind: str, status: str, reason: str, message: str, at: Any) -> dict[str, Any]:
    found = {"type": kind, "status": status, "reason": reason, "message": message}
    if isinstance(at, str) and at:
        found["lastTransitionTime"] = at
    return found


# --- queues ----------------------------------------------------------------------------------


def parent_names(
    queues: Iterable[Mapping[str, Any]],
    parent_of: Callable[[Mapping[str, Any]], str],
    roots: Iterable[str] = (),
) -> frozenset[str]:
    """The queues that are Cohorts: those another queue names as parent, and those of
    ``roots`` that are listed (a scheduler's top queue)."""
    listed = list(queues)
    names = {name_of(q) for q in listed}
    parents = {parent_of(q) for q in listed} - {""}
    return frozenset(parents | (set(roots) & names))


def own_quota(quota: Decimal, children: Iterable[Decimal]) -> Decimal:
    """A Cohort's own quota: what its children's quota leaves of the queue's."""
    return max(Decimal(0), quota - sum(children, Decimal(0)))


def cohort(
    queue: Mapping[str, Any],
    children: list[Mapping[str, Any]],
    resource: dict[str, Any],
    labels: dict[str, str],
    parent: str,
    weight: Decimal | None,
) -> Translated:
    """A parent queue as a Kueue Cohort whose own quota is ``resource``."""
    metadata_ = metadata(queue, labels)
    version = newest_version([queue, *children])
    if version:
        metadata_["resourceVersion"] = version
    spec: dict[str, Any] = {**fair_sharing(weight), "resourceGroups": resource_groups(resource)}
    if parent:
        spec["parentName"] = parent
    return {"apiVersion": KUEUE_VERSION, "kind": "Cohort", "metadata": metadata_, "spec": spec}


def usage(in_use: Decimal, nominal: Decimal) -> list[dict[str, Any]]:
    """``status.flavorsUsage``: the quota in use, borrowed = max(0, in use - nominal)."""
    used = {
        "name": GPU_RESOURCE,
        "total": text(in_use),
        "borrowed": text(max(Decimal(0), in_use - nominal)),
    }
    return [{"name": FLAVOR, "resources": [used]}]


def translate_queues(
    queues: Iterable[Mapping[str, Any]],
    parent_of: Callable[[Mapping[str, Any]], str],
    to_cohort: Callable[[Mapping[str, Any], list[Mapping[str, Any]]], Translated],
    to_cluster_queue: Callable[[Mapping[str, Any]], Translated],
    roots: Iterable[str] = (),
    only: Collection[str] | None = None,
) -> tuple[list[Translated], list[Translated]]:
    """(Cohorts, ClusterQueues) of a complete list of a source's queues: parents (and listed
    ``roots``) through ``to_cohort`` with their children, the others through
    ``to_cluster_queue``. ``only``: translate just these queues (classified and given their
    children from the whole list), for a WATCH event that changes a few of them."""
    # One pass over the whole list (a WATCH event pays it per queue event): names, parents,
    # children; only the queues translated are sorted.
    names: set[str] = set()
    children: dict[str, list[Mapping[str, Any]]] = {}
    wanted = []
    for queue in queues:
        name = name_of(queue)
        if not name:
            continue
        names.add(name)
        children.setdefault(parent_of(queue), []).append(queue)
        if only is None or name in only:
            wanted.append(queue)
    parents = (children.keys() - {""}) | (set(roots) & names)
    wanted.sort(key=name_of)
    cohorts = [to_cohort(q, children.get(name_of(q), [])) for q in wanted if name_of(q) in parents]
    cluster_queues = [to_cluster_queue(q) for q in wanted if name_of(q) not in parents]
    return cohorts, cluster_queues


def objects_of(
    kind: str, translated: tuple[list[Translated], list[Translated]]
) -> dict[str, Translated]:
    """The translated objects of ``kind`` ("Cohort" or "ClusterQueue"), by name."""
    cohorts, cluster_queues = translated
    return {name_of(obj): obj for obj in (cohorts if kind == "Cohort" else cluster_queues)}


# --- PodGroups -------------------------------------------------------------------------------


def strip_uid(name: str, uids: Iterable[Any]) -> str:
    """``name`` without a trailing ``-<uid>`` of one of ``uids`` (a job's PodGroup name ends in
    its owner's uid); else the name."""
    for uid in uids:
        if isinstance(uid, str) and uid and name.endswith(f"-{uid}") and len(name) > len(uid) + 1:
            return name[: -len(uid) - 1]
    return name


def gang_pod_set(name: str, member: Any, totals: Mapping[str, Any]) -> dict[str, Any]:
    """One pod set of ``member`` pods (at least one) sharing ``totals`` evenly (the gang)."""
    count = member if isinstance(member, int) and member > 0 else 1
    per_pod: dict[str, str] = {}
    for resource, value in sorted(totals.items()):
        amount = quantity(value)
        if amount is not None and amount > 0:
            per_pod[str(resource)] = text(amount / count)
    container = {"name": name, "resources": {"requests": per_pod}} if per_pod else {"name": name}
    return {"name": name, "count": count, "template": {"spec": {"containers": [container]}}}


def workload(
    pod_group: Mapping[str, Any],
    *,
    name: str,
    queue: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    pod_set: dict[str, Any],
    conditions: list[dict[str, Any]],
    held: Mapping[str, Any] | None,
    active: bool = True,
) -> Translated:
    """A PodGroup as a Kueue Workload in the ClusterQueue ``queue`` (label
    ``LABEL_CLUSTER_QUEUE``: the sources have no LocalQueues); ``held`` (resource -> amount)
    becomes its admission when it holds quota."""
    spec = as_dict(pod_group.get("spec"))
    meta = as_dict(pod_group.get("metadata"))
    labels = {**labels, c.LABEL_CLUSTER_QUEUE: queue}
    metadata_ = metadata(
        pod_group,
        labels,
        annotations=annotations,
        ownerReferences=list(meta.get("ownerReferences") or []),
    )
    metadata_["name"] = name
    workload_spec: dict[str, Any] = {"queueName": queue, "podSets": [pod_set]}
    if not active:
        workload_spec["active"] = False
    if isinstance(spec.get("priorityClassName"), str) and spec["priorityClassName"]:
        workload_spec["priorityClassRef"] = {
            "group": "scheduling.k8s.io",
            "kind": "PriorityClass",
            "name": spec["priorityClassName"],
        }
    status: dict[str, Any] = {"conditions": conditions}
    if held is not None:
        used = {resource: text(quantity(value) or Decimal(0)) for resource, value in held.items()}
        status["admission"] = {
            "clusterQueue": queue,
            "podSetAssignments": [
                {
                    "name": pod_set["name"],
                    "flavors": {GPU_RESOURCE: FLAVOR} if GPU_RESOURCE in used else {},
                    "resourceUsage": dict(sorted(used.items())),
                    "count": pod_set["count"],
                }
            ],
        }
    return {
        "apiVersion": KUEUE_VERSION,
        "kind": "Workload",
        "metadata": metadata_,
        "spec": workload_spec,
        "status": status,
    }


def key_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = as_dict(obj.get("metadata"))
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


# --- a source, as the client reads it --------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One quota source's kinds and translators.

    ``group_facts`` is what one PodGroup tells its queue's translation (None: nothing), and
    ``summarize`` turns the facts of every PodGroup into the per-queue figures ``queues_as``
    takes (Volcano: the GPUs its Inqueue PodGroups reserve; KAI: its workload counts); the
    client keeps the facts from the PodGroup LIST and WATCH. A fact is a tuple whose first item
    is its queue's name, and a queue's summary entry depends on that queue's facts only, so the
    client re-summarizes only the queues whose facts changed. A queue's translation depends on
    the queue, its children (a Cohort), its summary entry and which queues are parents, so a
    WATCH event re-translates only the queues it touches (``queues_as``'s ``only``).
    """

    name: str
    group: str
    queue: Kind
    pod_group: Kind
    queue_versions: tuple[str, ...]
    pod_group_versions: tuple[str, ...]
    parent_names: Callable[[Iterable[Mapping[str, Any]]], frozenset[str]]
    # A queue's parent ("" for none): the Cohort whose own quota and resourceVersion follow it.
    parent_of: Callable[[Mapping[str, Any]], str]
    # (kind, the complete queue list, the per-queue summary, only these queue names or None).
    queues_as: Callable[
        [str, Iterable[Mapping[str, Any]], Mapping[str, Any], Collection[str] | None],
        dict[str, Any],
    ]
    pod_group_to_workload: Callable[[Mapping[str, Any]], Translated]
    group_facts: Callable[[Mapping[str, Any]], Any]
    summarize: Callable[[Iterable[Any]], dict[str, Any]]
    # The product's kinds the source does not serve (404 NotServed: known empty).
    unserved: frozenset[str] = frozenset({"ResourceFlavor", "LocalQueue", "WorkloadPriorityClass"})


def source_flavor(scheduler: str) -> dict[str, Any]:
    """The one ResourceFlavor of a cluster whose quotas name no node pool: ``FLAVOR`` without
    ``nodeLabels``, labelled with the scheduler. Ingest puts every GPU node in it
    (``quotas.ingest.nodes.parse_node``), so the cluster's GPUs, capacity and free GPUs are the
    flavor its queues' quota is in, as they are for a Kueue cluster's flavors."""
    return {
        "apiVersion": KUEUE_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {
            "name": FLAVOR,
            "resourceVersion": FLAVOR_VERSION,
            "labels": {c.LABEL_SCHEDULER: scheduler},
        },
        "spec": {},
    }
