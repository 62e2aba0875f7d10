"""Clusters, nodes, GPUs, per-window GPU usage, hourly rollups and ingest bookkeeping."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.mig import MIG_COMPUTE_SLICES
from fleet.choices import (
    IngestSource,
    IngestStatus,
    PodLabelStyle,
    PrometheusAuth,
    QuotaSource,
)
from fleet.secrets import validate_secret_env_name


class ClusterQuerySet(models.QuerySet["Cluster"]):
    def ensure_from_settings(self) -> Cluster | None:
        """The cluster named by GPULEDGER_CLUSTER_NAME, created from the environment on first use.

        A single-cluster install needs no admin step: PROMETHEUS_URL and/or KUBECONFIG (with
        GPULEDGER_KUBE_CONTEXT) or GPULEDGER_KUBE_IN_CLUSTER (the pod's service account) describe
        it. Once the row exists, the admin owns it: the
        environment never overwrites what was edited there. Returns None when neither is set.
        """
        in_cluster = settings.GPULEDGER_KUBE_IN_CLUSTER
        if not settings.PROMETHEUS_URL and not settings.KUBECONFIG and not in_cluster:
            return None
        cluster, _ = self.get_or_create(
            name=settings.GPULEDGER_CLUSTER_NAME,
            defaults={
                "prometheus_url": settings.PROMETHEUS_URL,
                "prometheus_timeout_seconds": settings.PROMETHEUS_TIMEOUT_SECONDS,
                "kube_context": settings.GPULEDGER_KUBE_CONTEXT,
                "kube_in_cluster": in_cluster,
                "collect_enabled": bool(settings.PROMETHEUS_URL),
                "sync_enabled": bool(settings.KUBECONFIG) or in_cluster,
            },
        )
        return cluster

    def unnamed(self) -> Cluster:
        """The cluster a management command means when given no ``--cluster``.

        The environment's cluster is made first (``ensure_from_settings``, as the Celery tasks
        do); then the only cluster there is. With several the caller must name one, and
        ``ClusterChoiceError`` says so and lists them; with none it says what to set.
        """
        self.ensure_from_settings()
        names = list(self.order_by("name").values_list("name", flat=True)[:6])
        if len(names) > 1:
            listed = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise ClusterChoiceError(
                f"there are several clusters ({listed}); name one with --cluster"
            )
        if not names:
            raise ClusterChoiceError(
                "no cluster yet: set PROMETHEUS_URL and/or KUBECONFIG (the single-cluster "
                "install), or name one with --cluster"
            )
        return self.get(name=names[0])


class ClusterChoiceError(Exception):
    """A command given no ``--cluster`` cannot tell which cluster it is meant for."""


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
        validators=[validate_secret_env_name],
        help_text=(
            "Name of the environment variable that holds the bearer token or basic-auth password, "
            "starting with GPULEDGER_SECRET_ (secrets stay out of the database; NAME_FILE is "
            "read too)."
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
    quota_source = models.CharField(
        max_length=16,
        choices=QuotaSource.choices,
        default=QuotaSource.DETECT,
        # A database default too: rows written by a release older than the column still insert.
        db_default=QuotaSource.DETECT,
        blank=True,
        help_text="Which scheduler's queues the quota sync reads; empty detects it.",
    )
    quota_write_enabled = models.BooleanField(
        default=False,
        help_text=(
            "Let GPU Ledger write quota changes (ClusterQueue and Cohort resourceGroups, "
            "stopPolicy) to this cluster. Needs the patch RBAC of the README; off, the cluster "
            "is read-only and changes are offered as YAML patches."
        ),
    )
    quota_write_gitops_allowed = models.BooleanField(
        default=False,
        help_text=(
            "Also write to queues that Argo CD, Flux or another field manager owns. Such a "
            "write is reverted on their next sync unless the repository changes too."
        ),
    )
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


class CollectionCursorQuerySet(models.QuerySet["CollectionCursor"]):
    """The lease on a (cluster, source) cursor: one holder at a time, taken over once it expires.

    The DCGM collector (``ledger.collector``) and the Kueue sync (``quotas.sync``) both hold it
    while they work, so two workers never collect the same window or sync the same cluster.
    """

    def held_by(self, cluster: Cluster, source: str, holder: str) -> CollectionCursorQuerySet:
        """The (cluster, source) cursor while ``holder`` holds its lease; empty once it does not."""
        return self.filter(cluster=cluster, source=source, claimed_by=holder)

    def claim(
        self, cluster: Cluster, source: str, holder: str, *, until: datetime, now: datetime
    ) -> bool:
        """Lease the (cluster, source) cursor to ``holder`` until ``until``; True when it holds it.

        The lease is taken when it is free, expired at ``now`` or already ``holder``'s (which
        renews it), by a conditional UPDATE whose row count is checked: of two
        workers claiming at once, exactly one wins. The cursor row is created on first use.
        """
        cursor, _ = self.get_or_create(cluster=cluster, source=source)
        free = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now) | Q(claimed_by=holder)
        taken = (
            self.filter(pk=cursor.pk).filter(free).update(claimed_by=holder, claimed_until=until)
        )
        return taken == 1

    def extend(self, cluster: Cluster, source: str, holder: str, *, until: datetime) -> bool:
        """Renew ``holder``'s lease until ``until``; False when another worker has taken it."""
        return self.held_by(cluster, source, holder).update(claimed_until=until) == 1

    def release(
        self,
        cluster: Cluster,
        source: str,
        holder: str,
        *,
        last_window_end: datetime | None = None,
    ) -> None:
        """Give up ``holder``'s lease, moving the cursor to ``last_window_end`` when given.

        Nothing changes when the lease is no longer ``holder``'s.
        """
        values: dict[str, Any] = {"claimed_by": "", "claimed_until": None}
        if last_window_end is not None:
            values["last_window_end"] = last_window_end
        self.held_by(cluster, source, holder).update(**values)


class CollectionCursor(models.Model):
    """The last complete window collected per (cluster, source), and who is collecting now.

    Workers lease the cursor through ``CollectionCursor.objects.claim`` / ``extend`` /
    ``release``: conditional UPDATEs on ``claimed_by`` / ``claimed_until`` whose row counts are
    checked, so two workers never collect the same window.
    """

    cluster = models.ForeignKey(Cluster, related_name="cursors", on_delete=models.CASCADE)
    source = models.CharField(max_length=20, choices=IngestSource.choices)
    last_window_end = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = CollectionCursorQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "source"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "source"], name="fleet_cursor_source"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster} {self.source} → {self.last_window_end}"
