"""DCGM / kube-state-metrics names, and the batch sizes of the fleet writers
(docs/conventions.md "Models").

A plain module of constants; the PromQL templates of the collector (``ledger.collector``) are at
the end.
"""

# Our short key -> dcgm-exporter field name. Profiling ("PROF") fields are 0-1 ratios;
# GPU_UTIL is 0-100; FB_USED is MiB. SM_ACTIVE is commented out in dcgm-exporter's default
# counters file, so GR_ENGINE_ACTIVE is the activity fallback
# (docs/architecture.md "Upstream facts").
DCGM_METRICS: dict[str, str] = {
    "sm_active": "DCGM_FI_PROF_SM_ACTIVE",
    "pipe_tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "dram_active": "DCGM_FI_PROF_DRAM_ACTIVE",
    "gr_engine_active": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "gpu_util": "DCGM_FI_DEV_GPU_UTIL",
    "fb_used": "DCGM_FI_DEV_FB_USED",
}
# Activity: the first key with a sample wins, in this order.
ACTIVITY_METRICS: tuple[str, ...] = ("sm_active", "gr_engine_active")

# Labels on DCGM series. The host label is `Hostname` up to dcgm-exporter 4.8.x and `hostname`
# after (PR #655); the first one present wins.
LABEL_HOSTNAMES: tuple[str, ...] = ("Hostname", "hostname")
LABEL_UUID = "UUID"
LABEL_GPU_INSTANCE_ID = "GPU_I_ID"
LABEL_GPU_INSTANCE_PROFILE = "GPU_I_PROFILE"
LABEL_GPU_INDEX = "gpu"
LABEL_MODEL_NAME = "modelName"
LABEL_PCI_BUS_ID = "pci_bus_id"

# Pod labels on DCGM series: `exported_*` when Prometheus scrapes with honor_labels: false (GPU
# Operator and Helm defaults; then the plain ones name the exporter pod), plain otherwise.
LABEL_EXPORTED_NAMESPACE = "exported_namespace"
LABEL_EXPORTED_POD = "exported_pod"
LABEL_EXPORTED_CONTAINER = "exported_container"
LABEL_NAMESPACE = "namespace"
LABEL_POD = "pod"
LABEL_CONTAINER = "container"
# style -> (namespace, pod, container) label names.
POD_LABELS_BY_STYLE: dict[str, tuple[str, str, str]] = {
    "exported": (LABEL_EXPORTED_NAMESPACE, LABEL_EXPORTED_POD, LABEL_EXPORTED_CONTAINER),
    "plain": (LABEL_NAMESPACE, LABEL_POD, LABEL_CONTAINER),
}

# kube-state-metrics.
KSM_RESOURCE_REQUESTS = "kube_pod_container_resource_requests"
KSM_POD_STATUS_PHASE = "kube_pod_status_phase"
KSM_POD_INFO = "kube_pod_info"
KSM_POD_LABELS = "kube_pod_labels"
KSM_LABEL_UID = "uid"
KSM_LABEL_NODE = "node"
KSM_LABEL_RESOURCE = "resource"
KSM_PHASE_RUNNING = "Running"
# kube-state-metrics sanitises resource names: nvidia.com/gpu -> nvidia_com_gpu,
# nvidia.com/mig-1g.10gb -> nvidia_com_mig_1g_10gb.
KSM_RESOURCE_GPU = "nvidia_com_gpu"
KSM_RESOURCE_MIG_PREFIX = "nvidia_com_mig_"
KSM_GPU_RESOURCE_REGEX = "nvidia_com_gpu|nvidia_com_mig_.*"

# Kueue pod labels as kube_pod_labels exposes them when allowlisted
# (--metric-labels-allowlist=pods=[kueue.x-k8s.io/queue-name,...]).
KSM_LABEL_CLUSTER_QUEUE = "label_kueue_x_k8s_io_cluster_queue_name"
KSM_LABEL_LOCAL_QUEUE = "label_kueue_x_k8s_io_local_queue_name"
# Older Kueue and most Job manifests set only the LocalQueue as `kueue.x-k8s.io/queue-name`.
KSM_LABEL_QUEUE_NAME = "label_kueue_x_k8s_io_queue_name"
# A plain pod group's Workload is named by this pod label (when allowlisted).
KSM_LABEL_POD_GROUP = "label_kueue_x_k8s_io_pod_group_name"
# The PodGroup a Volcano or KAI Scheduler pod belongs to, from its annotation as
# kube_pod_annotations exposes it when allowlisted
# (--metric-annotations-allowlist=pods=[scheduling.k8s.io/group-name,pod-group-name]):
# Volcano's scheduling.k8s.io/group-name, KAI's pod-group-name.
KSM_POD_ANNOTATIONS = "kube_pod_annotations"
KSM_ANNOTATION_VOLCANO_GROUP = "annotation_scheduling_k8s_io_group_name"
KSM_ANNOTATION_KAI_GROUP = "annotation_pod_group_name"
KSM_POD_GROUP_ANNOTATIONS: tuple[str, ...] = (
    KSM_ANNOTATION_VOLCANO_GROUP,
    KSM_ANNOTATION_KAI_GROUP,
)
# Owners: kube_pod_owner{owner_kind, owner_name, owner_is_controller} per pod (owner_kind
# "<none>" for a bare pod), kube_job_owner{job_name, owner_kind, owner_name} per Job (a JobSet's
# child Jobs name the JobSet). History of pods long gone stays in Prometheus.
KSM_POD_OWNER = "kube_pod_owner"
KSM_JOB_OWNER = "kube_job_owner"
KSM_NO_OWNER = "<none>"

# Gpu.last_seen_at is refreshed at most this often: rewriting 50,000 GPU rows every window was
# 0.8 s of PostgreSQL time per window (bench/ingest_pure.py) for a date nobody reads to the minute.
GPU_SEEN_REFRESH_SECONDS = 300
# Node.observed_at ("last seen", written by the API server sync) is refreshed once it is this old,
# not on every sync: comparing it made every sync of the benchmark cluster rewrite all 6,250 node
# rows (bench/RESULTS.md).
NODE_SEEN_REFRESH_SECONDS = 300

# Batch sizes of fleet.inventory and the window writers (core.bulk). On PostgreSQL the DCGM
# window's rows (GPUs, nodes it discovers, allocations, usage) go by binary COPY (into the usage
# table, or into a temporary table followed by one INSERT ... SELECT ... ON CONFLICT), and rows
# are looked up with one `= ANY(array)` parameter; off PostgreSQL one executemany per table.
# COPY replaced bulk_create after a profile of a 10,000-GPU write showed bulk_create's per-value
# SQL compilation taking more than half of it. Timings: bench/ingest_pure.py, bench/RESULTS.md.
# Node rows per INSERT ... ON CONFLICT from the API server sync (bulk_create, ~13 columns): the
# size quotas.constants.WRITE_BATCH_SIZE was measured at, where it was noise next to the
# Python-side work.
NODE_BATCH_SIZE = 1000
# Names or ids per `IN (...)` lookup off PostgreSQL: SQLite's limit is 32,766 variables (3.32+);
# 5,000 keeps each query well under it. On PostgreSQL an IN list of 5,000 placeholders cost more
# client CPU than the query (Django prepares each value: ~0.3 s per 18,000 ids on the 2-core
# benchmark machine), so lookups there send one array instead.
LOOKUP_BATCH_SIZE = 5000

# --- Collector (ledger/collector.py) ------------------------------------------------------------
# PromQL templates, evaluated at a window's end: instant queries for one window, range queries
# with step = window for catch-up and backfill (the value at T describes (T - W, T]).
# `{range}` is the window in milliseconds minus one: Prometheus 2.x range selectors include the
# left edge, so `[59999ms]` at T holds exactly the samples in (T - 60 s, T].
# `{by}` lists the labels ingest reads (GPU identity + pod labels of the cluster's label style);
# aggregating on them drops instance/job/driver labels from 50,000-series answers and merges the
# copies two scrape jobs make of one series.
DCGM_IDENTITY_LABELS: tuple[str, ...] = (
    LABEL_UUID,
    *LABEL_HOSTNAMES,
    LABEL_GPU_INSTANCE_ID,
    LABEL_GPU_INSTANCE_PROFILE,
    LABEL_GPU_INDEX,
    LABEL_MODEL_NAME,
    LABEL_PCI_BUS_ID,
)
PROMQL_DCGM_AVG = "max by ({by}) (avg_over_time({metric}[{range}]))"
PROMQL_DCGM_COUNT = "max by ({by}) (count_over_time({metric}[{range}]))"
# Sample counts (telemetry coverage) are asked for the activity metrics only.
DCGM_COUNT_METRICS: tuple[str, ...] = ACTIVITY_METRICS
# GPUs requested by Running, scheduled pods: max over duplicate kube-state-metrics series (HA
# replicas) per container, summed over containers; node from kube_pod_info (pending: node="").
PROMQL_GPU_REQUESTS = (
    "sum by (namespace, pod, uid, resource) ("
    "max by (namespace, pod, uid, container, resource) ("
    f'{KSM_RESOURCE_REQUESTS}{{resource=~"{KSM_GPU_RESOURCE_REGEX}"}}))'
    " * on (namespace, pod, uid) group_left (node) "
    f'max by (namespace, pod, uid, node) ({KSM_POD_INFO}{{node!=""}})'
    " * on (namespace, pod, uid) group_left () "
    f'max by (namespace, pod, uid) ({KSM_POD_STATUS_PHASE}{{phase="{KSM_PHASE_RUNNING}"}} == 1)'
)
# Kueue queue labels of the pods that request GPUs (not of every pod in the cluster).
PROMQL_POD_LABELS = (
    "max by (namespace, pod, uid, "
    f"{KSM_LABEL_CLUSTER_QUEUE}, {KSM_LABEL_LOCAL_QUEUE}, {KSM_LABEL_QUEUE_NAME}, "
    f"{KSM_LABEL_POD_GROUP}) ("
    f"{KSM_POD_LABELS} and on (namespace, pod, uid) "
    f'{KSM_RESOURCE_REQUESTS}{{resource=~"{KSM_GPU_RESOURCE_REGEX}"}})'
)
# Owners of the pods that request GPUs (pod -> Job / JobSet child Job / RayCluster / ...), and
# the owners of those Jobs (JobSet): how a pod long gone is joined to its Workload.
_GPU_PODS = f'{KSM_RESOURCE_REQUESTS}{{resource=~"{KSM_GPU_RESOURCE_REGEX}"}}'
# kube_pod_info{created_by_kind, created_by_name} stands in where kube_pod_owner is missing
# (not scraped, or dropped by a relabelling).
PROMQL_POD_OWNERS = (
    "max by (namespace, pod, uid, owner_kind, owner_name) (("
    f'{KSM_POD_OWNER}{{owner_is_controller="true"}} or '
    "label_replace(label_replace("
    f'{KSM_POD_INFO}{{created_by_kind!~"{KSM_NO_OWNER}|"}}, '
    '"owner_kind", "$1", "created_by_kind", "(.+)"), '
    '"owner_name", "$1", "created_by_name", "(.+)")'
    f") and on (namespace, pod, uid) {_GPU_PODS})"
)
# The PodGroup annotations of the pods that request GPUs: how a Volcano or KAI pod long gone is
# joined to the Workload its PodGroup became (quotas/sources).
PROMQL_POD_GROUPS = (
    f"max by (namespace, pod, uid, {', '.join(KSM_POD_GROUP_ANNOTATIONS)}) ("
    f"{KSM_POD_ANNOTATIONS} and on (namespace, pod, uid) {_GPU_PODS})"
)
PROMQL_JOB_OWNERS = (
    "max by (namespace, job_name, owner_kind, owner_name) ("
    f'{KSM_JOB_OWNER}{{owner_kind!="{KSM_NO_OWNER}"}} and on (namespace, job_name) '
    "label_replace(max by (namespace, owner_name) ("
    f'{KSM_POD_OWNER}{{owner_kind="Job"}} and on (namespace, pod, uid) {_GPU_PODS}), '
    '"job_name", "$1", "owner_name", "(.+)"))'
)
# Seconds a window must be over before it is collected: samples carry the scrape's start time
# and land in Prometheus after the scrape (and after remote-write to Thanos/Mimir).
COLLECT_DELAY_SECONDS = 30
# Queries of one window in flight at once: Prometheus evaluates them on its own cores while we
# decode the previous answer: 4 at a time took 19.3 s against 28.2 s one by one for a
# 50,000-GPU window on the shared 2-core machine (bench/RESULTS.md).
QUERY_CONCURRENCY = 4
# Catch-up/backfill range queries: points per answer bound memory (250,000 gave 40-window
# chunks and 914 MiB peak RSS at 5,000 GPUs, see bench/RESULTS.md), and Prometheus refuses
# more than 11,000 points per series.
RANGE_POINTS_PER_QUERY = 100_000
RANGE_MAX_POINTS_PER_SERIES = 10_000
