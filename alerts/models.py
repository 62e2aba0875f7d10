"""Hoarding alerts: episodes of the rules in docs/architecture.md "Hoarding alerts", their
thresholds, exemptions and silences. Episodes are written only by ``alerts.evaluate`` from stored
windows."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from alerts.choices import EpisodeState, ExemptionKind, Rule, Severity
from alerts.ended import Ended, through_ended_hours
from fleet.models import Cluster, Node
from quotas.models import ClusterQueue, LocalQueue, Team, Workload
from serving.models import ServingWorkload


class EpisodeQuerySet(models.QuerySet["Episode"]):
    def fired(self) -> EpisodeQuerySet:
        """Episodes past their rule's duration (pending ones are never shown as alerts)."""
        return self.filter(fired_at__isnull=False)

    def open(self) -> EpisodeQuerySet:
        return self.fired().filter(resolved_at__isnull=True)

    def resolved(self) -> EpisodeQuerySet:
        return self.fired().filter(resolved_at__isnull=False)

    def with_subjects(self) -> EpisodeQuerySet:
        """With what an episode names read in the same query: its cluster, team, queues,
        workload, serving deployment and node (pages, API and Alertmanager messages show them)."""
        return self.select_related(
            "cluster",
            "team",
            "cluster_queue",
            "local_queue",
            "workload",
            "serving_workload",
            "node",
        )

    def overlapping(self, start: datetime | None, end: datetime | None) -> EpisodeQuerySet:
        """Episodes whose [started_at, resolved_at) meets [start, end)."""
        queryset = self
        if end is not None:
            queryset = queryset.filter(started_at__lt=end)
        if start is not None:
            queryset = queryset.filter(Q(resolved_at__isnull=True) | Q(resolved_at__gt=start))
        return queryset


class Episode(models.Model):
    """One episode of one rule for one subject: from the first minute the condition held to the
    first minute it no longer held. Escalation (warning → critical) happens in place."""

    rule = models.CharField(max_length=32, choices=Rule.choices)
    severity = models.CharField(
        max_length=16,
        choices=Severity.choices,
        default=Severity.WARNING,
    )
    # The foreign keys that lead a composite index below have no index of their own: fewer
    # indexes to maintain on every window's update (bench/alerts.py).
    cluster = models.ForeignKey(
        Cluster, related_name="episodes", on_delete=models.CASCADE, db_index=False
    )
    team = models.ForeignKey(
        Team,
        related_name="episodes",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_index=False,
    )
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="episodes",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_index=False,
    )
    local_queue = models.ForeignKey(
        LocalQueue,
        related_name="episodes",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    namespace = models.CharField(max_length=253, blank=True)
    workload = models.ForeignKey(
        Workload,
        related_name="episodes",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_index=False,
    )
    node = models.ForeignKey(
        Node,
        related_name="episodes",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    serving_workload = models.ForeignKey(
        ServingWorkload,
        related_name="episodes",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        help_text="The inference deployment of a serving_overprovisioned episode.",
    )
    gpu_uuids = models.JSONField(default=list, blank=True, help_text="GPUs involved (UUIDs).")
    gpus = models.FloatField(
        default=0.0,
        help_text="GPUs involved: allocated, held in quota (ghost) or borrowed (borrowing).",
    )
    subject_key = models.CharField(
        max_length=600,
        help_text="Stable identity of the subject, e.g. workload:<cluster>/<namespace>/<name>.",
    )
    started_at = models.DateTimeField(help_text="Start of the first minute the condition held.")
    fired_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the condition had held for the rule's duration; empty = pending.",
    )
    escalated_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Start of the first minute the condition no longer held; empty while open.",
    )
    held_seconds = models.PositiveIntegerField(
        default=0,
        help_text="Seconds the condition held (idle: minutes with telemetry only).",
    )
    last_held_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="End of the newest window in which the condition held.",
    )
    evaluated_until = models.DateTimeField(
        help_text="End of the newest window evaluated for this episode (re-evaluation skips it).",
    )
    idle_gpu_hours = models.FloatField(default=0.0)
    held_gpu_hours = models.FloatField(default=0.0)
    cost = models.DecimalField(
        max_digits=16,
        decimal_places=4,
        default=Decimal(0),
        help_text="Wasted GPU-hours priced with the rate card (idle for idle rules, else held).",
    )
    evidence = models.JSONField(default=dict, blank=True)
    summary = models.CharField(max_length=500, blank=True)
    exempt = models.BooleanField(default=False)
    exempt_reason = models.CharField(max_length=300, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        related_name="acknowledged_episodes",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    ack_comment = models.TextField(blank=True)
    silenced_until = models.DateTimeField(null=True, blank=True)
    detected_live = models.BooleanField(
        default=True,
        help_text="False when the episode was first written by the evaluation of a backfill.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = EpisodeQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "rule", "subject_key"]
        # Granted explicitly (alerts/permissions.py): being staff is not enough.
        permissions = [
            ("acknowledge_episode", "Can acknowledge episodes"),
            ("silence_episode", "Can silence episodes' subjects"),
            ("exempt_episode", "Can exempt an episode's workload or ClusterQueue"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject_key", "started_at"],
                name="alerts_episode_identity",
            ),
            models.UniqueConstraint(
                fields=["rule", "subject_key"],
                condition=Q(resolved_at__isnull=True),
                name="alerts_episode_one_open",
            ),
        ]
        indexes = [
            # The evaluator: a cluster's unresolved episodes (and the Alerts page's open list).
            models.Index(
                fields=["cluster", "rule"],
                condition=Q(resolved_at__isnull=True),
                name="alerts_episode_unresolved",
            ),
            # Re-evaluation of a range: the episodes of a cluster resolved in or just before it
            # (not ``evaluated_until``, which moves every window: an index on it would make
            # every window's update of the open episodes a non-HOT one).
            models.Index(fields=["cluster", "resolved_at"], name="alerts_episode_resolved"),
            # Workload and queue badges.
            models.Index(fields=["workload", "started_at"], name="alerts_episode_workload"),
            models.Index(fields=["cluster_queue", "started_at"], name="alerts_episode_cq"),
            # Team leads' Alerts page.
            models.Index(fields=["team", "started_at"], name="alerts_episode_team"),
        ]

    def __str__(self) -> str:
        return f"{self.rule} {self.subject_key} @ {self.started_at:%Y-%m-%d %H:%M}"

    @property
    def state(self) -> str:
        if self.resolved_at is not None and self.fired_at is not None:
            return EpisodeState.RESOLVED
        if self.fired_at is None:
            return EpisodeState.PENDING
        return EpisodeState.OPEN

    @property
    def ended(self) -> Ended:
        """Its wasted and held GPU-hours and cost over the hours that have ended, the cut the
        pages count (``alerts.ended``)."""
        return through_ended_hours(self, timezone.now())

    def is_silenced(self, now: datetime) -> bool:
        return self.silenced_until is not None and self.silenced_until > now


class AlertThreshold(models.Model):
    """Thresholds for one scope; empty fields inherit (LocalQueue → namespace → ClusterQueue →
    the global row → the GPULEDGER_ALERT_* settings)."""

    class Scope(models.TextChoices):
        GLOBAL = "global", "Global"
        CLUSTER_QUEUE = "cluster_queue", "ClusterQueue"
        LOCAL_QUEUE = "local_queue", "LocalQueue"
        NAMESPACE = "namespace", "Namespace"

    scope = models.CharField(max_length=16, choices=Scope.choices)
    cluster = models.ForeignKey(
        Cluster,
        related_name="alert_thresholds",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        help_text="For a namespace threshold: the cluster of the namespace.",
    )
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="alert_thresholds",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
    )
    local_queue = models.ForeignKey(
        LocalQueue,
        related_name="alert_thresholds",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
    )
    namespace = models.CharField(max_length=253, blank=True)
    idle_threshold = models.FloatField(
        null=True,
        blank=True,
        help_text="SM_ACTIVE (or GR_ENGINE_ACTIVE) below this is idle.",
    )
    idle_gpu_fraction = models.FloatField(
        null=True,
        blank=True,
        help_text="A workload is idle when at least this share of its GPUs with telemetry is.",
    )
    idle_warning_minutes = models.PositiveIntegerField(null=True, blank=True)
    idle_critical_minutes = models.PositiveIntegerField(null=True, blank=True)
    ghost_minutes = models.PositiveIntegerField(null=True, blank=True)
    borrowing_minutes = models.PositiveIntegerField(null=True, blank=True)
    telemetry_minutes = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "cluster_queue", "local_queue", "namespace"]
        constraints = [
            models.UniqueConstraint(
                fields=["scope"],
                condition=Q(scope="global"),
                name="alerts_threshold_one_global",
            ),
            models.UniqueConstraint(
                fields=["cluster_queue"],
                condition=Q(scope="cluster_queue"),
                name="alerts_threshold_cluster_queue",
            ),
            models.UniqueConstraint(
                fields=["local_queue"],
                condition=Q(scope="local_queue"),
                name="alerts_threshold_local_queue",
            ),
            models.UniqueConstraint(
                fields=["cluster", "namespace"],
                condition=Q(scope="namespace"),
                name="alerts_threshold_namespace",
            ),
        ]

    def __str__(self) -> str:
        target: dict[str, str] = {
            self.Scope.GLOBAL: "global",
            self.Scope.CLUSTER_QUEUE: f"ClusterQueue {self.cluster_queue}",
            self.Scope.LOCAL_QUEUE: f"LocalQueue {self.local_queue}",
            self.Scope.NAMESPACE: f"namespace {self.namespace}",
        }
        return f"Thresholds: {target.get(self.scope, self.scope)}"

    def clean(self) -> None:
        scopes: dict[str, bool] = {
            self.Scope.GLOBAL: True,
            self.Scope.CLUSTER_QUEUE: self.cluster_queue_id is not None,
            self.Scope.LOCAL_QUEUE: self.local_queue_id is not None,
            self.Scope.NAMESPACE: bool(self.namespace) and self.cluster_id is not None,
        }
        if not scopes.get(self.scope, False):
            raise ValidationError(
                "Pick the ClusterQueue, the LocalQueue, or the cluster and namespace of the scope."
            )
        if self.idle_gpu_fraction is not None and not 0 < self.idle_gpu_fraction <= 1:
            raise ValidationError({"idle_gpu_fraction": "Above 0 and at most 1."})


class Exemption(models.Model):
    """Workloads this matches get episodes marked exempt (shown, never notified or remediated)."""

    kind = models.CharField(max_length=20, choices=ExemptionKind.choices)
    cluster = models.ForeignKey(
        Cluster,
        related_name="alert_exemptions",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        help_text="Empty = every cluster (namespace, label, priority class, interactive).",
    )
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="alert_exemptions",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
    )
    local_queue = models.ForeignKey(
        LocalQueue,
        related_name="alert_exemptions",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
    )
    workload = models.ForeignKey(
        Workload,
        related_name="alert_exemptions",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
    )
    serving_workload = models.ForeignKey(
        ServingWorkload,
        related_name="alert_exemptions",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        help_text="For a serving deployment exemption (serving_overprovisioned).",
    )
    namespace = models.CharField(max_length=253, blank=True)
    label_key = models.CharField(
        max_length=317,
        blank=True,
        help_text="Workload label, e.g. gpuledger.io/hoarding-exempt.",
    )
    label_value = models.CharField(
        max_length=63,
        blank=True,
        help_text="Empty = any value.",
    )
    priority_class = models.CharField(max_length=253, blank=True)
    max_gpus = models.FloatField(
        null=True,
        blank=True,
        help_text="Interactive notebooks with fewer GPUs than this are exempt.",
    )
    reason = models.CharField(max_length=300, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty = for good.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        related_name="alert_exemptions",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["kind", "-created_at"]

    def __str__(self) -> str:
        return f"Exemption {self.get_kind_display()}: {self.describe()}"

    def clean(self) -> None:
        missing: dict[str, bool] = {
            ExemptionKind.CLUSTER_QUEUE: self.cluster_queue_id is None,
            ExemptionKind.LOCAL_QUEUE: self.local_queue_id is None,
            ExemptionKind.WORKLOAD: self.workload_id is None,
            ExemptionKind.SERVING_WORKLOAD: self.serving_workload_id is None,
            ExemptionKind.NAMESPACE: not self.namespace,
            ExemptionKind.WORKLOAD_LABEL: not self.label_key,
            ExemptionKind.PRIORITY_CLASS: not self.priority_class,
            ExemptionKind.INTERACTIVE_BELOW: not self.max_gpus,
        }
        if missing.get(self.kind, False):
            raise ValidationError("Fill in the field this kind of exemption matches on.")

    def describe(self) -> str:
        match self.kind:
            case ExemptionKind.CLUSTER_QUEUE:
                return str(self.cluster_queue)
            case ExemptionKind.LOCAL_QUEUE:
                return str(self.local_queue)
            case ExemptionKind.WORKLOAD:
                return str(self.workload)
            case ExemptionKind.SERVING_WORKLOAD:
                return str(self.serving_workload)
            case ExemptionKind.NAMESPACE:
                return self.namespace
            case ExemptionKind.WORKLOAD_LABEL:
                return f"{self.label_key}={self.label_value or '*'}"
            case ExemptionKind.PRIORITY_CLASS:
                return self.priority_class
            case ExemptionKind.INTERACTIVE_BELOW:
                return f"interactive below {self.max_gpus:g} GPUs" if self.max_gpus else ""
        return ""


class Silence(models.Model):
    """Mutes matching episodes (no notifications) until ``ends_at``; empty matchers match all."""

    rule = models.CharField(max_length=32, choices=Rule.choices, blank=True)
    subject_key = models.CharField(
        max_length=600,
        blank=True,
        help_text="One subject (set when silencing from an episode's page).",
    )
    cluster = models.ForeignKey(
        Cluster,
        related_name="alert_silences",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
    )
    team = models.ForeignKey(
        Team,
        related_name="alert_silences",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
    )
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="alert_silences",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
    )
    namespace = models.CharField(max_length=253, blank=True)
    ends_at = models.DateTimeField()
    comment = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        related_name="alert_silences",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-ends_at"]
        indexes = [
            # The evaluator reads the silences still running.
            models.Index(fields=["ends_at"], name="alerts_silence_ends"),
        ]

    def __str__(self) -> str:
        return f"Silence {self.rule or 'all rules'} until {self.ends_at:%Y-%m-%d %H:%M}"

    def matches(self, episode: Episode) -> bool:
        return (
            (not self.rule or self.rule == episode.rule)
            and (not self.subject_key or self.subject_key == episode.subject_key)
            and (self.cluster_id is None or self.cluster_id == episode.cluster_id)
            and (self.team_id is None or self.team_id == episode.team_id)
            and (self.cluster_queue_id is None or self.cluster_queue_id == episode.cluster_queue_id)
            and (not self.namespace or self.namespace == episode.namespace)
        )


class AlertEvaluation(models.Model):
    """A cluster's evaluation queue: the windows still to evaluate, and who is evaluating.

    Collection asks for a range (``alerts.dispatch.request_evaluation``): it is merged into the
    pending range, and a task is published only when none is waiting, so a backfill of many
    windows queues one task, not one per window. A task claims the row (a conditional UPDATE
    of ``claimed_until``) before it evaluates, so two never evaluate one cluster at once; it
    takes the pending range, and lets go of the claim only when nothing is pending, so a range
    asked for while it ran is evaluated before it lets go. What it took stays in ``taken_*``
    until it is evaluated, so the windows of a holder killed mid-range are pending again for the
    next."""

    cluster = models.OneToOneField(
        Cluster,
        related_name="alert_evaluation",
        on_delete=models.CASCADE,
    )
    pending_start = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Windows ending in (pending start, pending end] wait for evaluation.",
    )
    pending_end = models.DateTimeField(null=True, blank=True)
    pending_live = models.BooleanField(
        default=True,
        help_text="False once a backfill's range is among the pending windows.",
    )
    queued_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a task was last published for the pending windows and not started yet.",
    )
    taken_start = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Windows ending in (taken start, taken end] are being evaluated by the holder.",
    )
    taken_end = models.DateTimeField(null=True, blank=True)
    taken_live = models.BooleanField(default=True)
    claimed_by = models.CharField(max_length=200, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    evaluated_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The end of the last range evaluated.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster"]

    def __str__(self) -> str:
        return f"alert evaluation of {self.cluster_id}"
