"""kube-state-metrics -> GPU requests of scheduled pods and the pods' Kueue queue labels.

``node=""`` is a pending pod: it holds nothing and is counted apart, not as a skip. MIG resource
names come back with kube-state-metrics' underscores and are turned back into Kubernetes ones.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from core.mig import GPU_RESOURCE, MIG_COMPUTE_SLICES, MIG_RESOURCE_PREFIX, mig_slices
from fleet import constants as c
from fleet.ingest.rows import IngestStats, PodOwner
from fleet.ingest.samples import label_sort_key, parse_sample


@dataclass
class PodRequest:
    namespace: str
    pod: str
    uid: str
    node: str
    gpus: float = 0.0
    # resource (k8s spelling) -> GPUs
    resources: dict[str, float] = field(default_factory=dict)
    containers: set[str] = field(default_factory=set)


def _k8s_resource(ksm_resource: str) -> tuple[str, int] | None:
    """('nvidia.com/gpu', 7) or ('nvidia.com/mig-1g.10gb', 1) for a kube-state-metrics name."""
    if ksm_resource == c.KSM_RESOURCE_GPU:
        return GPU_RESOURCE, MIG_COMPUTE_SLICES
    if ksm_resource.startswith(c.KSM_RESOURCE_MIG_PREFIX):
        # kube-state-metrics turns every character outside [a-zA-Z0-9_] into "_":
        # 1g.10gb -> 1g_10gb, 1g.10gb+me -> 1g_10gb_me. Undo the first one, which is the dot.
        profile = ksm_resource[len(c.KSM_RESOURCE_MIG_PREFIX) :].replace("_", ".", 1)
        slices = mig_slices(profile)
        if slices is None:
            return None
        return MIG_RESOURCE_PREFIX + profile, slices
    return None


def collect_requests(
    items: list[dict], stats: IngestStats
) -> dict[tuple[str, str, str], PodRequest]:
    seen: dict[tuple[str, str, str, str, str], dict] = {}
    values: dict[tuple[str, str, str, str, str], float] = {}
    nodes: dict[tuple[str, str, str, str, str], str] = {}
    if not isinstance(items, list):
        stats.skip("malformed_metric_result")
        return {}
    stats.records_read += len(items)
    for item in items:
        sample = parse_sample(item, stats)
        if sample is None:
            continue
        metric, value = sample
        if value is None:
            continue
        namespace = metric.get(c.LABEL_NAMESPACE) or ""
        pod = metric.get(c.LABEL_POD) or ""
        resource = metric.get(c.KSM_LABEL_RESOURCE) or ""
        if not namespace or not pod or not resource:
            stats.skip("request_missing_labels")
            continue
        node = metric.get(c.KSM_LABEL_NODE) or ""
        if not node:
            # Not scheduled: a pending pod holds nothing (fixture: team-b/resnet-eval-0-q7z4t).
            stats.pending_requests += 1
            continue
        if value <= 0:
            stats.skip("request_not_positive")
            continue
        ident = (
            str(namespace),
            str(pod),
            str(metric.get(c.KSM_LABEL_UID) or ""),
            str(metric.get(c.LABEL_CONTAINER) or ""),
            str(resource),
        )
        previous = seen.get(ident)
        if previous is not None:
            # Two kube-state-metrics replicas scraped side by side: count the container once.
            stats.skip("duplicate_series")
            if label_sort_key(metric) >= label_sort_key(previous):
                continue
        seen[ident] = metric
        values[ident] = value
        nodes[ident] = str(node)

    pods: dict[tuple[str, str, str], PodRequest] = {}
    for ident in sorted(values):
        namespace, pod, uid, container, ksm_resource = ident
        resolved = _k8s_resource(ksm_resource)
        if resolved is None:
            stats.skip("request_unknown_resource")
            continue
        resource, slices = resolved
        gpus = values[ident] * slices / MIG_COMPUTE_SLICES
        entry = pods.get((namespace, pod, uid))
        if entry is None:
            entry = PodRequest(namespace=namespace, pod=pod, uid=uid, node=nodes[ident])
            pods[(namespace, pod, uid)] = entry
        entry.gpus += gpus
        entry.resources[resource] = entry.resources.get(resource, 0.0) + gpus
        if container:
            entry.containers.add(container)
    return pods


def collect_pod_labels(
    items: list[dict],
    stats: IngestStats,
) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(namespace, pod) -> (uid, cluster queue, local queue)."""
    if not isinstance(items, list):
        stats.skip("malformed_metric_result")
        return {}
    stats.records_read += len(items)
    found: dict[tuple[str, str], list[tuple[str, str, str]]] = defaultdict(list)
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            stats.skip("missing_metric")
            continue
        metric = item["metric"]
        namespace = metric.get(c.LABEL_NAMESPACE) or ""
        pod = metric.get(c.LABEL_POD) or ""
        if not namespace or not pod:
            stats.skip("pod_labels_missing_labels")
            continue
        cluster_queue = metric.get(c.KSM_LABEL_CLUSTER_QUEUE) or ""
        local_queue = (
            metric.get(c.KSM_LABEL_LOCAL_QUEUE) or metric.get(c.KSM_LABEL_QUEUE_NAME) or ""
        )
        found[(str(namespace), str(pod))].append(
            (str(metric.get(c.KSM_LABEL_UID) or ""), str(cluster_queue), str(local_queue))
        )
    # Several answers for one pod (kube-state-metrics replicas, a recreated pod): prefer the one
    # naming queues, then the highest sorted tuple, so the choice does not depend on order.
    return {
        ident: max(options, key=lambda o: (bool(o[1] or o[2]), o))
        for ident, options in found.items()
    }


def collect_pod_owners(
    pod_owners: list[dict],
    job_owners: list[dict],
    pod_labels: list[dict],
    stats: IngestStats,
    pod_groups: list[dict] | None = None,
) -> dict[tuple[str, str], PodOwner]:
    """(namespace, pod) -> its owner chain (kube_pod_owner, kube_job_owner) and pod group:
    Kueue's pod group label, else the Volcano or KAI PodGroup its annotation names
    (``pod_groups``: ``fleet.constants.PROMQL_POD_GROUPS`` items).

    Items without namespace and pod are skipped and counted; a pod seen with several
    controllers (two kube-state-metrics replicas disagreeing) keeps the highest sorted one, so
    the choice does not depend on answer order.
    """
    if not isinstance(pod_owners, list) or not isinstance(job_owners, list):
        stats.skip("malformed_metric_result")
        return {}
    stats.records_read += len(pod_owners) + len(job_owners)
    jobs: dict[tuple[str, str], tuple[str, str]] = {}
    for item in job_owners:
        metric = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(metric, dict):
            stats.skip("missing_metric")
            continue
        namespace, job = str(metric.get("namespace") or ""), str(metric.get("job_name") or "")
        kind, name = str(metric.get("owner_kind") or ""), str(metric.get("owner_name") or "")
        if not namespace or not job or not kind or kind == c.KSM_NO_OWNER:
            continue
        jobs[(namespace, job)] = max(jobs.get((namespace, job), ("", "")), (kind, name))
    groups: dict[tuple[str, str], str] = {}
    for item in pod_labels if isinstance(pod_labels, list) else []:
        metric = item.get("metric") if isinstance(item, dict) else None
        if isinstance(metric, dict) and metric.get(c.KSM_LABEL_POD_GROUP):
            key = (str(metric.get(c.LABEL_NAMESPACE) or ""), str(metric.get(c.LABEL_POD) or ""))
            groups[key] = str(metric[c.KSM_LABEL_POD_GROUP])
    for item in pod_groups if isinstance(pod_groups, list) else []:
        metric = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(metric, dict):
            stats.skip("missing_metric")
            continue
        key = (str(metric.get(c.LABEL_NAMESPACE) or ""), str(metric.get(c.LABEL_POD) or ""))
        named = [str(metric.get(label) or "") for label in c.KSM_POD_GROUP_ANNOTATIONS]
        group = next((name for name in named if name), "")
        if group and key[0] and key[1]:
            groups.setdefault(key, group)
    owners: dict[tuple[str, str], PodOwner] = {}
    for item in pod_owners:
        metric = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(metric, dict):
            stats.skip("missing_metric")
            continue
        namespace, pod = str(metric.get("namespace") or ""), str(metric.get("pod") or "")
        if not namespace or not pod:
            stats.skip("pod_owner_missing_labels")
            continue
        kind, name = str(metric.get("owner_kind") or ""), str(metric.get("owner_name") or "")
        if kind == c.KSM_NO_OWNER:
            kind = name = ""
        top_kind, top_name = (
            jobs.get((namespace, name), (kind, name))
            if kind == "Job"
            else (
                kind,
                name,
            )
        )
        found = PodOwner(
            uid=str(metric.get(c.KSM_LABEL_UID) or ""),
            kind=kind,
            name=name,
            top_kind=top_kind,
            top_name=top_name,
            pod_group=groups.get((namespace, pod), ""),
        )
        previous = owners.get((namespace, pod))
        if previous is None or (found.kind, found.name, found.uid) > (
            previous.kind,
            previous.name,
            previous.uid,
        ):
            owners[(namespace, pod)] = found
    for key, group in groups.items():
        # A pod group member whose owner series is missing still names its Workload.
        if key not in owners and key[0] and key[1]:
            owners[key] = PodOwner(uid="", pod_group=group)
    return owners
