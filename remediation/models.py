"""What remediation may do to a ClusterQueue's workloads, and what it did.

``RemediationPolicy`` (per ClusterQueue, off by default) says what happens to workloads that stay
critical; ``RemediationAction`` is the audit of every deactivation, dry run, notice and
re-activation (``remediation.apply``).
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from remediation.choices import RemediationKind, RemediationMode, RemediationOutcome

DEFAULT_GRACE = timedelta(minutes=30)


class RemediationPolicy(models.Model):
    """What happens to a ClusterQueue's workloads that stay critical: nothing (the default), a
    notice to their owners, or deactivation (``spec.active=false``), optionally as a dry run."""

    cluster_queue = models.OneToOneField(
        "quotas.ClusterQueue",
        related_name="remediation_policy",
        on_delete=models.CASCADE,
    )
    mode = models.CharField(
        max_length=20,
        choices=RemediationMode.choices,
        default=RemediationMode.OFF,
    )
    grace_period = models.DurationField(
        default=DEFAULT_GRACE,
        help_text="How long a workload may stay critical after its owners were warned.",
    )
    dry_run = models.BooleanField(
        default=True,
        help_text="Record what would be done, change nothing in the cluster.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The table it had in the alerts app, which the data stays in.
        db_table = "alerts_remediationpolicy"
        ordering = ["cluster_queue"]
        verbose_name_plural = "remediation policies"

    def __str__(self) -> str:
        suffix = " (dry run)" if self.dry_run and self.mode == RemediationMode.DEACTIVATE else ""
        return f"{self.cluster_queue}: {self.get_mode_display()}{suffix}"

    def clean(self) -> None:
        if self.grace_period is not None and self.grace_period < timedelta(0):
            raise ValidationError({"grace_period": "Not negative."})


class RemediationAction(models.Model):
    """One deactivation, dry run, notice or re-activation of a workload: the audit trail."""

    episode = models.ForeignKey(
        "alerts.Episode",
        related_name="remediation_actions",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    cluster = models.ForeignKey(
        "fleet.Cluster",
        related_name="remediation_actions",
        on_delete=models.CASCADE,
    )
    workload = models.ForeignKey(
        "quotas.Workload",
        related_name="remediation_actions",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    namespace = models.CharField(max_length=253)
    workload_name = models.CharField(max_length=253)
    kind = models.CharField(max_length=20, choices=RemediationKind.choices)
    mode = models.CharField(
        max_length=20,
        choices=RemediationMode.choices,
        blank=True,
        help_text="The queue's policy when it ran (empty for a staff re-activation).",
    )
    dry_run = models.BooleanField(default=False)
    grace_period = models.DurationField(null=True, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        related_name="+",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        help_text="Empty: done by the policy.",
    )
    outcome = models.CharField(
        max_length=20,
        choices=RemediationOutcome.choices,
        default=RemediationOutcome.PENDING,
    )
    request = models.JSONField(default=dict, blank=True, help_text="The PATCH sent.")
    status_code = models.PositiveIntegerField(null=True, blank=True)
    response = models.JSONField(
        default=dict,
        blank=True,
        help_text="The API server's answer (the workload's spec.active and resourceVersion, "
        "or its Status).",
    )
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The table it had in the alerts app, which the data stays in.
        db_table = "alerts_remediationaction"
        ordering = ["-created_at", "-id"]
        constraints = [
            # Never twice: one deactivation (or dry run, or notice) per episode, unless it failed.
            models.UniqueConstraint(
                fields=["episode"],
                condition=Q(kind__in=["deactivate", "notify"]) & ~Q(outcome="failed"),
                name="alerts_remediationaction_once",
            ),
        ]
        indexes = [
            # The workload admin and page: a workload's actions, newest first.
            models.Index(fields=["workload", "created_at"], name="alerts_remediation_workload"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.namespace}/{self.workload_name}"
