"""The PromQL of a deep-backfilled hour: hour-step subqueries per GPU series, and per-window
answers per pod and per host, sharded by GPU UUID.

Every expression is built from the per-window answers of ``ledger.collector`` (the same
``max by (<labels>) (avg_over_time(<metric>[<window>]))`` over each window), evaluated by
Prometheus at each window end inside a subquery ``[<hour>:<window>]`` aligned on the windows,
so the rules of ``fleet.ingest.build_window`` apply window by window:

- a series is *present* in a window when any DCGM metric has a sample in it; a GPU's pod series
  are its entries, a series without pod labels counts only while the GPU has no pod series;
- each pod series holds ``1 / n`` of its GPU, ``n`` its GPU's pod series in the window (a
  time-sliced GPU is split evenly); the GPU's fraction (MIG slices / 7) is applied afterwards.
  ``ledger.deep.presence`` lists the GPUs with ``n > 1`` in some window of the hour; only their
  series are weighted by the share, the others hold 1 in every window they are present;
- activity is SM_ACTIVE, else GR_ENGINE_ACTIVE, chosen per window; idle and "busy but not
  working" compare each window's averages with the thresholds.

``presence`` is a range query with step = window over the hour: the series present in each
window, from which ``ledger.deep.presence`` derives every figure that depends on presence only
(allocated, shared, capacity, per-window pod shares and hosts, the time-sliced GPUs), so the
presence test reads the samples once per shard and hour. ``hour_queries`` are instant queries at
the hour's end, one value per series for the whole hour, of the figures that read a metric's
values.
"""

from __future__ import annotations

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
SLICED = "sliced:"


def _join(*matchers: str) -> str:
    return ", ".join(m for m in matchers if m)


def _regex_literal(value: str) -> str:
    """``value`` as an RE2 literal inside a PromQL string (metacharacters and quotes escaped)."""
    # A regex backslash is itself escaped in a PromQL string: ``\\.`` matches a dot.
    escaped = "".join("\\\\" + ch if ch in r"\.+*?()|[]{}^$" else ch for ch in value)
    return escaped.replace('"', '\\"')


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
    def by(self) -> str:
        return ", ".join((*c.DCGM_IDENTITY_LABELS, *self.pod_labels))

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

    def share(self, shard: str) -> str:
        """Pod series, valued 1 / the pod series of their GPU in the window."""
        held = self.present(shard, True)
        gpu = ", ".join(GPU_LABELS)
        return f"({held} / on ({gpu}) group_left () count by ({gpu}) ({held}))"

    def _activity(self, shard: str) -> str:
        matchers = self._matchers(shard, True)
        return f"({self._avg('sm_active', matchers)} or {self._avg('gr_engine_active', matchers)})"

    def _window_values(self, shard: str, sliced: bool) -> dict[str, str]:
        """Per window and pod series: what each SERIES_FIGURES sums. ``sliced``: the shard's
        GPUs had several pod series in some window, so each value is weighted by the series'
        share of its GPU; otherwise the share is 1 and the GPU's series are not counted."""
        matchers = self._matchers(shard, True)
        activity = self._activity(shard)
        tensor = self._avg("pipe_tensor_active", matchers)
        util = self._avg("gpu_util", matchers)
        sm = self._avg("sm_active", matchers)
        gr = self._avg("gr_engine_active", matchers)
        idle = f"({activity} < {self.limits.idle!r})"
        fallback = f"({gr} unless {sm})"
        busy = (
            f"(({util} >= {self.limits.busy_gpu_util!r})"
            f" and ({sm} < {self.limits.busy_sm_active!r}))"
        )
        if not sliced:
            return {
                "telemetry": f"({activity} * 0 + 1)",
                "active": activity,
                "idle": f"({idle} * 0 + 1)",
                "fallback": f"({fallback} * 0 + 1)",
                "tensor": tensor,
                "tensor_covered": f"({tensor} * 0 + 1)",
                "util": f"({util} / 100)",
                "util_covered": f"({util} * 0 + 1)",
                "busy": f"({busy} * 0 + 1)",
            }
        share = self.share(shard)
        return {
            "telemetry": f"({share} and {activity})",
            "active": f"({share} * {activity})",
            "idle": f"({share} and {idle})",
            "fallback": f"({share} and {fallback})",
            "tensor": f"({share} * {tensor})",
            "tensor_covered": f"({share} and {tensor})",
            "util": f"({share} * {util} / 100)",
            "util_covered": f"({share} and {util})",
            "busy": f"({share} and {busy})",
        }

    def _over_hour(self) -> str:
        # Steps at every window end of (T - 1 h, T]: 2.x subqueries include their left edge.
        return f"[{3600 * 1000 - 1}ms:{self.window_seconds}s]"

    def hour_queries(self, shard: str, sliced_uuids: list[str]) -> dict[str, str]:
        """Instant queries at the hour's end: per pod series the sum over the hour's windows of
        each figure that reads a metric (GPUs in ``sliced_uuids`` weighted by their series'
        shares, names prefixed ``SLICED``). Allocated, shared and capacity come from
        ``presence`` (``ledger.deep.presence``)."""
        span = self._over_hour()
        pattern = "|".join(_regex_literal(uuid) for uuid in sorted(sliced_uuids))
        plain = _join(shard, f'{c.LABEL_UUID}!~"{pattern}"' if pattern else "")
        queries = {
            name: f"sum_over_time({expression}{span})"
            for name, expression in self._window_values(plain, False).items()
        }
        if pattern:
            sliced = _join(shard, f'{c.LABEL_UUID}=~"{pattern}"')
            for name, expression in self._window_values(sliced, True).items():
                queries[SLICED + name] = f"sum_over_time({expression}{span})"
        return queries

    def presence(self, shard: str) -> str:
        """Range query (step = window): every series of the shard present in each window."""
        return self.present(shard, None)

    def label_queries(self) -> dict[str, str]:
        """Per pod, over the hour: its Kueue labels, owners and its Jobs' owners (every label
        set seen in the hour, as ``fleet.ingest.kube_state`` reads them)."""
        span = self._over_hour()
        return {
            "pod_labels": f"max_over_time(({c.PROMQL_POD_LABELS}){span})",
            "pod_owners": f"max_over_time(({c.PROMQL_POD_OWNERS}){span})",
            "job_owners": f"max_over_time(({c.PROMQL_JOB_OWNERS}){span})",
        }
