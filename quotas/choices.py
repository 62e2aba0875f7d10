from django.db import models


class WorkloadState(models.TextChoices):
    """Where a Kueue Workload stands, derived from its conditions."""

    PENDING = "pending", "Pending"
    QUOTA_RESERVED = "quota_reserved", "Quota reserved"
    ADMITTED = "admitted", "Admitted"
    EVICTED = "evicted", "Evicted"
    PREEMPTED = "preempted", "Preempted"
    REQUEUED = "requeued", "Requeued (backoff)"
    INACTIVE = "inactive", "Deactivated"
    SUCCEEDED = "succeeded", "Finished: succeeded"
    FAILED = "failed", "Finished: failed"


HOLDING_STATES = (WorkloadState.QUOTA_RESERVED, WorkloadState.ADMITTED)
FINISHED_STATES = (WorkloadState.SUCCEEDED, WorkloadState.FAILED)


class TransitionKind(models.TextChoices):
    """A state change of a Workload, one row per occurrence (history Kueue does not keep)."""

    CREATED = "created", "Created"
    QUOTA_RESERVED = "quota_reserved", "Quota reserved"
    QUOTA_RELEASED = "quota_released", "Quota released"
    ADMITTED = "admitted", "Admitted"
    PODS_READY = "pods_ready", "Pods ready"
    EVICTED = "evicted", "Evicted"
    PREEMPTED = "preempted", "Preempted"
    REQUEUED = "requeued", "Requeued"
    DEACTIVATED = "deactivated", "Deactivated"
    FINISHED = "finished", "Finished"
    DELETED = "deleted", "Deleted"


class SampleSource(models.TextChoices):
    """Where a ClusterQueue sample came from; the API server's status wins over the metrics."""

    API = "api", "Kubernetes API: ClusterQueue status"
    METRICS = "metrics", "Prometheus: Kueue's own metrics"


class ApiTokenScope(models.TextChoices):
    FULL = "full", "Full read access (as the user)"
    CHARGEBACK = "chargeback", "Chargeback and allocation only (finance scripts)"


class QuotaChangeStatus(models.TextChoices):
    """Where a quota change stands. A change GPU Ledger did not make is ``observed``."""

    PREVIEWED = "previewed", "Previewed, not applied"
    REQUESTED = "requested", "Requested by a team lead"
    DECLINED = "declined", "Declined"
    APPROVED_GITOPS = "approved_gitops", "Approved, apply via GitOps"
    REFUSED = "refused", "Refused (read-only cluster or GitOps-managed)"
    APPLIED = "applied", "Applied, not yet observed"
    APPLIED_OBSERVED = "applied_observed", "Applied and observed"
    CONFLICT = "conflict", "Conflict: changed meanwhile"
    FAILED = "failed", "Failed"
    OBSERVED = "observed", "Changed outside GPU Ledger"


class QuotaChangeSource(models.TextChoices):
    GPU_LEDGER = "gpu-ledger", "GPU Ledger"
    OBSERVED = "observed", "Observed by the sync"


class QuotaTargetKind(models.TextChoices):
    CLUSTER_QUEUE = "ClusterQueue", "ClusterQueue"
    COHORT = "Cohort", "Cohort"


STOP_POLICIES = ("None", "Hold", "HoldAndDrain")
