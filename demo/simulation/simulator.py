"""``FleetSimulator``: the scenario's fleet, moved by the scheduler, rendered for both upstreams."""

from __future__ import annotations

from datetime import datetime

from core.timewindows import Window
from demo.simulation import kubernetes, prometheus, scheduler
from demo.simulation.scenario import SimFleet
from demo.simulation.serving import SimPrometheus


class FleetSimulator(SimFleet):
    """Plays the scenario forward window by window; see the ``demo.simulation`` docstring."""

    def advance(self, now: datetime) -> None:
        """Move the world to ``now``: finish, preempt, admit, start pods."""
        scheduler.advance(self, now)

    def prometheus_window(self, window: Window) -> dict[str, list[dict]]:
        """The Prometheus answers the collector would get for ``window`` (vector result items).

        Keys: the DCGM metric keys of ``fleet.constants.DCGM_METRICS`` prefixed ``avg:`` and
        ``count:``, plus ``gpu_requests`` and ``pod_labels``.
        """
        return prometheus.window_answers(self, window)

    def kueue_window(self, window: Window) -> dict[str, list[dict]]:
        """Kueue's own metric answers for ``window`` (``quotas.constants.KUEUE_QUERIES``)."""
        return prometheus.kueue_answers(self, window)

    def serving_prometheus(self) -> SimPrometheus:
        """A stand-in for the cluster's Prometheus that answers the serving hour's PromQL about
        the fleet where it stands (``serving.collector.collect_hour`` takes it as its client)."""
        return SimPrometheus(self)

    def kube_lists(self, at: datetime) -> dict[str, dict]:
        """LIST payloads per ``quotas.ingest.snapshot_from_lists`` keyword, as of ``at``."""
        return kubernetes.list_payloads(self, at)

    def pending_workloads(self, at: datetime) -> dict[str, dict]:
        """Kueue's visibility API answer per ClusterQueue name (``pendingworkloads``) at ``at``."""
        return kubernetes.pending_workloads(self, at)
