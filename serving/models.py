"""Serving workloads and their hourly figures from the inference servers' own metrics
(README "Serving: metrics", docs/architecture.md "Serving")."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from fleet.models import Cluster
from serving.choices import CollectionStatus, ServerKind
from serving.knee import Targets


class ServingWorkload(models.Model):
    """An inference deployment: the Deployment, LeaderWorkerSet, StatefulSet or KServe
    InferenceService whose pods expose a server's metrics (``serving.ingest``)."""

    cluster = models.ForeignKey(
        Cluster,
        related_name="serving_workloads",
        on_delete=models.CASCADE,
    )
    namespace = models.CharField(max_length=253)
    kind = models.CharField(
        max_length=100,
        help_text="Deployment, LeaderWorkerSet, StatefulSet, InferenceService, ... or Pod.",
    )
    name = models.CharField(max_length=253)
    ttft_p95_target_seconds = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text="Time to first token, 95th percentile, that an hour must stay within to count "
        "for the knee; empty = GPULEDGER_SERVING_TTFT_P95_SECONDS.",
    )
    itl_p95_target_seconds = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text="Inter-token latency, 95th percentile, that an hour must stay within to count "
        "for the knee; empty = GPULEDGER_SERVING_ITL_P95_SECONDS.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "namespace", "kind", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "kind", "name"],
                name="serving_servingworkload_identity",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"

    def targets(self) -> Targets:
        """The latency targets its knee is judged by: its own, else the settings' defaults."""
        return Targets(
            ttft_p95_seconds=_or_default(
                self.ttft_p95_target_seconds, settings.GPULEDGER_SERVING_TTFT_P95_SECONDS
            ),
            itl_p95_seconds=_or_default(
                self.itl_p95_target_seconds, settings.GPULEDGER_SERVING_ITL_P95_SECONDS
            ),
        )


def _or_default(own: float | None, default: float) -> float | None:
    """``own`` if set; else ``default``, where a default of 0 or less judges nothing (None)."""
    if own is not None:
        return own
    return default if default > 0 else None


class ServingHour(models.Model):
    """One serving workload's figures for one UTC hour. A figure its servers do not expose is
    NULL (no serving telemetry), never 0; an hour without any telemetry has no row."""

    workload = models.ForeignKey(
        ServingWorkload,
        related_name="hours",
        on_delete=models.CASCADE,
    )
    cluster = models.ForeignKey(
        Cluster,
        related_name="serving_hours",
        on_delete=models.CASCADE,
    )
    hour = models.DateTimeField(help_text="Start of the UTC hour.")
    server_kind = models.CharField(max_length=20, choices=ServerKind.choices)
    replicas_seen = models.PositiveIntegerField(help_text="Pods with serving telemetry.")
    replica_hours = models.FloatField(help_text="Σ of the pods' telemetry coverage (0-1 each).")
    seconds_with_data = models.PositiveIntegerField(
        help_text="Seconds of the hour the best-covered replica had telemetry."
    )
    gpu_hours = models.FloatField(
        null=True,
        blank=True,
        help_text="Σ GPUs requested x coverage (MIG at N/7); NULL without GPU requests.",
    )
    active_gpu_hours = models.FloatField(
        null=True,
        blank=True,
        help_text=(
            "Σ activity (SM_ACTIVE) x GPU-hours of the workload's own pods' GPUs in the hour, "
            "from the per-window usage; NULL when no usage window names its pods."
        ),
    )
    telemetry_gpu_hours = models.FloatField(
        null=True,
        blank=True,
        help_text="GPU-hours of its pods' GPUs with DCGM telemetry, the divisor of SM_ACTIVE.",
    )
    requests_per_second = models.FloatField(null=True, blank=True)
    prompt_tokens_per_second = models.FloatField(null=True, blank=True)
    output_tokens_per_second = models.FloatField(null=True, blank=True)
    mean_running = models.FloatField(
        null=True,
        blank=True,
        help_text="Time-averaged running requests, summed over replicas (concurrency).",
    )
    mean_waiting = models.FloatField(
        null=True,
        blank=True,
        help_text="Time-averaged waiting requests, summed over replicas.",
    )
    kv_cache_mean = models.FloatField(null=True, blank=True, help_text="0-1, replica-time mean.")
    kv_cache_max = models.FloatField(null=True, blank=True, help_text="0-1, highest sample.")
    ttft_p50_seconds = models.FloatField(null=True, blank=True)
    ttft_p95_seconds = models.FloatField(null=True, blank=True)
    itl_p50_seconds = models.FloatField(null=True, blank=True)
    itl_p95_seconds = models.FloatField(null=True, blank=True)
    e2e_p95_seconds = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "hour", "workload"]
        constraints = [
            models.UniqueConstraint(
                fields=["workload", "hour"],
                name="serving_servinghour_workload_hour",
            ),
        ]
        indexes = [
            # Re-collecting an hour replaces the cluster's rows of that hour; pages list a
            # cluster's serving workloads over a range of hours.
            models.Index(fields=["cluster", "hour"], name="serving_hour_cluster_hour"),
        ]

    def __str__(self) -> str:
        return f"{self.workload} @ {self.hour.isoformat()}"


class ServingCollection(models.Model):
    """Bookkeeping of one cluster-hour's serving collection: which hours are done, and why
    one failed."""

    cluster = models.ForeignKey(
        Cluster,
        related_name="serving_collections",
        on_delete=models.CASCADE,
    )
    hour = models.DateTimeField(help_text="Start of the UTC hour.")
    status = models.CharField(max_length=20, choices=CollectionStatus.choices)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    records_read = models.PositiveIntegerField(default=0)
    rows_written = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    skip_reasons = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["cluster", "-hour"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "hour"],
                name="serving_servingcollection_cluster_hour",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster} {self.hour.isoformat()} {self.status}"
