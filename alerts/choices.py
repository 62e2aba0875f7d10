from django.db import models


class Rule(models.TextChoices):
    """The alert rules (docs/architecture.md "Hoarding alerts"): the four hoarding rules, judged
    per collection window, the queue service-level rule (``alerts.slo``) and the over-provisioned
    serving rule (``alerts.overprovisioned``), judged per day."""

    IDLE_WORKLOAD = "idle_workload", "Idle workload"
    GHOST_RESERVATION = "ghost_reservation", "Ghost reservation"
    BORROWING_WHILE_IDLE = "borrowing_while_idle", "Borrowing while idle"
    TELEMETRY_MISSING = "telemetry_missing", "Telemetry missing"
    QUEUE_SLO_BREACHED = "queue_slo_breached", "Queue SLO breached"
    SERVING_OVERPROVISIONED = "serving_overprovisioned", "Serving over-provisioned"


# The rules the window evaluation (``alerts.evaluate``) judges; the others have their own.
WINDOW_RULES: tuple[str, ...] = (
    Rule.IDLE_WORKLOAD,
    Rule.GHOST_RESERVATION,
    Rule.BORROWING_WHILE_IDLE,
    Rule.TELEMETRY_MISSING,
)


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
    SERVING_WORKLOAD = "serving_workload", "One serving deployment"
