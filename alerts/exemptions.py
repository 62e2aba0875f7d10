"""Whether an episode's subject is exempt (``Exemption`` rows and the exempt label)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q

from alerts.choices import ExemptionKind
from alerts.models import Exemption


@dataclass
class Subject:
    """What exemptions look at; workload fields are empty for queue and node subjects, and all
    but the namespace and ``serving_workload_id`` for a serving deployment."""

    cluster_queue_id: int | None = None
    local_queue_id: int | None = None
    namespace: str = ""
    workload_id: int | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    priority_class: str = ""
    owner_kind: str = ""
    gpus: float = 0.0
    serving_workload_id: int | None = None


class ExemptionMatcher:
    """The exemptions in force for one cluster at ``now``, read once."""

    def __init__(self, cluster_id: int, now: datetime) -> None:
        self.rows = list(
            Exemption.objects.filter(Q(cluster_id=cluster_id) | Q(cluster__isnull=True))
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
            .select_related("cluster_queue", "local_queue", "workload", "serving_workload")
        )
        self.label = settings.GPULEDGER_ALERT_EXEMPT_LABEL
        self.interactive = set(settings.GPULEDGER_ALERT_INTERACTIVE_KINDS)

    def reason(self, subject: Subject) -> str:
        """Why the subject is exempt, or "" when it is not."""
        if self.label and str(subject.labels.get(self.label, "")).lower() == "true":
            return f"label {self.label}=true"
        for row in self.rows:
            if self._matches(row, subject):
                why = f"{row.get_kind_display()} exemption: {row.describe()}"
                return f"{why} ({row.reason})" if row.reason else why
        return ""

    def _matches(self, row: Exemption, subject: Subject) -> bool:
        match row.kind:
            case ExemptionKind.CLUSTER_QUEUE:
                return row.cluster_queue_id is not None and (
                    row.cluster_queue_id == subject.cluster_queue_id
                )
            case ExemptionKind.LOCAL_QUEUE:
                return row.local_queue_id is not None and (
                    row.local_queue_id == subject.local_queue_id
                )
            case ExemptionKind.WORKLOAD:
                return row.workload_id is not None and row.workload_id == subject.workload_id
            case ExemptionKind.SERVING_WORKLOAD:
                return row.serving_workload_id is not None and (
                    row.serving_workload_id == subject.serving_workload_id
                )
            case ExemptionKind.NAMESPACE:
                return bool(row.namespace) and row.namespace == subject.namespace
            case ExemptionKind.WORKLOAD_LABEL:
                if not row.label_key or row.label_key not in subject.labels:
                    return False
                return not row.label_value or str(subject.labels[row.label_key]) == row.label_value
            case ExemptionKind.PRIORITY_CLASS:
                return bool(row.priority_class) and row.priority_class == subject.priority_class
            case ExemptionKind.INTERACTIVE_BELOW:
                return (
                    row.max_gpus is not None
                    and subject.workload_id is not None
                    and subject.owner_kind in self.interactive
                    and subject.gpus < row.max_gpus
                )
        return False
