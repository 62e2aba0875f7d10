"""The PromQL of a deep-backfilled hour: per-window answers per GPU series over the hour (range
queries with step = window), sharded by GPU UUID, and the pods' labels over the hour.

Every per-series expression is the collector's per-window answer (the same
``max by (<labels>) (avg_over_time(<metric>[<window>]))`` over each window), evaluated by
Prometheus at each window end of the hour, so the rules of ``fleet.ingest.build_window`` apply
window by window (``ledger.deep.presence`` applies them):

- ``presence``: the series with a sample of any DCGM metric in the window (the presence test;
  NaN samples count). A GPU's pod series are its entries, a series without pod labels counts
  only while the GPU has no pod series; each pod series holds ``1 / n`` of its GPU, ``n`` its
  GPU's pod series in the window (a time-sliced GPU is split evenly); the GPU's fraction (MIG
  slices / 7) is applied afterwards;
- ``metric_windows``: per pod series each window's average of SM_ACTIVE, GR_ENGINE_ACTIVE,
  PIPE_TENSOR_ACTIVE and GPU_UTIL (NaN and ±Inf dropped: no telemetry). Activity is SM_ACTIVE,
  else GR_ENGINE_ACTIVE, chosen per window; idle and "busy but not working" compare each
  window's averages with the thresholds.

Each raw sample is read once per hour, and not evaluated by Prometheus at all: the backfill
reads the stored samples (``samples`` / ``sample_matchers``: the six metrics of a shard over the
hour) and ``ledger.deep.presence.bin_columns`` computes these per-window answers from them, as
Prometheus would (the range queries stay the definition the binning is held to; per window they
cost Prometheus several times the CPU of handing the samples over, bench/RESULTS.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleet import constants as c
from ledger.rollup.row_figures import Thresholds

# The GPU of a series (``fleet.models.gpu_key``): host label (either spelling), UUID, instance.
GPU_LABELS = (c.LABEL_UUID, *c.LABEL_HOSTNAMES, c.LABEL_GPU_INSTANCE_ID)
HOST_LABELS = c.LABEL_HOSTNAMES
# Per-series figures (sum over the hour's windows of the series' share of its GPU, or of that
# share x a metric), by the rollup figure they become once multiplied by fraction x window hours.
SERIES_FIGURES = (
    "allocated",
    "shared",
    "telemetry",
    "active",
    "idle",
    "fallback",
    "tensor",
    "tensor_covered",
    "util",
    "util_covered",
    "busy",
)
CAPACITY = "capacity"
POD_SHARES = "pod_shares"
POD_SEEN = "pod_seen"
HOSTS = "hosts"
REQUESTS = "requests"
PRESENCE = "presence"
SAMPLES = "samples"
# The DCGM metrics whose per-window averages the figures read.
METRIC_KEYS = ("sm_active", "gr_engine_active", "pipe_tensor_active", "gpu_util")


def shard_matchers(shards: int) -> list[str]:
    """``shards`` disjoint UUID matchers covering every series (by the UUID's last character).

    Hex digits are dealt round-robin; the last shard takes every UUID the others do not match,
    so a UUID of any spelling lands in exactly one shard.
    """
    if shards <= 1:
        return [""]
    digits = "0123456789abcdefABCDEF"
    groups: list[list[str]] = [[] for _ in range(shards)]
    for position, digit in enumerate(digits[:16]):
        groups[position % shards].append(digit)
    for digit in digits[16:]:
        groups["0123456789abcdef".index(digit.lower()) % shards].append(digit)
    matchers = [f'{c.LABEL_UUID}=~".*[{"".join(group)}]"' for group in groups[:-1]]
    others = "".join(d for group in groups[:-1] for d in group)
    matchers.append(f'{c.LABEL_UUID}!~".*[{others}]"')
    return matchers


@dataclass(frozen=True)
class DeepQueries:
    """The expressions of one cluster's deep backfill (label style, window, thresholds)."""

    style: str
    window_seconds: int
    limits: Thresholds

    @property
    def pod_labels(self) -> tuple[str, str, str]:
        return c.POD_LABELS_BY_STYLE[self.style]

    @property
    def by_labels(self) -> tuple[str, ...]:
        """The labels of a per-series answer: the GPU's identity and the pod's."""
        return (*c.DCGM_IDENTITY_LABELS, *self.pod_labels)

    @property
    def by(self) -> str:
        return ", ".join(self.by_labels)

    def _avg(self, key: str, matchers: list[str]) -> str:
        """The window's average per series, NaN and ±Inf dropped (no telemetry)."""
        selector = ", ".join(m for m in matchers if m)
        span = f"{self.window_seconds * 1000 - 1}ms"
        average = f"max by ({self.by}) (avg_over_time({c.DCGM_METRICS[key]}{{{selector}}}[{span}]))"
        return f"({average} > -Inf < +Inf)"

    def _matchers(self, shard: str, pod: bool | None) -> list[str]:
        pod_label = self.pod_labels[1]
        found = [shard]
        if pod is True:
            found.append(f'{pod_label}!=""')
        elif pod is False:
            found.append(f'{pod_label}=""')
        return found

    def present(self, shard: str, pod: bool | None) -> str:
        """Series with a sample of any DCGM metric in the window (value 1; NaN samples count)."""
        selector = ", ".join(m for m in self._matchers(shard, pod) if m)
        span = f"{self.window_seconds * 1000 - 1}ms"
        either = " or ".join(
            f"count_over_time({metric}{{{selector}}}[{span}])" for metric in c.DCGM_METRICS.values()
        )
        return f"group by ({self.by}) ({either})"

    def _over_hour(self) -> str:
        # Steps at every window end of (T - 1 h, T]: 2.x subqueries include their left edge.
        return f"[{3600 * 1000 - 1}ms:{self.window_seconds}s]"

    def presence(self, shard: str) -> str:
        """Range query (step = window): every series of the shard present in each window."""
        return self.present(shard, None)

    def samples(self, shard: str) -> str:
        """Instant query at the hour's end: the stored samples of the six DCGM metrics in the
        hour (every series of the shard), binned into windows by ``presence.bin_samples``."""
        names = "|".join(c.DCGM_METRICS.values())
        selector = ", ".join(m for m in (f'__name__=~"{names}"', shard) if m)
        return f"{{{selector}}}[{3600 * 1000 - 1}ms]"

    def sample_matchers(self, shard: str) -> list[tuple[str, str, str]]:
        """``samples`` as remote read matchers: ``(name, operator, value)``."""
        found = [("__name__", "=~", "|".join(c.DCGM_METRICS.values()))]
        if shard:
            matched = re.fullmatch(r'(\w+)(=~|!~)"(.*)"', shard)
            if matched is None:
                raise ValueError(f"not a shard matcher: {shard}")
            found.append((matched[1], matched[2], matched[3]))
        return found

    def metric_windows(self, shard: str) -> dict[str, str]:
        """Range queries (step = window): per pod series each window's average of the metrics
        the figures read (``METRIC_KEYS``), NaN and ±Inf dropped."""
        matchers = self._matchers(shard, True)
        return {key: self._avg(key, matchers) for key in METRIC_KEYS}

    def label_queries(self) -> dict[str, str]:
        """Per pod, over the hour: its Kueue labels, owners and its Jobs' owners (every label
        set seen in the hour, as ``fleet.ingest.kube_state`` reads them)."""
        span = self._over_hour()
        return {
            "pod_labels": f"max_over_time(({c.PROMQL_POD_LABELS}){span})",
            "pod_owners": f"max_over_time(({c.PROMQL_POD_OWNERS}){span})",
            "job_owners": f"max_over_time(({c.PROMQL_JOB_OWNERS}){span})",
            "pod_groups": f"max_over_time(({c.PROMQL_POD_GROUPS}){span})",
        }
