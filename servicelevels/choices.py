from django.db import models


class RecordSource(models.TextChoices):
    """Where an admission record's times come from."""

    LIVE = "live", "Seen live by the sync"
    CONDITIONS = "conditions", "Rebuilt from the Workload's conditions"


class EvictionReason(models.TextChoices):
    """Kueue's eviction reasons (the Evicted condition's reason), plus preemption's sub-reasons.

    A preemption is stored with ``reason = PREEMPTED`` and the Preempted condition's reason
    (InClusterQueue, InCohortReclamation, ...) in ``AdmissionRecord.preemption_reason``.
    """

    PREEMPTED = "Preempted", "Preempted"
    PODS_READY_TIMEOUT = "PodsReadyTimeout", "Pods ready timeout"
    ADMISSION_CHECK = "AdmissionCheck", "Admission check"
    CLUSTER_QUEUE_STOPPED = "ClusterQueueStopped", "ClusterQueue stopped"
    LOCAL_QUEUE_STOPPED = "LocalQueueStopped", "LocalQueue stopped"
    DEACTIVATED = "Deactivated", "Deactivated"
    INACTIVE_WORKLOAD = "InactiveWorkload", "Inactive workload"
    NODE_FAILURES = "NodeFailures", "Node failures"
    OTHER = "Other", "Other"


class PreemptionReason(models.TextChoices):
    """The Preempted condition's reason: who took the quota back, and why."""

    IN_CLUSTER_QUEUE = "InClusterQueue", "Within the ClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation", "Cohort reclamation"
    IN_COHORT_FAIR_SHARING = "InCohortFairSharing", "Cohort fair sharing"
    IN_COHORT_RECLAIM_WHILE_BORROWING = (
        "InCohortReclaimWhileBorrowing",
        "Cohort reclaim while borrowing",
    )
    OTHER = "Other", "Other"


class SloStatistic(models.TextChoices):
    """The wait statistic an objective bounds (nearest-rank percentiles, or the maximum)."""

    P50 = "p50", "p50"
    P90 = "p90", "p90"
    P95 = "p95", "p95"
    MAX = "max", "max"


class MetricsScope(models.TextChoices):
    """What an hour of Kueue's metrics describes: a ClusterQueue or a LocalQueue."""

    CLUSTER_QUEUE = "cluster_queue", "ClusterQueue"
    LOCAL_QUEUE = "local_queue", "LocalQueue"
