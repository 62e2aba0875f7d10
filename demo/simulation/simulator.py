"""``FleetSimulator``: the scenario's fleet, moved by the scheduler, rendered for both upstreams."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core.timewindows import Window
from demo.simulation import kubernetes, prometheus, scheduler, volcano
from demo.simulation.scenario import SimFleet
from demo.simulation.serving import SimPrometheus
from fleet.choices import QuotaSource


class FleetSimulator(SimFleet):
    """Plays the scenario forward window by window; see the ``demo.simulation`` docstring.

    ``scheduler`` is the cluster's queueing layer as its API server shows it: ``kueue`` (Kueue's
    objects, metrics and visibility API) or ``volcano`` (Volcano's Queues and PodGroups, read
    through the product's Volcano translation; no Kueue metrics, no visibility API).
    """

    def __init__(self, *args: Any, scheduler: str = QuotaSource.KUEUE, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if scheduler not in (QuotaSource.KUEUE, QuotaSource.VOLCANO):
            raise ValueError(f"the simulated fleet runs kueue or volcano, not {scheduler!r}")
        self.scheduler = scheduler

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
        """Kueue's own metric answers for ``window`` (``quotas.constants.KUEUE_QUERIES``); none
        on a Volcano cluster."""
        if self.scheduler != QuotaSource.KUEUE:
            return {}
        return prometheus.kueue_answers(self, window)

    def serving_prometheus(self) -> SimPrometheus:
        """A stand-in for the cluster's Prometheus that answers the serving hour's PromQL about
        the fleet where it stands (``serving.collector.collect_hour`` takes it as its client)."""
        return SimPrometheus(self)

    def kube_lists(self, at: datetime) -> dict[str, dict]:
        """LIST payloads per ``quotas.ingest.snapshot_from_lists`` keyword, as of ``at``."""
        if self.scheduler == QuotaSource.VOLCANO:
            return volcano.list_payloads(self, at)
        return kubernetes.list_payloads(self, at)

    def pending_workloads(self, at: datetime) -> dict[str, dict]:
        """Kueue's visibility API answer per ClusterQueue name (``pendingworkloads``) at ``at``;
        none on a Volcano cluster (Volcano has no such API)."""
        if self.scheduler != QuotaSource.KUEUE:
            return {}
        return kubernetes.pending_workloads(self, at)
