"""The audit trail of quota changes: every change GPU Ledger previews, is asked for, applies or
sees made elsewhere. Registered with the ``quotas`` app through ``quotas.models``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from fleet.models import Cluster
from quotas.choices import QuotaChangeSource, QuotaChangeStatus, QuotaTargetKind


class QuotaChangeQuerySet(models.QuerySet["QuotaChange"]):
    def pending_requests(self) -> QuotaChangeQuerySet:
        """Team leads' requests waiting for an admin."""
        return self.filter(status=QuotaChangeStatus.REQUESTED)

    def awaiting_observation(self) -> QuotaChangeQuerySet:
        """Applied changes, and requests approved for GitOps, the sync has not seen yet."""
        return self.filter(
            status__in=[QuotaChangeStatus.APPLIED, QuotaChangeStatus.APPROVED_GITOPS]
        )


class QuotaChange(models.Model):
    """One change of a ClusterQueue's (or Cohort's) quotas or stopPolicy, and what became of it.

    ``before`` / ``after`` are lists of ``{flavor, resource, nominal, borrowing_limit,
    lending_limit}`` with Kubernetes quantity strings (``None`` = unset), for the flavor x
    resource cells the change touches. Rows are written by ``quotas.writeback`` and the sync,
    never edited in the admin.
    """

    cluster = models.ForeignKey(
        Cluster,
        related_name="quota_changes",
        on_delete=models.PROTECT,
    )
    target_kind = models.CharField(
        max_length=16,
        choices=QuotaTargetKind.choices,
        default=QuotaTargetKind.CLUSTER_QUEUE,
    )
    target_name = models.CharField(max_length=253, help_text="The ClusterQueue or Cohort name.")
    target_resource = models.CharField(
        max_length=128,
        blank=True,
        help_text="The object written, as kubectl names it: clusterqueues.kueue.x-k8s.io, "
        "queues.scheduling.volcano.sh or queues.scheduling.run.ai (empty: Kueue's).",
    )
    target_api_version = models.CharField(
        max_length=128,
        blank=True,
        help_text="The apiVersion of the object written (scheduling.volcano.sh/v1beta1, ...).",
    )
    cluster_queue = models.ForeignKey(
        "quotas.ClusterQueue",
        related_name="quota_changes",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    cohort = models.ForeignKey(
        "quotas.Cohort",
        related_name="quota_changes",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    source = models.CharField(
        max_length=16,
        choices=QuotaChangeSource.choices,
        default=QuotaChangeSource.GPU_LEDGER,
    )
    status = models.CharField(
        max_length=20,
        choices=QuotaChangeStatus.choices,
        default=QuotaChangeStatus.PREVIEWED,
    )
    reason = models.TextField(blank=True, help_text="Why; required for every change made here.")
    before = models.JSONField(default=list, blank=True)
    after = models.JSONField(default=list, blank=True)
    stop_policy_before = models.CharField(max_length=32, blank=True)
    stop_policy_after = models.CharField(max_length=32, blank=True)
    preview = models.JSONField(
        default=dict,
        blank=True,
        help_text="The what-if summary shown before applying.",
    )
    dry_run = models.JSONField(
        default=dict,
        blank=True,
        help_text="The API server's answer to the dryRun=All write.",
    )
    resource_version = models.CharField(
        max_length=64,
        blank=True,
        help_text="metadata.resourceVersion the preview was computed from (sent with the write).",
    )
    applied_resource_version = models.CharField(max_length=64, blank=True)
    api_status = models.PositiveSmallIntegerField(null=True, blank=True)
    api_answer = models.JSONField(default=dict, blank=True, help_text="The API server's answer.")
    field_manager = models.CharField(
        max_length=128,
        blank=True,
        help_text="Who wrote the change (managedFields); gpu-ledger for changes made here.",
    )
    gitops_owner = models.CharField(
        max_length=300,
        blank=True,
        help_text="Argo CD, Flux or another field manager that owns the queue's quotas.",
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        related_name="quota_changes_requested",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        related_name="quota_changes_decided",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    decision_comment = models.TextField(blank=True)
    notify_error = models.CharField(
        max_length=500,
        blank=True,
        help_text="Why the requester could not be emailed the decision (shown to the admin).",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    observed_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the sync saw the change in the cluster.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = QuotaChangeQuerySet.as_manager()

    class Meta:
        app_label = "quotas"
        ordering = ["-created_at", "-id"]
        permissions = [
            ("apply_quota_change", "Can apply quota changes to Kubernetes"),
        ]
        indexes = [
            # ClusterQueue and team pages: a queue's quota timeline, newest first.
            models.Index(fields=["cluster_queue", "-created_at"], name="quotas_qchange_queue"),
            # Admin worklist and the sync: requests waiting, applied changes not yet observed.
            models.Index(fields=["status", "cluster"], name="quotas_qchange_status"),
        ]

    def __str__(self) -> str:
        return f"{self.target_kind} {self.target_name} ({self.get_status_display()})"

    def cells(self) -> list[dict[str, Any]]:
        """Before and after side by side, one row per flavor x resource."""
        before = {(c["flavor"], c["resource"]): c for c in self.before}
        rows = []
        for cell in self.after:
            old = before.get((cell["flavor"], cell["resource"]), {})
            row: dict[str, Any] = {"flavor": cell["flavor"], "resource": cell["resource"]}
            for name in ("nominal", "borrowing_limit", "lending_limit"):
                row[f"{name}_before"] = old.get(name)
                row[f"{name}_after"] = cell.get(name)
                row[f"{name}_changed"] = old.get(name) != cell.get(name)
            rows.append(row)
        return rows
