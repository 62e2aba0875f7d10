"""Which thresholds apply to a subject: LocalQueue → namespace → ClusterQueue → global row →
settings; each field inherits separately (an override may set only the idle minutes)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from django.conf import settings

from alerts.models import AlertThreshold

FIELDS = (
    "idle_threshold",
    "idle_gpu_fraction",
    "idle_warning_minutes",
    "idle_critical_minutes",
    "ghost_minutes",
    "borrowing_minutes",
    "telemetry_minutes",
)


@dataclass(frozen=True)
class Thresholds:
    idle_threshold: float
    idle_gpu_fraction: float
    idle_warning_minutes: int
    idle_critical_minutes: int
    ghost_minutes: int
    borrowing_minutes: int
    telemetry_minutes: int

    @classmethod
    def defaults(cls) -> Thresholds:
        return cls(
            idle_threshold=settings.GPULEDGER_IDLE_THRESHOLD,
            idle_gpu_fraction=settings.GPULEDGER_ALERT_IDLE_GPU_FRACTION,
            idle_warning_minutes=settings.GPULEDGER_ALERT_IDLE_WARNING_MINUTES,
            idle_critical_minutes=settings.GPULEDGER_ALERT_IDLE_CRITICAL_MINUTES,
            ghost_minutes=settings.GPULEDGER_ALERT_GHOST_MINUTES,
            borrowing_minutes=settings.GPULEDGER_ALERT_BORROWING_MINUTES,
            telemetry_minutes=settings.GPULEDGER_ALERT_TELEMETRY_MINUTES,
        )

    def overridden(self, row: AlertThreshold | None) -> Thresholds:
        if row is None:
            return self
        changes = {name: getattr(row, name) for name in FIELDS if getattr(row, name) is not None}
        return replace(self, **changes) if changes else self


assert tuple(field.name for field in fields(Thresholds)) == FIELDS


class ThresholdResolver:
    """Thresholds per (ClusterQueue, LocalQueue, namespace) of one cluster, read once."""

    def __init__(self, cluster_id: int) -> None:
        rows = list(AlertThreshold.objects.all())
        self.base = Thresholds.defaults().overridden(
            next((row for row in rows if row.scope == AlertThreshold.Scope.GLOBAL), None)
        )
        self.by_cq = {
            row.cluster_queue_id: row
            for row in rows
            if row.scope == AlertThreshold.Scope.CLUSTER_QUEUE
        }
        self.by_lq = {
            row.local_queue_id: row for row in rows if row.scope == AlertThreshold.Scope.LOCAL_QUEUE
        }
        self.by_ns = {
            row.namespace: row
            for row in rows
            if row.scope == AlertThreshold.Scope.NAMESPACE and row.cluster_id == cluster_id
        }
        self._cache: dict[tuple[int | None, int | None, str], Thresholds] = {}
        self.uniform = not (self.by_cq or self.by_lq or self.by_ns)

    def highest_idle_threshold(self) -> float:
        """The highest idle threshold any subject of the cluster gets: a GPU at or above it is
        busy for every subject."""
        overrides = [
            row.idle_threshold
            for rows in (self.by_cq, self.by_lq, self.by_ns)
            for row in rows.values()
            if row.idle_threshold is not None
        ]
        return max([self.base.idle_threshold, *overrides])

    def for_subject(
        self, cluster_queue_id: int | None, local_queue_id: int | None, namespace: str
    ) -> Thresholds:
        if self.uniform:
            return self.base
        key = (cluster_queue_id, local_queue_id, namespace)
        found = self._cache.get(key)
        if found is None:
            found = (
                self.base.overridden(self.by_cq.get(cluster_queue_id))
                .overridden(self.by_ns.get(namespace))
                .overridden(self.by_lq.get(local_queue_id))
            )
            self._cache[key] = found
        return found
