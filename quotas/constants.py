"""Kueue / Kubernetes names the ingest layer reads, its writer's batch sizes, and the sync's
watch and claim timings (docs/conventions.md "Models").
"""

from decimal import Decimal

from core import mig

# MIG resources (`nvidia.com/mig-3g.40gb`) take N of a GPU's 7 compute slices.
MIG_COMPUTE_SLICES = Decimal(mig.MIG_COMPUTE_SLICES)

# apiVersions served per kind. Kueue serves v1beta2 and (deprecated) v1beta1; Cohort was
# v1alpha1 before it graduated. Anything else is skipped with a reason, never guessed at.
KUEUE_GROUP = "kueue.x-k8s.io"
API_VERSIONS: dict[str, frozenset[str]] = {
    "ResourceFlavor": frozenset({"kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"}),
    "Cohort": frozenset(
        {"kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1alpha1"}
    ),
    "ClusterQueue": frozenset({"kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"}),
    "LocalQueue": frozenset({"kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"}),
    "Workload": frozenset({"kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"}),
    "WorkloadPriorityClass": frozenset({"kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"}),
    "Pod": frozenset({"v1"}),
    "Node": frozenset({"v1"}),
}
V1BETA1 = "kueue.x-k8s.io/v1beta1"
V1ALPHA1 = "kueue.x-k8s.io/v1alpha1"

# snapshot_from_lists keyword -> kind.
LIST_KINDS: dict[str, str] = {
    "resource_flavors": "ResourceFlavor",
    "cohorts": "Cohort",
    "cluster_queues": "ClusterQueue",
    "local_queues": "LocalQueue",
    "workloads": "Workload",
    "workload_priority_classes": "WorkloadPriorityClass",
    "pods": "Pod",
    "nodes": "Node",
}

# Workload labels and annotations, and the pod ones that join a pod to its Workload.
LABEL_JOB_UID = "kueue.x-k8s.io/job-uid"
ANNOTATION_WORKLOAD = "kueue.x-k8s.io/workload"
POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
PREBUILT_WORKLOAD_NAME = "kueue.x-k8s.io/prebuilt-workload-name"
LABEL_JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
LABEL_CLUSTER_QUEUE = "kueue.x-k8s.io/cluster-queue-name"
LABEL_LOCAL_QUEUE = "kueue.x-k8s.io/local-queue-name"
LABEL_PODSET = "kueue.x-k8s.io/podset"
# Volcano's pod annotation naming its PodGroup (docs/architecture.md "Quota sources").
VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"
# KAI Scheduler's pod annotation naming its PodGroup, and its label naming the pod's queue.
KAI_GROUP_NAME = "pod-group-name"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
# The label a quota source's translated objects carry: which scheduler they were read from
# (quotas/sources). Objects without it are Kueue's own.
LABEL_SCHEDULER = "gpu-ledger.io/scheduler"
DEFAULT_SCHEDULER = "kueue"

# Workload condition types and the reasons that change how we read them.
COND_QUOTA_RESERVED = "QuotaReserved"
COND_ADMITTED = "Admitted"
COND_PODS_READY = "PodsReady"
COND_EVICTED = "Evicted"
COND_PREEMPTED = "Preempted"
COND_REQUEUED = "Requeued"
COND_FINISHED = "Finished"
COND_ACTIVE = "Active"
FINISHED_SUCCEEDED = "Succeeded"
# Evicted reasons Kueue uses when spec.active goes false (renamed across releases).
DEACTIVATION_REASONS = frozenset({"InactiveWorkload", "Deactivated"})

# Node labels.
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
# Node pool labels of the common providers and autoscalers; the first present wins.
NODE_POOL_LABELS: tuple[str, ...] = (
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
    "agentpool",
    "node.kubernetes.io/pool",
    "nodepool",
)

# Rows per INSERT … ON CONFLICT statement. Measured on PostgreSQL 15 (2 shared cores) with
# write_snapshot of 5,120 Workloads and 16k transitions, two runs each: 250 → 4.7/5.8 s,
# 1,000 → 5.8/6.0 s, 4,000 → 5.1/6.1 s. The size is noise next to the Python-side work; 1,000 keeps
# the widest row (Workload, ~37 columns) near 37k parameters, under PostgreSQL's 65,535 bind limit
# if server-side binding is ever turned on. SQLite gets Django's own cap (999 parameters).
WRITE_BATCH_SIZE = 1000
# Keys per `IN (…)` lookup when reading existing rows back (well under SQLite's variable limit).
LOOKUP_BATCH_SIZE = 900

# The sync's WATCH (quotas/sync/watch.py).
# Watch events are written in batches: the first event of a batch waits at most this long, and a
# batch holds at most this many objects. One second keeps pages fresh while a burst of changes
# (a gang of 100 workloads admitted at once) becomes one write.
EVENT_BATCH_SECONDS = 1.0
EVENT_BATCH_MAX = 5000
# A watch that failed transiently is reopened after this long (doubling, capped).
WATCH_RETRY_SECONDS = 1.0
WATCH_RETRY_MAX_SECONDS = 8.0
# A watch stream asks the server to end it with the watch (timeoutSeconds, rounded up to a whole
# second); one still open this long after the watch's end is cut, and its kind recorded as failed.
WATCH_END_GRACE_SECONDS = 5.0

# --- Kueue's own Prometheus metrics (quota history; quotas/ingest/metrics.py) --------------------
# Exported with `metrics.enableClusterQueueResources: true` in Kueue's configuration. Names and
# labels checked in kubernetes-sigs/kueue pkg/metrics/metrics.go: the per-ClusterQueue resource
# gauges carry cohort (the direct parent, "" for a standalone queue), cluster_queue, flavor and
# resource since v0.9 at least; `replica_role` (leader / follower / standalone) since v0.16;
# `kueue_cluster_queue_resource_pending` and `kueue_cluster_queue_info` since v0.18. Followers
# of a leader-elected deployment report what they last knew, so their series are left out;
# series without the label (before v0.16) are taken as they are.
KUEUE_REPLICA_FILTER = 'replica_role!="follower"'
KUEUE_METRIC_NOMINAL = "kueue_cluster_queue_nominal_quota"
KUEUE_METRIC_BORROWING_LIMIT = "kueue_cluster_queue_borrowing_limit"
KUEUE_METRIC_LENDING_LIMIT = "kueue_cluster_queue_lending_limit"
KUEUE_METRIC_USAGE = "kueue_cluster_queue_resource_usage"
KUEUE_METRIC_RESERVATION = "kueue_cluster_queue_resource_reservation"
KUEUE_METRIC_RESOURCE_PENDING = "kueue_cluster_queue_resource_pending"
KUEUE_METRIC_PENDING_WORKLOADS = "kueue_pending_workloads"
KUEUE_METRIC_ADMITTED_WORKLOADS = "kueue_admitted_active_workloads"
KUEUE_METRIC_CQ_INFO = "kueue_cluster_queue_info"
# Three queries per window, whatever the number of queues: the per-flavor gauges in one
# (grouped by metric name), the per-queue ones in another, the hierarchy in a third; `max by`
# merges the copies two scrape jobs (or a restarted pod) make of one series. The GPU resource
# only, which is all the rollups read. ``KUEUE_ANSWERS`` routes each answered series, by its
# metric name, to the input ``quotas.ingest.metrics.build_metric_samples`` reads.
_PER_FLAVOR = "|".join(
    (
        KUEUE_METRIC_NOMINAL,
        KUEUE_METRIC_BORROWING_LIMIT,
        KUEUE_METRIC_LENDING_LIMIT,
        KUEUE_METRIC_USAGE,
        KUEUE_METRIC_RESERVATION,
    )
)
_PER_QUEUE = "|".join(
    (
        KUEUE_METRIC_RESOURCE_PENDING,
        KUEUE_METRIC_PENDING_WORKLOADS,
        KUEUE_METRIC_ADMITTED_WORKLOADS,
    )
)
# Whole GPUs and MIG instances (``nvidia.com/mig-<profile>``), each its own series.
_GPU_RESOURCES = "|".join(
    (mig.GPU_RESOURCE.replace(".", r"\\."), mig.MIG_RESOURCE_PREFIX.replace(".", r"\\.") + ".+")
)
KUEUE_QUERIES: dict[str, str] = {
    "per_flavor": (
        "max by (__name__, cluster_queue, cohort, flavor, resource) ("
        f'{{__name__=~"{_PER_FLAVOR}", resource=~"{_GPU_RESOURCES}", {KUEUE_REPLICA_FILTER}}})'
    ),
    # Series without a resource label (the workload counts) match resource="" here.
    "per_queue": (
        "max by (__name__, cluster_queue, status) ("
        f'{{__name__=~"{_PER_QUEUE}", resource=~"{mig.GPU_RESOURCE}|", {KUEUE_REPLICA_FILTER}}})'
    ),
    "info": (
        "max by (cluster_queue, parent_cohort, root_cohort) "
        f"({KUEUE_METRIC_CQ_INFO}{{{KUEUE_REPLICA_FILTER}}})"
    ),
}
# metric name -> the build_metric_samples input it feeds.
KUEUE_ANSWERS: dict[str, str] = {
    KUEUE_METRIC_NOMINAL: "nominal",
    KUEUE_METRIC_BORROWING_LIMIT: "borrowing_limit",
    KUEUE_METRIC_LENDING_LIMIT: "lending_limit",
    KUEUE_METRIC_USAGE: "usage",
    KUEUE_METRIC_RESERVATION: "reservation",
    KUEUE_METRIC_RESOURCE_PENDING: "resource_pending",
    KUEUE_METRIC_PENDING_WORKLOADS: "pending_workloads",
    KUEUE_METRIC_ADMITTED_WORKLOADS: "admitted_workloads",
    KUEUE_METRIC_CQ_INFO: "info",
}

# --- Volcano's and KAI Scheduler's own Prometheus metrics (docs/prometheus.md) ---------------
# Their queue gauges, asked in PromQL that answers in Kueue's shape: each series renamed to the
# Kueue metric it stands for (``KUEUE_ANSWERS``), ``cluster_queue`` = the queue, ``flavor`` =
# the one flavor the quota sources translate every queue's GPUs into (quotas/sources/common.py
# ``FLAVOR``), so ``quotas.ingest.metrics`` and ``quotas.ingest.metric_range`` read them as they
# read Kueue's. A figure a scheduler does not export has no query: it stays unknown.
SOURCE_FLAVOR = "default-flavor"
# vc-scheduler (capacity or proportion plugin): labels queue_name and resource; scalar
# resources such as nvidia.com/gpu in milli-units (8 GPUs export as 8000). The capability gauge
# is named "capacity".
VOLCANO_METRIC_DESERVED = "volcano_queue_deserved_scalar_resources"
VOLCANO_METRIC_CAPACITY = "volcano_queue_capacity_scalar_resources"
VOLCANO_METRIC_ALLOCATED = "volcano_queue_allocated_scalar_resources"
VOLCANO_METRIC_INQUEUE = "volcano_queue_inqueue_scalar_resources"
VOLCANO_MILLI = 1000
# vc-controller-manager: a Queue's status counts, label queue_name.
VOLCANO_METRIC_PENDING_COUNT = "volcano_queue_pod_group_pending_count"
VOLCANO_METRIC_RUNNING_COUNT = "volcano_queue_pod_group_running_count"
# KAI's queue-controller (metrics namespace "kai"): label queue_name; whole GPUs, not milli.
# deserved is spec.resources.gpu.quota as written, -1 for an unlimited quota.
KAI_METRIC_DESERVED = "kai_queue_deserved_gpus"
KAI_METRIC_ALLOCATED = "kai_queue_allocated_gpus"
KAI_UNLIMITED = -1


def _as_kueue(expr: str, kueue_name: str, *, flavor: bool = True) -> str:
    """``expr`` (labelled ``queue_name``) as a series named ``kueue_name`` with Kueue's
    ``cluster_queue`` (and ``flavor``) labels."""
    renamed = (
        f'label_replace(label_replace({expr}, "__name__", "{kueue_name}", "", ""), '
        '"cluster_queue", "$1", "queue_name", "(.+)")'
    )
    return f'label_replace({renamed}, "flavor", "{SOURCE_FLAVOR}", "", "")' if flavor else renamed


def _volcano(metric: str) -> str:
    return f'max by (queue_name, resource) ({metric}{{resource=~"{_GPU_RESOURCES}"}})'


# A scalar series exists only for the resources of a queue's own resource list, so a queue with
# a capability but no deserved GPU series deserves 0 GPUs (the live mapping: absent is 0).
_VOLCANO_DESERVED = (
    f"({_volcano(VOLCANO_METRIC_DESERVED)} or 0 * {_volcano(VOLCANO_METRIC_CAPACITY)})"
)
VOLCANO_QUERIES: dict[str, str] = {
    # nominal = deserved
    "volcano_nominal": _as_kueue(f"{_VOLCANO_DESERVED} / {VOLCANO_MILLI}", KUEUE_METRIC_NOMINAL),
    # borrowing limit = capability - deserved (no capability series: no limit)
    "volcano_borrowing_limit": _as_kueue(
        f"clamp_min({_volcano(VOLCANO_METRIC_CAPACITY)} - {_VOLCANO_DESERVED}, 0)"
        f" / {VOLCANO_MILLI}",
        KUEUE_METRIC_BORROWING_LIMIT,
    ),
    # quota in use = allocated (bound pods) + inqueue (admitted gangs' minResources not bound
    # yet), as the live sync counts it (quotas/sources/volcano.py)
    "volcano_usage": _as_kueue(
        "sum by (queue_name, resource) (max by (__name__, queue_name, resource) ("
        f'{{__name__=~"{VOLCANO_METRIC_ALLOCATED}|{VOLCANO_METRIC_INQUEUE}", '
        f'resource=~"{_GPU_RESOURCES}"}})) / {VOLCANO_MILLI}',
        KUEUE_METRIC_USAGE,
    ),
    "volcano_pending": _as_kueue(
        f"max by (queue_name) ({VOLCANO_METRIC_PENDING_COUNT})",
        KUEUE_METRIC_PENDING_WORKLOADS,
        flavor=False,
    ),
    "volcano_admitted": _as_kueue(
        f"max by (queue_name) ({VOLCANO_METRIC_RUNNING_COUNT})",
        KUEUE_METRIC_ADMITTED_WORKLOADS,
        flavor=False,
    ),
}
_KAI_DESERVED = f"max by (queue_name) ({KAI_METRIC_DESERVED})"
_KAI_ALLOCATED = f"max by (queue_name) ({KAI_METRIC_ALLOCATED})"
KAI_QUERIES: dict[str, str] = {
    # nominal = quota; an unlimited quota (-1) is what the queue holds, as the live sync reads
    # it (quotas/sources/kai.py)
    "kai_nominal": _as_kueue(
        f"({_KAI_DESERVED} != {KAI_UNLIMITED}) or "
        f"({_KAI_ALLOCATED} and on (queue_name) ({_KAI_DESERVED} == {KAI_UNLIMITED}))",
        KUEUE_METRIC_NOMINAL,
    ),
    "kai_usage": _as_kueue(_KAI_ALLOCATED, KUEUE_METRIC_USAGE),
}
# A ResourceQuota cluster's queues are its namespaces' GPU quotas; kube-state-metrics exports
# each quota's hard limit and usage as ``kube_resourcequota{namespace, resourcequota, resource,
# type="hard"|"used"}`` (whole GPUs). As the live translation reads unscoped quotas
# (quotas/sources/resourcequota.py): a namespace's nominal is its smallest GPU limit and its
# quota in use the largest usage (the metric names no scope, so namespaces whose GPU quotas are
# all scoped read the same way in history: docs/prometheus.md); nothing is borrowed or lent.
RESOURCEQUOTA_METRIC = "kube_resourcequota"
RESOURCEQUOTA_RESOURCE = "requests.nvidia.com/gpu"


def _per_namespace(aggregate: str, kind: str) -> str:
    """``aggregate`` over a namespace's GPU ResourceQuota series of ``type`` ``kind``, labelled
    ``queue_name`` as the scheduler gauges are."""
    series = f'{RESOURCEQUOTA_METRIC}{{resource="{RESOURCEQUOTA_RESOURCE}", type="{kind}"}}'
    return (
        f'label_replace({aggregate} by (namespace) ({series}), "queue_name", "$1", '
        '"namespace", "(.+)")'
    )


RESOURCEQUOTA_QUERIES: dict[str, str] = {
    "resourcequota_nominal": _as_kueue(_per_namespace("min", "hard"), KUEUE_METRIC_NOMINAL),
    # No borrowing and no lending: both limits 0 wherever there is a quota.
    "resourcequota_borrowing_limit": _as_kueue(
        f"0 * {_per_namespace('min', 'hard')}", KUEUE_METRIC_BORROWING_LIMIT
    ),
    "resourcequota_lending_limit": _as_kueue(
        f"0 * {_per_namespace('min', 'hard')}", KUEUE_METRIC_LENDING_LIMIT
    ),
    "resourcequota_usage": _as_kueue(_per_namespace("max", "used"), KUEUE_METRIC_USAGE),
}
# Sources whose queues have nothing to borrow from: usage above the nominal quota is over quota,
# not borrowed (``quotas.ingest.metrics.samples_of(borrows=False)``).
QUOTA_METRIC_NO_BORROWING = frozenset({"resourcequota"})
# Cluster.quota_source -> the ``quotas.ingest.metrics`` per-queue inputs its scheduler's metrics
# do not export: unknown (None) in its metrics samples, never 0. (Kueue before v0.18 lacks
# ``resource_pending`` too; its samples keep 0 there, as they always have.)
QUOTA_METRIC_UNEXPORTED: dict[str, frozenset[str]] = {
    # Pending GPUs are not in Volcano's metrics (``request`` counts pending pods, and the
    # Pending PodGroup of a Volcano Job has none yet).
    "volcano": frozenset({"resource_pending"}),
    "kai": frozenset({"resource_pending", "pending_workloads", "admitted_workloads"}),
    # kube-state-metrics counts no pods per quota and tells pending pods by no quota.
    "resourcequota": frozenset({"resource_pending", "pending_workloads", "admitted_workloads"}),
}
# Cluster.quota_source -> the queries of its scheduler's quota metrics ("" detects: Kueue's
# unless the synced rows say otherwise, ``quotas.store.samples.quota_metrics_source``); a
# ResourceQuota cluster's come from kube-state-metrics.
QUOTA_METRIC_QUERIES: dict[str, dict[str, str]] = {
    "kueue": KUEUE_QUERIES,
    "volcano": VOLCANO_QUERIES,
    "kai": KAI_QUERIES,
    "resourcequota": RESOURCEQUOTA_QUERIES,
}
