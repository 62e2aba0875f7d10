"""Pods that request GPUs -> rows, each joined to its Workload when it can be.

The join, first match wins: the ``kueue.x-k8s.io/workload`` annotation, then the prebuilt
workload or pod group name, then Volcano's ``scheduling.k8s.io/group-name`` or KAI Scheduler's
``pod-group-name`` annotation (the PodGroup a translated Workload stands for, quotas/sources),
then the owner chain (an owner's, the JobSet's or the pod's own UID against the Workloads' job
UIDs and owner pods). A pod's ClusterQueue: its ``kueue.x-k8s.io/cluster-queue-name`` label,
else its Workload's, else KAI's ``kai.scheduler/queue`` label (a KAI queue is a ClusterQueue).
"""

from __future__ import annotations

from quotas import constants as c
from quotas.ingest.fields import (
    gpu_equivalent,
    gpu_total,
    is_gpu_resource,
    read_dict,
    read_list,
    read_str,
    read_time,
    to_float,
)
from quotas.ingest.resources import pod_requests
from quotas.ingest.rows import ObjectMeta, PodRow, WorkloadRow


class PodJoiner:
    """Pod -> Workload: annotation, then group name, then the owner chain to the job UID."""

    def __init__(self, workloads: list[WorkloadRow]) -> None:
        self.by_name = {row.key: row for row in workloads}
        self.by_job_uid: dict[tuple[str, str], WorkloadRow] = {}
        # Volcano, KAI: the PodGroup name a translated Workload stands for (quotas/sources).
        self.by_pod_group = {
            (row.meta.namespace, row.pod_group): row for row in workloads if row.pod_group
        }
        for row in workloads:
            if row.job_uid:
                self.by_job_uid.setdefault((row.meta.namespace, row.job_uid), row)
            for uid in row.owner_pod_uids:
                if uid:
                    self.by_job_uid.setdefault((row.meta.namespace, uid), row)

    def join(self, meta: ObjectMeta) -> tuple[str, str, WorkloadRow | None]:
        """(workload name, how it was joined, the Workload row when in this snapshot)."""
        namespace = meta.namespace
        named = meta.annotations.get(c.ANNOTATION_WORKLOAD)
        if named:
            return named, "annotation", self.by_name.get((namespace, named))
        for key in (c.PREBUILT_WORKLOAD_NAME, c.POD_GROUP_NAME):
            group = meta.annotations.get(key) or meta.labels.get(key)
            if group and (namespace, group) in self.by_name:
                return group, key, self.by_name[(namespace, group)]
        for key in (c.VOLCANO_GROUP_NAME, c.KAI_GROUP_NAME):
            pod_group = meta.annotations.get(key)
            if not pod_group:
                continue
            found = (namespace, pod_group)
            row = self.by_pod_group.get(found) or self.by_name.get(found)
            if row is not None:
                return row.meta.name, key, row
        candidates = [("owner", ref.get("uid") or "") for ref in meta.owner_references] + [
            ("jobset", meta.labels.get(c.LABEL_JOBSET_UID, "")),
            ("pod_uid", meta.uid),
        ]
        for how, uid in candidates:
            row = self.by_job_uid.get((namespace, uid)) if uid else None
            if row is not None:
                return row.meta.name, how, row
        prebuilt = meta.annotations.get(c.PREBUILT_WORKLOAD_NAME) or meta.labels.get(
            c.PREBUILT_WORKLOAD_NAME
        )
        if prebuilt:
            return prebuilt, c.PREBUILT_WORKLOAD_NAME, None
        return "", "", None


def parse_pod(item: dict, meta: ObjectMeta, joiner: PodJoiner) -> PodRow | None:
    """A pod's row, joined to its Workload; None for a pod without GPU requests."""
    spec = read_dict(item.get("spec"), "spec", required=True)
    status = read_dict(item.get("status"), "status")
    requests = {r: v for r, v in pod_requests(spec).items() if is_gpu_resource(r) and v > 0}
    if not requests:
        return None
    workload_name, joined_by, workload = joiner.join(meta)
    podset = meta.labels.get(c.LABEL_PODSET, "")
    resource = max(sorted(requests), key=lambda r: gpu_equivalent(r, requests[r]))
    flavor = ""
    if workload is not None:
        podset_flavors = workload.podset_flavors.get(podset) or next(
            iter(workload.podset_flavors.values()), {}
        )
        flavor = podset_flavors.get(resource, "")
    finished_at = None
    for state in read_list(status.get("containerStatuses"), "status.containerStatuses"):
        terminated = read_dict(read_dict(state, "containerStatus").get("state"), "state").get(
            "terminated"
        )
        finished = read_time(read_dict(terminated, "terminated").get("finishedAt"), "finishedAt")
        if finished is not None and (finished_at is None or finished > finished_at):
            finished_at = finished
    return PodRow(
        meta=meta,
        node_name=read_str(spec.get("nodeName"), "spec.nodeName"),
        phase=read_str(status.get("phase"), "status.phase"),
        started_at=read_time(status.get("startTime"), "status.startTime"),
        finished_at=finished_at,
        gpus=to_float(gpu_total(requests)),
        resource=resource,
        requests=requests,
        workload_name=workload_name,
        joined_by=joined_by,
        cluster_queue_name=meta.labels.get(c.LABEL_CLUSTER_QUEUE)
        or (workload.cluster_queue_name if workload else "")
        or meta.labels.get(c.KAI_QUEUE_LABEL, ""),
        local_queue_name=meta.labels.get(c.LABEL_LOCAL_QUEUE)
        or (workload.queue_name if workload else ""),
        podset=podset,
        flavor=flavor,
    )
