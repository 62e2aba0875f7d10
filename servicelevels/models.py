from __future__ import annotations

from django.db import models

from servicelevels.choices import EvictionReason, PreemptionReason, RecordSource, SloStatistic


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
