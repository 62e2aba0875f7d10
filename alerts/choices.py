from django.db import models


class Rule(models.TextChoices):
    """The hoarding rules (docs/architecture.md "Hoarding alerts")."""

    IDLE_WORKLOAD = "idle_workload", "Idle workload"
    GHOST_RESERVATION = "ghost_reservation", "Ghost reservation"
    BORROWING_WHILE_IDLE = "borrowing_while_idle", "Borrowing while idle"
    TELEMETRY_MISSING = "telemetry_missing", "Telemetry missing"


class Severity(models.TextChoices):
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"


class EpisodeState(models.TextChoices):
    """Derived from the episode's times (``Episode.state``), never stored."""

    PENDING = "pending", "Pending (not yet past its duration)"
    OPEN = "open", "Open"
    RESOLVED = "resolved", "Resolved"


class ExemptionKind(models.TextChoices):
    CLUSTER_QUEUE = "cluster_queue", "ClusterQueue"
    LOCAL_QUEUE = "local_queue", "LocalQueue"
    NAMESPACE = "namespace", "Namespace"
    WORKLOAD_LABEL = "workload_label", "Workload label"
    PRIORITY_CLASS = "priority_class", "Priority class"
    INTERACTIVE_BELOW = "interactive_below", "Interactive notebooks below N GPUs"
    WORKLOAD = "workload", "One workload"
