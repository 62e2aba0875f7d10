"""Clusters, nodes, GPUs, per-window GPU usage, hourly rollups and ingest bookkeeping."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q

from core import figures
from core.mig import MIG_COMPUTE_SLICES
from fleet.choices import (
    ActivitySource,
    IngestSource,
    IngestStatus,
    PodLabelStyle,
    PrometheusAuth,
    RollupScope,
)


class ClusterQuerySet(models.QuerySet["Cluster"]):
    def ensure_from_settings(self) -> Cluster | None:
        """The cluster named by GPULEDGER_CLUSTER_NAME, created from the environment on first use.

        A single-cluster install needs no admin step: PROMETHEUS_URL and/or KUBECONFIG (with
        GPULEDGER_KUBE_CONTEXT) describe it. Once the row exists, the admin owns it: the
        environment never overwrites what was edited there. Returns None when neither is set.
        """
        if not settings.PROMETHEUS_URL and not settings.KUBECONFIG:
            return None
        cluster, _ = self.get_or_create(
            name=settings.GPULEDGER_CLUSTER_NAME,
            defaults={
                "prometheus_url": settings.PROMETHEUS_URL,
                "prometheus_timeout_seconds": settings.PROMETHEUS_TIMEOUT_SECONDS,
                "kube_context": settings.GPULEDGER_KUBE_CONTEXT,
                "collect_enabled": bool(settings.PROMETHEUS_URL),
                "sync_enabled": bool(settings.KUBECONFIG),
            },
        )
        return cluster


class Cluster(models.Model):
    """A Kubernetes cluster with its Prometheus (DCGM, kube-state-metrics) and its API server."""

    name = models.SlugField(
        max_length=63,
        unique=True,
        help_text="Short stable name, used in URLs, API filters and Celery queues.",
    )
    display_name = models.CharField(max_length=200, blank=True)
    prometheus_url = models.URLField(
        blank=True,
        help_text="Base URL of a Prometheus-API-compatible server (Prometheus, Thanos, Mimir).",
    )
    prometheus_auth = models.CharField(
        max_length=16,
        choices=PrometheusAuth.choices,
        default=PrometheusAuth.NONE,
    )
    prometheus_username = models.CharField(max_length=200, blank=True)
    prometheus_secret_env = models.CharField(
        max_length=200,
        blank=True,
        help_text=(
            "Name of the environment variable that holds the bearer token or basic-auth password "
            "(secrets stay out of the database; NAME_FILE is read too)."
        ),
    )
    prometheus_ca_bundle = models.CharField(
        max_length=500,
        blank=True,
        help_text="Path to a CA bundle for TLS verification; empty uses the system store.",
    )
    prometheus_verify_tls = models.BooleanField(default=True)
    prometheus_headers = models.JSONField(
        default=dict,
        blank=True,
        help_text='Extra HTTP headers, e.g. {"X-Scope-OrgID": "gpu"} for Mimir.',
    )
    prometheus_timeout_seconds = models.FloatField(default=30.0)
    pod_label_style = models.CharField(
        max_length=16,
        choices=PodLabelStyle.choices,
        default=PodLabelStyle.AUTO,
        help_text="Which DCGM labels name the workload pod.",
    )
    kube_context = models.CharField(
        max_length=200,
        blank=True,
        help_text="kubeconfig context for this cluster; empty uses the current context.",
    )
    kube_in_cluster = models.BooleanField(
        default=False,
        help_text="Use the pod's service account instead of a kubeconfig.",
    )
    collect_enabled = models.BooleanField(default=True)
    sync_enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ClusterQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.display_name or self.name


class NodeQuerySet(models.QuerySet["Node"]):
    def present(self) -> NodeQuerySet:
        return self.filter(deleted_at__isnull=True)


class Node(models.Model):
    """A Kubernetes node that carries GPUs."""

    cluster = models.ForeignKey(Cluster, related_name="nodes", on_delete=models.CASCADE)
    name = models.CharField(max_length=253)
    gpu_product = models.CharField(
        max_length=200,
        blank=True,
        help_text="nvidia.com/gpu.product label, or the DCGM modelName.",
    )
    node_pool = models.CharField(max_length=200, blank=True)
    flavor = models.CharField(
        max_length=253,
        blank=True,
        help_text="ResourceFlavor whose nodeLabels match this node.",
    )
    gpu_capacity = models.PositiveIntegerField(default=0, help_text="nvidia.com/gpu capacity.")
    gpu_allocatable = models.PositiveIntegerField(default=0)
    mig_allocatable = models.JSONField(
        default=dict,
        blank=True,
        help_text='MIG resources allocatable, e.g. {"nvidia.com/mig-1g.10gb": 7}.',
    )
    labels = models.JSONField(default=dict, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the node disappeared from a complete LIST; kept for history.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="fleet_node_cluster_name"),
        ]

    def __str__(self) -> str:
        return self.name


class GpuQuerySet(models.QuerySet["Gpu"]):
    def physical(self) -> GpuQuerySet:
        """Whole GPUs and MIG instances; what capacity is counted on."""
        return self.filter(retired_at__isnull=True)


class Gpu(models.Model):
    """A GPU, or a MIG GPU instance of one, as dcgm-exporter identifies it.

    Identity is (cluster, host, UUID, GPU_I_ID): on MIG the UUID is the parent GPU's, so the GPU
    instance id is part of the key. ``gi_id`` is empty for a whole GPU.
    """

    cluster = models.ForeignKey(Cluster, related_name="gpus", on_delete=models.CASCADE)
    node = models.ForeignKey(
        Node,
        related_name="gpus",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    host = models.CharField(max_length=253, help_text="Hostname / hostname label of the series.")
    uuid = models.CharField(max_length=64)
    gi_id = models.CharField(
        max_length=8,
        blank=True,
        default="",
        help_text="MIG GPU instance id (GPU_I_ID); empty for a whole GPU.",
    )
    index = models.PositiveSmallIntegerField(default=0, help_text="The `gpu` label.")
    model_name = models.CharField(max_length=200, blank=True)
    pci_bus_id = models.CharField(max_length=32, blank=True)
    mig_profile = models.CharField(max_length=32, blank=True, help_text="e.g. 3g.40gb")
    slices = models.PositiveSmallIntegerField(
        default=MIG_COMPUTE_SLICES,
        help_text="Compute slices out of 7; a whole GPU has all 7.",
    )
    time_sliced = models.BooleanField(
        default=False,
        help_text="Seen with several pods at once (time-slicing); hours are split between them.",
    )
    first_seen_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = GpuQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "host", "index", "gi_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "host", "uuid", "gi_id"],
                name="fleet_gpu_identity",
            ),
        ]
        indexes = [
            # Fleet map and node page: the GPUs of one node in order.
            models.Index(fields=["node", "index"], name="fleet_gpu_node_index"),
        ]

    def __str__(self) -> str:
        suffix = f" GI {self.gi_id} ({self.mig_profile})" if self.gi_id else ""
        return f"{self.host} gpu{self.index}{suffix}"

    @property
    def fraction(self) -> float:
        """How much of a physical GPU this is: 1 for a whole GPU, N/7 for a MIG `Ng` instance."""
        return self.slices / MIG_COMPUTE_SLICES

    @property
    def key(self) -> str:
        return gpu_key(self.host, self.uuid, self.gi_id)


def gpu_key(host: str, uuid: str, gi_id: str) -> str:
    """The string form of a GPU identity, used in per-window usage keys."""
    return f"{host}/{uuid}/{gi_id}"


class Allocation(models.Model):
    """A pod holding GPUs: pod ↔ GPUs ↔ workload, from when it ran to when it ended."""

    cluster = models.ForeignKey(Cluster, related_name="allocations", on_delete=models.CASCADE)
    namespace = models.CharField(max_length=253)
    pod = models.CharField(max_length=253)
    pod_uid = models.CharField(max_length=64, blank=True)
    node = models.ForeignKey(
        Node,
        related_name="allocations",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    node_name = models.CharField(max_length=253, blank=True)
    resource = models.CharField(
        max_length=100,
        default="nvidia.com/gpu",
        help_text="nvidia.com/gpu or nvidia.com/mig-<profile>.",
    )
    gpus = models.FloatField(help_text="GPUs held, MIG instances as slices/7.")
    gpu_devices = models.ManyToManyField(Gpu, related_name="allocations", blank=True)
    workload = models.ForeignKey(
        "quotas.Workload",
        related_name="allocations",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=(
            "End of the newest collection window the pod was seen in; re-collecting an older "
            "window never closes or reopens what a newer one saw."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "namespace", "pod"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "pod", "pod_uid"],
                name="fleet_allocation_pod",
            ),
        ]
        indexes = [
            # Workload page: the pods and GPUs a workload held.
            models.Index(fields=["workload", "started_at"], name="fleet_alloc_workload"),
            # Open allocations per cluster (live holdings).
            models.Index(
                fields=["cluster"],
                condition=Q(ended_at__isnull=True),
                name="fleet_alloc_open",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod}"


class GpuUsageQuerySet(models.QuerySet["GpuUsage"]):
    def allocated(self) -> GpuUsageQuerySet:
        return self.filter(allocated=True)

    def with_telemetry(self) -> GpuUsageQuerySet:
        return self.filter(activity__isnull=False)

    def idle(self, threshold: float | None = None) -> GpuUsageQuerySet:
        """Allocated GPU-windows with telemetry whose activity is below the idle threshold."""
        limit = settings.GPULEDGER_IDLE_THRESHOLD if threshold is None else threshold
        return self.allocated().filter(activity__lt=limit)

    def in_window(self, start: datetime, end: datetime) -> GpuUsageQuerySet:
        return self.filter(window_end__gt=start, window_end__lte=end)


class GpuUsage(models.Model):
    """One GPU (or one pod's share of it) over one collection window.

    Rows for allocated GPUs without any DCGM series have ``gpu`` empty and ``activity`` null:
    "no data", never idle. Unallocated GPUs have rows too, so capacity is exact per window.

    The foreign keys have no database constraint (``db_constraint=False``). This is the
    high-volume fact table (50,000 rows a window per 50,000-GPU cluster), and PostgreSQL's
    deferred checks of six foreign keys per row cost ~0.4 s at each window's commit, nearly
    as much as the COPY of the rows itself (bench/ingest_pure.py). Integrity is kept by the
    only writer, ``fleet.store.write_window``, which takes every id from the database in the
    same transaction, and by Django, which still applies ``on_delete`` (CASCADE, SET_NULL)
    when the referenced rows are deleted through the ORM. The indexes remain. Trade-off: a
    delete that bypasses the ORM (raw SQL, ``_raw_delete``), or an ORM delete of a workload,
    queue or team that commits while a window referencing it is being written, leaves a
    dangling id here instead of failing the write (the id then matches no row: joins lose the
    owner, and reading the relation on an instance raises ``DoesNotExist``).
    """

    cluster = models.ForeignKey(
        Cluster,
        related_name="usage",
        on_delete=models.CASCADE,
        db_constraint=False,
    )
    window_start = models.DateTimeField()
    window_end = models.DateTimeField(help_text="A window is (start, end]; samples end it.")
    gpu = models.ForeignKey(
        Gpu,
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        db_constraint=False,
    )
    gpu_key = models.CharField(
        max_length=400,
        help_text="host/UUID/GPU_I_ID, or empty for allocated GPUs with no DCGM series.",
    )
    namespace = models.CharField(max_length=253, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    container = models.CharField(max_length=253, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    flavor = models.CharField(max_length=253, blank=True)
    gpu_model = models.CharField(max_length=200, blank=True)
    workload = models.ForeignKey(
        "quotas.Workload",
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    local_queue = models.ForeignKey(
        "quotas.LocalQueue",
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    cluster_queue = models.ForeignKey(
        "quotas.ClusterQueue",
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    team = models.ForeignKey(
        "quotas.Team",
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    allocated = models.BooleanField(help_text="Held by a running pod in this window.")
    gpus = models.FloatField(
        help_text=(
            "GPUs this row stands for: 1 per whole GPU, slices/7 per MIG instance, divided by "
            "the pods sharing a time-sliced GPU; N for N allocated GPUs without telemetry."
        ),
    )
    capacity_gpus = models.FloatField(
        default=0.0,
        help_text="Physical capacity this row carries (0 on the extra rows of a shared GPU).",
    )
    shared = models.BooleanField(default=False, help_text="Time-sliced between several pods.")
    sm_active = models.FloatField(null=True, blank=True)
    pipe_tensor_active = models.FloatField(null=True, blank=True)
    dram_active = models.FloatField(null=True, blank=True)
    gr_engine_active = models.FloatField(null=True, blank=True)
    gpu_util = models.FloatField(null=True, blank=True, help_text="DCGM_FI_DEV_GPU_UTIL, 0-100.")
    fb_used_mib = models.FloatField(null=True, blank=True)
    activity = models.FloatField(
        null=True,
        blank=True,
        help_text="SM_ACTIVE, else GR_ENGINE_ACTIVE; null = no telemetry.",
    )
    activity_source = models.CharField(
        max_length=20,
        choices=ActivitySource.choices,
        default=ActivitySource.NONE,
    )
    samples = models.PositiveIntegerField(default=0, help_text="Activity samples in the window.")
    expected_samples = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = GpuUsageQuerySet.as_manager()

    class Meta:
        ordering = ["-window_end", "gpu_key", "namespace", "pod"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "window_end", "gpu_key", "namespace", "pod"],
                name="fleet_gpuusage_window_gpu_pod",
            ),
        ]
        indexes = [
            # Rollup of one hour: all rows of a cluster in (hour, hour + 1h].
            models.Index(fields=["cluster", "window_end"], name="fleet_usage_cluster_window"),
            # Workload page and idle-workload alerts: one workload's recent windows.
            models.Index(fields=["workload", "window_end"], name="fleet_usage_workload_window"),
            # GPU page: one GPU over time.
            models.Index(fields=["gpu", "window_end"], name="fleet_usage_gpu_window"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_key or 'no-telemetry'} {self.namespace}/{self.pod} @ {self.window_end}"


class HourlyRollupQuerySet(models.QuerySet["HourlyRollup"]):
    def for_scope(self, scope: str) -> HourlyRollupQuerySet:
        return self.filter(scope=scope)

    def between(self, start: datetime, end: datetime) -> HourlyRollupQuerySet:
        return self.filter(hour__gte=start, hour__lt=end)


class HourlyRollup(models.Model):
    """Every figure of DESIGN "Figures" for one group, one hour, one flavor / GPU model.

    ``key`` is the group's natural name (team name, ``namespace/name`` for namespaced objects,
    node name, cluster name for the fleet); the optional foreign keys let pages join cheaply.
    """

    cluster = models.ForeignKey(Cluster, related_name="rollups", on_delete=models.CASCADE)
    scope = models.CharField(max_length=20, choices=RollupScope.choices)
    key = models.CharField(max_length=520)
    hour = models.DateTimeField(help_text="Start of the hour (UTC).")
    flavor = models.CharField(max_length=253, blank=True)
    gpu_model = models.CharField(max_length=200, blank=True)
    team = models.ForeignKey(
        "quotas.Team",
        related_name="rollups",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    cluster_queue = models.ForeignKey(
        "quotas.ClusterQueue",
        related_name="rollups",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    workload = models.ForeignKey(
        "quotas.Workload",
        related_name="rollups",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    capacity_gpu_hours = models.FloatField(default=0.0)
    allocated_gpu_hours = models.FloatField(default=0.0)
    telemetry_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Allocated GPU-hours that have telemetry.",
    )
    active_gpu_hours = models.FloatField(default=0.0, help_text="Σ activity × GPU-hours.")
    idle_gpu_hours = models.FloatField(default=0.0)
    shared_gpu_hours = models.FloatField(default=0.0)
    fallback_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Telemetry GPU-hours whose activity came from GR_ENGINE_ACTIVE.",
    )
    tensor_active_gpu_hours = models.FloatField(default=0.0)
    tensor_covered_gpu_hours = models.FloatField(default=0.0)
    gpu_util_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Σ GPU_UTIL/100 × GPU-hours, for 'busy but not working'.",
    )
    gpu_util_covered_gpu_hours = models.FloatField(default=0.0)
    busy_not_working_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Allocated GPU-hours with GPU_UTIL high while SM_ACTIVE is low.",
    )
    nominal_gpu_hours = models.FloatField(default=0.0)
    borrowed_gpu_hours = models.FloatField(default=0.0)
    lent_gpu_hours = models.FloatField(default=0.0)
    pending_gpu_hours = models.FloatField(default=0.0)
    peak_allocated_gpus = models.FloatField(default=0.0)
    windows = models.PositiveIntegerField(default=0, help_text="Collection windows rolled in.")
    updated_at = models.DateTimeField(auto_now=True)

    objects = HourlyRollupQuerySet.as_manager()

    class Meta:
        ordering = ["-hour", "scope", "key"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "scope", "key", "hour", "flavor", "gpu_model"],
                name="fleet_rollup_identity",
            ),
        ]
        indexes = [
            # Chargeback and pages: one scope over a time range, grouped by key.
            models.Index(fields=["scope", "hour", "key"], name="fleet_rollup_scope_hour"),
            # Team page: one team's hours.
            models.Index(fields=["team", "scope", "hour"], name="fleet_rollup_team_hour"),
            # ClusterQueue page: one queue's hours.
            models.Index(
                fields=["cluster_queue", "scope", "hour"],
                name="fleet_rollup_cq_hour",
            ),
            # Workload page and workload chargeback.
            models.Index(fields=["workload", "hour"], name="fleet_rollup_workload_hour"),
            # Busy-but-not-working page, per workload over a range (fleet.charts.busy_by_workload):
            # partial (only group-hours that had any) and carrying every summed column, so
            # PostgreSQL answers 30 days of 50,000 workloads with an index-only scan. Plain key
            # columns rather than INCLUDE, which SQLite does not support.
            models.Index(
                fields=[
                    "scope",
                    "hour",
                    "workload",
                    "team",
                    "busy_not_working_gpu_hours",
                    "allocated_gpu_hours",
                    "gpu_util_gpu_hours",
                    "gpu_util_covered_gpu_hours",
                    "active_gpu_hours",
                    "telemetry_gpu_hours",
                    "peak_allocated_gpus",
                ],
                condition=Q(busy_not_working_gpu_hours__gt=0),
                name="fleet_rollup_busy_hour",
            ),
            # Chargeback (quotas.chargeback.aggregate_pieces): one scope over a range, summed
            # per (cluster, key, flavor, GPU model) as an index-only scan, so a year by team
            # reads ~200 MB of index instead of the whole table (bench/RESULTS.md).
            models.Index(
                fields=["scope", "hour"],
                include=[
                    "cluster",
                    "key",
                    "flavor",
                    "gpu_model",
                    "capacity_gpu_hours",
                    "allocated_gpu_hours",
                    "telemetry_gpu_hours",
                    "active_gpu_hours",
                    "idle_gpu_hours",
                    "nominal_gpu_hours",
                    "borrowed_gpu_hours",
                    "lent_gpu_hours",
                    "pending_gpu_hours",
                ],
                name="fleet_rollup_chargeback",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope}:{self.key} {self.hour:%Y-%m-%d %H:00}"

    @property
    def utilization(self) -> float | None:
        return figures.utilization(self.active_gpu_hours, self.telemetry_gpu_hours)

    @property
    def telemetry_coverage(self) -> float | None:
        return figures.telemetry_coverage(self.telemetry_gpu_hours, self.allocated_gpu_hours)


class IngestRunQuerySet(models.QuerySet["IngestRun"]):
    def succeeded(self) -> IngestRunQuerySet:
        return self.filter(status__in=[IngestStatus.SUCCESS, IngestStatus.PARTIAL])


class IngestRun(models.Model):
    """One collection, sync, simulation or rollup run: what it read, wrote, skipped, and why."""

    cluster = models.ForeignKey(
        Cluster,
        related_name="ingest_runs",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
    )
    source = models.CharField(max_length=20, choices=IngestSource.choices)
    status = models.CharField(
        max_length=16,
        choices=IngestStatus.choices,
        default=IngestStatus.RUNNING,
    )
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    records_read = models.PositiveIntegerField(default=0)
    rows_written = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0, help_text="Malformed records skipped.")
    nonfinite_skipped = models.PositiveIntegerField(default=0, help_text="NaN / ±Inf samples.")
    skip_reasons = models.JSONField(default=dict, blank=True, help_text="Reason → count.")
    error = models.TextField(blank=True)

    objects = IngestRunQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            # Freshness banner: the newest run per (cluster, source).
            models.Index(
                fields=["cluster", "source", "-started_at"],
                name="fleet_ingestrun_freshness",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.status} {self.started_at:%Y-%m-%d %H:%M:%S}"


class CollectionCursor(models.Model):
    """The last complete window collected per (cluster, source), and who is collecting now.

    Workers claim the next window with a conditional UPDATE on ``claimed_until`` whose row count
    they check (STYLE rule 11), so two workers never collect the same window.
    """

    cluster = models.ForeignKey(Cluster, related_name="cursors", on_delete=models.CASCADE)
    source = models.CharField(max_length=20, choices=IngestSource.choices)
    last_window_end = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "source"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "source"], name="fleet_cursor_source"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster} {self.source} → {self.last_window_end}"
