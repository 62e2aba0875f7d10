"""Teams, Kueue objects (flavors, cohorts, queues, quotas, workloads) and their history."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.mig import GPU_RESOURCE, gpu_flavor
from fleet.models import Cluster, Gpu, Node
from quotas.choices import (
    FINISHED_STATES,
    HOLDING_STATES,
    ApiTokenScope,
    SampleSource,
    TransitionKind,
    WorkloadState,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# Quantities keep Kubernetes precision (milli-units) without float drift.
QUANTITY_DIGITS = 30
QUANTITY_PLACES = 6


def quantity_field(**kwargs: object) -> models.DecimalField:
    return models.DecimalField(
        max_digits=QUANTITY_DIGITS,
        decimal_places=QUANTITY_PLACES,
        **kwargs,  # type: ignore[arg-type]
    )


class Team(models.Model):
    """A team that owns ClusterQueues and/or namespaces; users can lead teams."""

    name = models.SlugField(max_length=100, unique=True)
    display_name = models.CharField(max_length=200, blank=True)
    cost_center = models.CharField(max_length=100, blank=True)
    leads = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        related_name="teams_led",
        blank=True,
        help_text="Team leads see the full detail of this team's queues and workloads.",
    )
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        related_name="teams_joined",
        blank=True,
        help_text="Members see this team's detail as its leads do, but do not act for it "
        "(quota requests, alert acknowledgements are for leads).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.display_name or self.name


class TeamNamespace(models.Model):
    """A namespace owned by a team (for pods whose queue is unknown)."""

    team = models.ForeignKey(Team, related_name="namespaces", on_delete=models.CASCADE)
    cluster = models.ForeignKey(
        Cluster,
        related_name="team_namespaces",
        on_delete=models.CASCADE,
    )
    namespace = models.CharField(max_length=253)

    class Meta:
        ordering = ["cluster", "namespace"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace"],
                name="quotas_teamnamespace_cluster_namespace",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace} → {self.team}"


class KueueObject(models.Model):
    """Fields every synced Kueue object carries."""

    cluster = models.ForeignKey(Cluster, related_name="+", on_delete=models.CASCADE)
    uid = models.CharField(max_length=64, blank=True)
    resource_version = models.CharField(max_length=64, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    observed_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="metadata.creationTimestamp upstream.",
    )
    deleted_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When it disappeared from a complete LIST; kept for history.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class ResourceFlavor(KueueObject):
    """A Kueue ResourceFlavor: which nodes (labels, taints) a quota stands for."""

    name = models.CharField(max_length=253)
    node_labels = models.JSONField(default=dict, blank=True)
    node_taints = models.JSONField(default=list, blank=True)
    tolerations = models.JSONField(default=list, blank=True)
    topology_name = models.CharField(max_length=253, blank=True)
    gpu_model = models.CharField(
        max_length=200,
        blank=True,
        help_text="From the nvidia.com/gpu.product node label, for rate cards.",
    )

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name"],
                name="quotas_resourceflavor_cluster_name",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Cohort(KueueObject):
    """A Kueue Cohort. ``implicit`` ones exist only because a ClusterQueue names them."""

    name = models.CharField(max_length=253)
    parent = models.ForeignKey(
        "self",
        related_name="children",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    parent_name = models.CharField(max_length=253, blank=True)
    implicit = models.BooleanField(default=False)
    scheduler = models.CharField(
        max_length=16,
        default="kueue",
        db_default="kueue",
        help_text="The scheduler whose objects this row was read from (Cluster.quota_source).",
    )
    fair_weight = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        null=True,
        blank=True,
    )
    weighted_share = models.BigIntegerField(null=True, blank=True)
    resource_groups = models.JSONField(
        default=list,
        blank=True,
        help_text="The cohort's own quota (spec.resourceGroups), e.g. a shared pool.",
    )

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="quotas_cohort_cluster_name"),
        ]

    def __str__(self) -> str:
        return self.name


class ClusterQueueQuerySet(models.QuerySet["ClusterQueue"]):
    def present(self) -> ClusterQueueQuerySet:
        return self.filter(deleted_at__isnull=True)


class ClusterQueue(KueueObject):
    """A Kueue ClusterQueue: a team's guaranteed quota, and what it may borrow and lend."""

    name = models.CharField(max_length=253)
    cohort = models.ForeignKey(
        Cohort,
        related_name="cluster_queues",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    cohort_name = models.CharField(max_length=253, blank=True)
    scheduler = models.CharField(
        max_length=16,
        default="kueue",
        db_default="kueue",
        help_text="The scheduler whose objects this row was read from (Cluster.quota_source).",
    )
    team = models.ForeignKey(
        Team,
        related_name="cluster_queues",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    namespace_selector = models.JSONField(default=dict, blank=True)
    queueing_strategy = models.CharField(max_length=32, blank=True)
    stop_policy = models.CharField(max_length=32, blank=True)
    reclaim_within_cohort = models.CharField(max_length=32, blank=True)
    within_cluster_queue = models.CharField(max_length=32, blank=True)
    borrow_within_cohort = models.CharField(max_length=32, blank=True)
    borrow_within_cohort_max_priority = models.IntegerField(null=True, blank=True)
    fair_weight = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        null=True,
        blank=True,
    )
    weighted_share = models.BigIntegerField(null=True, blank=True)
    pending_workloads = models.PositiveIntegerField(default=0)
    reserving_workloads = models.PositiveIntegerField(default=0)
    admitted_workloads = models.PositiveIntegerField(default=0)
    active = models.BooleanField(default=True, help_text="The Active condition.")

    objects = ClusterQueueQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name"],
                name="quotas_clusterqueue_cluster_name",
            ),
        ]
        indexes = [
            # Cohort page: member queues.
            models.Index(fields=["cohort"], name="quotas_cq_cohort"),
        ]

    def __str__(self) -> str:
        return self.name


class ClusterQueueQuota(models.Model):
    """One flavor × resource quota of a ClusterQueue. Null limits mean unlimited, 0 means none."""

    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="quotas",
        on_delete=models.CASCADE,
    )
    flavor_name = models.CharField(max_length=253)
    resource = models.CharField(max_length=253)
    position = models.PositiveSmallIntegerField(
        default=0,
        help_text="Flavor order within its resource group (Kueue tries flavors in order).",
    )
    nominal = quantity_field(default=Decimal(0))
    borrowing_limit = quantity_field(
        null=True,
        blank=True,
        help_text="Empty = unlimited borrowing; 0 = may not borrow.",
    )
    lending_limit = quantity_field(
        null=True,
        blank=True,
        help_text="Empty = all unused nominal quota is lendable; 0 = lends nothing.",
    )

    class Meta:
        ordering = ["cluster_queue", "resource", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster_queue", "flavor_name", "resource"],
                name="quotas_cqquota_flavor_resource",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_queue} {self.flavor_name} {self.resource}"


class LocalQueue(KueueObject):
    """A namespaced Kueue LocalQueue pointing at a ClusterQueue."""

    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="local_queues",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    cluster_queue_name = models.CharField(max_length=253)
    pending_workloads = models.PositiveIntegerField(default=0)
    reserving_workloads = models.PositiveIntegerField(default=0)
    admitted_workloads = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["cluster", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "name"],
                name="quotas_localqueue_identity",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class WorkloadPriorityClass(KueueObject):
    name = models.CharField(max_length=253)
    value = models.IntegerField(default=0)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["cluster", "-value", "name"]
        verbose_name_plural = "workload priority classes"
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name"],
                name="quotas_workloadpriorityclass_cluster_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"


class WorkloadQuerySet(models.QuerySet["Workload"]):
    def holding(self) -> WorkloadQuerySet:
        """Workloads holding quota now (finished ones keep status.admission; they are excluded)."""
        return self.filter(state__in=HOLDING_STATES, deleted_at__isnull=True)

    def admitted(self) -> WorkloadQuerySet:
        return self.filter(state=WorkloadState.ADMITTED, deleted_at__isnull=True)

    def pending(self) -> WorkloadQuerySet:
        return self.filter(
            state__in=[
                WorkloadState.PENDING,
                WorkloadState.EVICTED,
                WorkloadState.PREEMPTED,
                WorkloadState.REQUEUED,
            ],
            deleted_at__isnull=True,
        )

    def finished(self) -> WorkloadQuerySet:
        return self.filter(state__in=FINISHED_STATES)


class Workload(KueueObject):
    """A Kueue Workload (the gang): identity, queue, priority, pod sets, GPUs, state."""

    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    scheduler = models.CharField(
        max_length=16,
        default="kueue",
        db_default="kueue",
        help_text="The scheduler whose objects this row was read from (Cluster.quota_source).",
    )
    owner_kind = models.CharField(max_length=100, blank=True)
    owner_name = models.CharField(max_length=253, blank=True)
    owner_uid = models.CharField(max_length=64, blank=True)
    job_uid = models.CharField(
        max_length=64,
        blank=True,
        help_text="kueue.x-k8s.io/job-uid label: the owning job's (or plain pod's) UID.",
    )
    queue_name = models.CharField(max_length=253, blank=True, help_text="spec.queueName")
    local_queue = models.ForeignKey(
        LocalQueue,
        related_name="workloads",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="workloads",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    priority = models.IntegerField(default=0)
    priority_class_name = models.CharField(max_length=253, blank=True)
    active = models.BooleanField(default=True)
    pod_sets = models.JSONField(
        default=list,
        blank=True,
        help_text="[{name, count, gpus_per_pod, resources}] from spec.podSets.",
    )
    gpu_pods = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Pods of the gang that request GPUs (from pod_sets; null until the next sync).",
    )
    requested_gpus = models.FloatField(default=0.0, help_text="GPUs for the whole gang.")
    admitted_gpus = models.FloatField(
        default=0.0,
        help_text="GPUs in status.admission while holding quota.",
    )
    flavors = models.JSONField(
        default=dict,
        blank=True,
        help_text="Admitted flavor per resource, e.g. {'nvidia.com/gpu': 'h100'}.",
    )
    state = models.CharField(
        max_length=20,
        choices=WorkloadState.choices,
        default=WorkloadState.PENDING,
    )
    state_reason = models.CharField(max_length=200, blank=True)
    state_message = models.TextField(blank=True)
    quota_reserved_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    accumulated_execution_seconds = models.PositiveBigIntegerField(
        default=0,
        help_text="accumulatedPastExecutionTimeSeconds (v1beta1: …Exexcution…).",
    )
    requeue_count = models.PositiveIntegerField(default=0)
    requeue_at = models.DateTimeField(null=True, blank=True)
    borrowing = models.BooleanField(
        default=False,
        help_text="Inferred: its admission (in admission order) took the queue above nominal.",
    )
    borrowed_gpus = models.FloatField(default=0.0, help_text="Inferred GPUs above nominal.")
    pending_position = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Position in its ClusterQueue from the visibility API, when served.",
    )

    objects = WorkloadQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "name"],
                name="quotas_workload_identity",
            ),
        ]
        indexes = [
            # ClusterQueue page and borrowing inference: a queue's workloads by state.
            models.Index(fields=["cluster_queue", "state"], name="quotas_workload_cq_state"),
            # Pod → Workload join by the job UID label.
            models.Index(fields=["cluster", "job_uid"], name="quotas_workload_job_uid"),
            # Rows whose GPU pods are still to be counted (alerts.reading, every evaluation):
            # empty once counted, so the check reads an empty index, not the table.
            models.Index(
                fields=["cluster"],
                condition=models.Q(gpu_pods__isnull=True),
                name="quotas_workload_pods_uncounted",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gpu_flavor(self) -> str:
        """The GPU flavor it was admitted to: whole GPUs', else its first MIG resource's."""
        return gpu_flavor(self.flavors)

    @property
    def is_holding(self) -> bool:
        return self.state in HOLDING_STATES and self.deleted_at is None

    @staticmethod
    def count_gpu_pods(pod_sets: object) -> int:
        """Pods of the pod sets that request GPUs: what a gang runs when it is whole."""
        if not isinstance(pod_sets, list):
            return 0
        total = 0
        for pod_set in pod_sets:
            if not isinstance(pod_set, dict):
                continue
            try:
                if float(pod_set.get("gpus_per_pod") or 0) > 0:
                    total += max(int(pod_set.get("count") or 0), 0)
            except (TypeError, ValueError):
                continue
        return total


class WorkloadTransition(models.Model):
    """One state change of a Workload, recorded exactly once from its condition times."""

    workload = models.ForeignKey(
        Workload,
        related_name="transitions",
        on_delete=models.CASCADE,
    )
    kind = models.CharField(max_length=20, choices=TransitionKind.choices)
    at = models.DateTimeField(help_text="The condition's lastTransitionTime.")
    reason = models.CharField(max_length=200, blank=True)
    message = models.TextField(blank=True)
    preemptor_uid = models.CharField(max_length=64, blank=True)
    preemptor_job_uid = models.CharField(max_length=64, blank=True)
    preemptor_path = models.CharField(max_length=500, blank=True)
    preemptor = models.ForeignKey(
        Workload,
        related_name="preemptions_caused",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    requeue_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["workload", "at", "kind"]
        constraints = [
            models.UniqueConstraint(
                fields=["workload", "kind", "at"],
                name="quotas_transition_once",
            ),
        ]
        indexes = [
            # ClusterQueue page: evictions and preemptions over time.
            models.Index(fields=["kind", "at"], name="quotas_transition_kind_at"),
        ]

    def __str__(self) -> str:
        return f"{self.workload} {self.kind} @ {self.at}"


class ClusterQueueSample(models.Model):
    """A ClusterQueue's usage of one flavor × resource, sampled once per collection window."""

    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="samples",
        on_delete=models.CASCADE,
    )
    flavor_name = models.CharField(max_length=253)
    resource = models.CharField(max_length=253, default=GPU_RESOURCE)
    sampled_at = models.DateTimeField(help_text="End of the window the sample stands for.")
    window_seconds = models.PositiveIntegerField(default=60)
    total = quantity_field(default=Decimal(0), help_text="flavorsUsage total (admitted).")
    reserved = quantity_field(default=Decimal(0), help_text="flavorsReservation total.")
    borrowed = quantity_field(default=Decimal(0))
    lent = quantity_field(
        default=Decimal(0),
        help_text="Unused lendable quota that other cohort members were using (inferred).",
    )
    nominal = quantity_field(default=Decimal(0))
    borrowing_limit = quantity_field(null=True, blank=True)
    lending_limit = quantity_field(null=True, blank=True)
    # Null: unknown, in a window sampled from a scheduler's metrics that do not export it
    # (docs/prometheus.md "Volcano and KAI Scheduler quota metrics").
    pending_demand = quantity_field(
        default=Decimal(0),
        null=True,
        blank=True,
        help_text="Requested by pending workloads (empty: unknown).",
    )
    pending_workloads = models.PositiveIntegerField(
        default=0,
        null=True,
        blank=True,
        help_text="Empty: unknown.",
    )
    admitted_workloads = models.PositiveIntegerField(
        default=0,
        null=True,
        blank=True,
        help_text="Empty: unknown.",
    )
    source = models.CharField(
        max_length=16,
        choices=SampleSource.choices,
        default=SampleSource.API,
        help_text="The API server's status (the sync), or Kueue's metrics where it has none.",
    )

    class Meta:
        ordering = ["-sampled_at", "cluster_queue", "flavor_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster_queue", "flavor_name", "resource", "sampled_at"],
                name="quotas_cqsample_window",
            ),
        ]
        indexes = [
            # Rollup of one hour and the queue history charts.
            models.Index(fields=["sampled_at", "cluster_queue"], name="quotas_cqsample_time"),
            # "Does Kueue export quota metrics here?" (the queue page's history note): answered
            # from this index alone, empty where only the sync samples, instead of a scan of
            # every sample of the cluster.
            models.Index(
                fields=["cluster_queue"],
                condition=models.Q(source="metrics"),
                name="quotas_cqsample_metrics",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_queue} {self.flavor_name} @ {self.sampled_at}"


class ApiToken(models.Model):
    """A named API token (``Authorization: Bearer glt_…``); only a SHA-256 of the key is stored.

    Scope ``chargeback`` tokens are for finance scripts: they read /chargeback/ and /allocation
    and get 403 everywhere else. Visibility is the owning user's (access.py).
    """

    KEY_PREFIX = "glt_"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        related_name="api_tokens",
        on_delete=models.CASCADE,
    )
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. a script.")
    scope = models.CharField(
        max_length=16,
        choices=ApiTokenScope.choices,
        default=ApiTokenScope.CHARGEBACK,
    )
    prefix = models.CharField(
        max_length=12,
        editable=False,
        help_text="First characters of the key, to tell tokens apart.",
    )
    key_hash = models.CharField(max_length=64, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["user", "name"]
        constraints = [
            models.UniqueConstraint(fields=["key_hash"], name="quotas_apitoken_key_hash"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…, {self.scope})"

    @staticmethod
    def hash_key(key: str) -> str:
        import hashlib

        return hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def generate_key(cls) -> str:
        import secrets

        return cls.KEY_PREFIX + secrets.token_urlsafe(32)

    def set_key(self, key: str) -> None:
        self.prefix = key[: len(self.KEY_PREFIX) + 6]
        self.key_hash = self.hash_key(key)

    @classmethod
    def issue(
        cls, user: User, name: str, scope: str = ApiTokenScope.CHARGEBACK
    ) -> tuple[ApiToken, str]:
        """Create a token and return it with its key, which is not stored and shown only now."""
        key = cls.generate_key()
        token = cls(user=user, name=name, scope=scope)
        token.set_key(key)
        token.save()
        return token, key


def default_currency() -> str:
    """The currency new rate cards get (``ledger.RateCard``; migrations refer to it here)."""
    return settings.GPULEDGER_CURRENCY


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
        default=GPU_RESOURCE,
        help_text="nvidia.com/gpu or nvidia.com/mig-<profile>.",
    )
    gpus = models.FloatField(help_text="GPUs held, MIG instances as slices/7.")
    gpu_devices = models.ManyToManyField(Gpu, related_name="allocations", blank=True)
    workload = models.ForeignKey(
        Workload,
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
        # Written by both sources (kube-state-metrics history and the API server's pods) through
        # quotas.allocations; the table keeps the name it had when the model lived in fleet.
        db_table = "fleet_allocation"
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


# The audit trail lives with the write-back service; importing it here registers the model.
from quotas.writeback.models import QuotaChange as QuotaChange  # noqa: E402
