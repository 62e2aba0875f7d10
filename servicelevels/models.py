from __future__ import annotations

from django.db import models

from servicelevels.choices import (
    EvictionReason,
    MetricsScope,
    PreemptionReason,
    RecordSource,
    SloStatistic,
)


class AdmissionRecord(models.Model):
    """One admission of a Workload: queued, quota reserved, admitted, running, evicted.

    ``attempt`` 1 is the first admission; each eviction and requeue starts the next attempt, whose
    ``queued_at`` is the requeue (Kueue's definition of the wait: "created or requeued until
    admission"). Times stay null until they happen; a record whose ``admitted_at`` is null is a
    workload still waiting. The names beside the foreign keys keep the record readable after the
    queue or the workload is gone.
    """

    cluster = models.ForeignKey(
        "fleet.Cluster",
        related_name="admission_records",
        on_delete=models.CASCADE,
    )
    workload = models.ForeignKey(
        "quotas.Workload",
        related_name="admission_records",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    workload_uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=253)
    workload_name = models.CharField(max_length=253)
    attempt = models.PositiveSmallIntegerField(default=1, help_text="1 = the first admission.")
    cluster_queue = models.ForeignKey(
        "quotas.ClusterQueue",
        related_name="admission_records",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    cluster_queue_name = models.CharField(max_length=253, blank=True)
    local_queue = models.ForeignKey(
        "quotas.LocalQueue",
        related_name="admission_records",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    local_queue_name = models.CharField(max_length=253, blank=True)
    team = models.ForeignKey(
        "quotas.Team",
        related_name="admission_records",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    cohort_name = models.CharField(
        max_length=253, blank=True, help_text="The ClusterQueue's cohort when it was admitted."
    )
    priority_class_name = models.CharField(max_length=253, blank=True)
    priority = models.IntegerField(default=0)
    gpus = models.FloatField(default=0.0, help_text="GPU-equivalents requested (MIG at slices/7).")
    queued_at = models.DateTimeField(help_text="Created (attempt 1) or requeued after an eviction.")
    quota_reserved_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    running_at = models.DateTimeField(
        null=True, blank=True, help_text="The first pod of this admission Running."
    )
    evicted_at = models.DateTimeField(null=True, blank=True)
    eviction_reason = models.CharField(max_length=64, choices=EvictionReason.choices, blank=True)
    preemption_reason = models.CharField(
        max_length=64, choices=PreemptionReason.choices, blank=True
    )
    preempted_by = models.ForeignKey(
        "quotas.Workload",
        related_name="preemptions_made",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    preempted_by_path = models.CharField(
        max_length=500, blank=True, help_text="The preemptor as namespace/name, kept if it is gone."
    )
    preempting_cluster_queue_name = models.CharField(max_length=253, blank=True)
    finished_at = models.DateTimeField(
        null=True, blank=True, help_text="The workload finished in this admission."
    )
    source = models.CharField(
        max_length=16, choices=RecordSource.choices, default=RecordSource.LIVE
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "namespace", "workload_name", "attempt"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "workload_uid", "attempt"],
                name="servicelevels_admission_once",
            ),
        ]
        indexes = [
            models.Index(fields=["admitted_at"], name="servicelevels_admitted_at"),
            models.Index(
                fields=["cluster_queue", "admitted_at"], name="servicelevels_queue_admitted"
            ),
            models.Index(fields=["team", "admitted_at"], name="servicelevels_team_admitted"),
            models.Index(fields=["evicted_at"], name="servicelevels_evicted_at"),
            # A page of the queue levels by ClusterQueue or LocalQueue reads the records of its
            # own groups only (servicelevels.figures._GroupReader: the group columns IN the
            # page's values); also the admissions API's and the objectives' one-queue reads.
            models.Index(fields=["cluster", "cluster_queue_name"], name="servicelevels_queue_name"),
            models.Index(
                fields=["cluster", "namespace", "local_queue_name"],
                name="servicelevels_local_queue_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.workload_name} #{self.attempt}"

    @property
    def workload_path(self) -> str:
        return f"{self.namespace}/{self.workload_name}"

    @property
    def wait_seconds(self) -> float | None:
        """Queued until admitted; None while the workload waits."""
        if self.admitted_at is None:
            return None
        return max((self.admitted_at - self.queued_at).total_seconds(), 0.0)

    @property
    def running_delay_seconds(self) -> float | None:
        """Admitted until the first pod Running; None until both happened."""
        if self.admitted_at is None or self.running_at is None:
            return None
        return max((self.running_at - self.admitted_at).total_seconds(), 0.0)


class QueueSLO(models.Model):
    """An admin's wait objective for one ClusterQueue, judged per day: e.g. p95 wait <= 30 min."""

    cluster_queue = models.OneToOneField(
        "quotas.ClusterQueue",
        related_name="slo",
        on_delete=models.CASCADE,
    )
    statistic = models.CharField(
        max_length=8, choices=SloStatistic.choices, default=SloStatistic.P95
    )
    max_wait_seconds = models.PositiveIntegerField(
        help_text="The statistic of a day's waits must stay at or under this."
    )
    min_admissions = models.PositiveIntegerField(
        default=1, help_text="Days with fewer admissions are not judged."
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "queue service-level objective"

    def __str__(self) -> str:
        return f"{self.cluster_queue}: {self.statistic} wait <= {self.max_wait_seconds} s"


class QueueMetricsHour(models.Model):
    """One hour of one queue as Kueue's own metrics tell it: the hours before the records.

    Read from Prometheus per UTC hour ``(hour, hour + 1h]``: ``admissions`` from
    ``kueue_admitted_workloads_total`` (a LocalQueue: its wait histogram's count), the wait
    percentiles from ``histogram_quantile`` of ``kueue_admission_wait_time_seconds`` (a LocalQueue:
    ``kueue_local_queue_admission_wait_time_seconds``), so they have the buckets' resolution;
    ``wait_buckets`` keeps the hour's bucket counts (upper bound -> cumulative count) so longer
    periods and groups of queues are computed from summed buckets. ``evictions`` from
    ``kueue_evicted_workloads_total`` by reason; ``preemptions_made`` from
    ``kueue_preempted_workloads_total``, which counts by the *preempting* queue.
    Counters are ``increase()`` over the hour, rounded to whole workloads.
    """

    cluster = models.ForeignKey(
        "fleet.Cluster", related_name="queue_metrics_hours", on_delete=models.CASCADE
    )
    scope = models.CharField(max_length=16, choices=MetricsScope.choices)
    name = models.CharField(
        max_length=507, help_text="The ClusterQueue, or the LocalQueue as namespace/name."
    )
    hour = models.DateTimeField(help_text="Start of the UTC hour; the hour is (hour, hour + 1h].")
    admissions = models.PositiveIntegerField(default=0)
    wait_seconds_p50 = models.FloatField(null=True, blank=True)
    wait_seconds_p90 = models.FloatField(null=True, blank=True)
    wait_seconds_p95 = models.FloatField(null=True, blank=True)
    wait_seconds_mean = models.FloatField(null=True, blank=True)
    wait_seconds_sum = models.FloatField(default=0.0)
    wait_count = models.FloatField(default=0.0)
    wait_buckets = models.JSONField(default=dict, blank=True)
    evictions = models.JSONField(default=dict, blank=True)
    preemptions_made = models.JSONField(
        default=dict, blank=True, help_text="{reason: n} of workloads this queue preempted."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "scope", "name", "hour"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "scope", "name", "hour"], name="servicelevels_metrics_hour"
            ),
        ]
        indexes = [models.Index(fields=["cluster", "hour"], name="servicelevels_metrics_at")]

    def __str__(self) -> str:
        return f"{self.scope} {self.name} @ {self.hour:%Y-%m-%d %H:00}"
