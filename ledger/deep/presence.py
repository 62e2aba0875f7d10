"""What a deep-backfilled hour derives from one per-window answer: the DCGM series present in
each window (``DeepQueries.present`` over every series of a shard, a range query with step =
window).

The presence test (any of six DCGM metrics has a sample in the window) is the most expensive
expression of an hour: it reads every sample of every metric. Prometheus evaluates it once per
shard and hour here; the figures that depend only on presence are computed from its answer by
the rules of ``fleet.ingest.build_window`` (docs/architecture.md "Deep backfill"):

- per pod series, ``allocated``: the sum over the windows of its share of its GPU (``1 / n``,
  ``n`` the GPU's pod series in that window), and ``shared``: that sum over the windows where
  ``n > 1`` (only for series that shared);
- per GPU identity, ``capacity``: the windows with any series of it;
- per window, the GPU share of each pod per host, model and MIG profile (``POD_SHARES``), the
  series each pod is seen on per MIG profile (``POD_SEEN``) and the hosts with any series
  (``HOSTS``);
- the UUIDs of the GPUs with several pod series in some window (time-sliced): only their
  series' metric figures are weighted by the share.

The answers have the shapes Prometheus gives the equivalent queries (vectors of per-hour values,
matrices of per-window values), so ``ledger.deep.grain`` reads them unchanged.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from fleet import constants as c
from fleet.ingest import IngestStats
from ledger.deep import queries as q
from ledger.rollup.row_figures import Thresholds

Labels = tuple[tuple[str, str], ...]


@dataclass
class Presence:
    """The answers of one shard and hour in the shapes ``ledger.deep.grain`` reads."""

    answers: dict[str, list[dict]] = field(default_factory=dict)
    stats: IngestStats = field(default_factory=IngestStats)


def _pick(metric: dict, names: tuple[str, ...]) -> Labels:
    """The non-empty labels of ``names`` (Prometheus drops empty labels from a grouping)."""
    return tuple((name, str(metric[name])) for name in names if metric.get(name))


def _vector(values: dict[Labels, float], at: float) -> list[dict]:
    return [
        {"metric": dict(labels), "value": [at, repr(value)]} for labels, value in values.items()
    ]


def _matrix(by_ts: dict[float, dict[Labels, float]]) -> list[dict]:
    series: dict[Labels, list[list]] = defaultdict(list)
    for ts in sorted(by_ts):
        for labels, value in by_ts[ts].items():
            series[labels].append([ts, repr(value)])
    return [{"metric": dict(labels), "values": values} for labels, values in series.items()]


def _series(matrix: list[dict], stats: IngestStats) -> list[tuple[dict, list[float]]]:
    """(labels, window ends) of each usable matrix item; malformed items and points counted."""
    found = []
    for item in matrix:
        if (
            not isinstance(item, dict)
            or not isinstance(metric := item.get("metric"), dict)
            or not isinstance(values := item.get("values"), list)
        ):
            stats.skip("malformed_matrix_item")
            continue
        times = []
        for point in values:
            try:
                times.append(float(point[0]))
            except (TypeError, ValueError, IndexError, KeyError):
                stats.skip("malformed_matrix_point")
        found.append((metric, times))
    return found


def _key(metric: dict) -> Labels:
    return tuple(sorted((name, str(value)) for name, value in metric.items()))


def _values(matrix: list[dict], stats: IngestStats) -> dict[Labels, dict[float, float]]:
    """Per series (its labels) its per-window values; unusable values skipped and counted."""
    found: dict[Labels, dict[float, float]] = {}
    for item in matrix:
        if (
            not isinstance(item, dict)
            or not isinstance(metric := item.get("metric"), dict)
            or not isinstance(values := item.get("values"), list)
        ):
            stats.skip("malformed_matrix_item")
            continue
        by_ts = found.setdefault(_key(metric), {})
        for point in values:
            try:
                ts, value = float(point[0]), float(point[1])
            except (TypeError, ValueError, IndexError, KeyError):
                stats.skip("malformed_matrix_point")
                continue
            if math.isfinite(value):
                by_ts[ts] = value
            else:
                stats.nonfinite_skipped += 1
    return found


def _figures(
    limits: Thresholds,
    share: float,
    sm: float | None,
    gr: float | None,
    tensor: float | None,
    util: float | None,
) -> Iterator[tuple[str, float]]:
    """What one window adds to each figure of a pod series holding ``share`` of its GPU, as
    ``fleet.ingest.build_window`` counts it (None: no telemetry of that metric)."""
    activity = sm if sm is not None else gr
    if activity is not None:
        yield "telemetry", share
        yield "active", share * activity
        if activity < limits.idle:
            yield "idle", share
        if sm is None:
            yield "fallback", share
    if tensor is not None:
        yield "tensor", share * tensor
        yield "tensor_covered", share
    if util is not None:
        yield "util", share * util / 100
        yield "util_covered", share
        if sm is not None and util >= limits.busy_gpu_util and sm < limits.busy_sm_active:
            yield "busy", share


def derive(
    answers: dict[str, list[dict]],
    pod_labels: tuple[str, str, str],
    end: float,
    limits: Thresholds,
) -> Presence:
    """The hour's answers of one shard in the shapes ``ledger.deep.grain`` reads.

    ``answers``: the range answers of ``DeepQueries.presence`` (``PRESENCE``) and of
    ``DeepQueries.metric_windows`` (by metric key); ``end``: the hour's end (the instant of
    per-hour values); ``limits``: the idle and "busy but not working" thresholds."""
    namespace, pod, _container = pod_labels
    found = Presence()
    share_labels = (
        namespace,
        pod,
        *q.HOST_LABELS,
        c.LABEL_MODEL_NAME,
        c.LABEL_GPU_INSTANCE_PROFILE,
    )
    seen_labels = (namespace, pod, c.LABEL_GPU_INSTANCE_PROFILE)
    host_labels = (*q.HOST_LABELS, c.LABEL_MODEL_NAME)
    series = _series(answers.get(q.PRESENCE, []), found.stats)
    sm, gr, tensor, util = (_values(answers.get(key, []), found.stats) for key in q.METRIC_KEYS)
    # The pod series of each GPU in each window.
    per_gpu: dict[tuple, int] = defaultdict(int)
    for metric, times in series:
        if metric.get(pod):
            gpu = tuple(metric.get(name) for name in q.GPU_LABELS)
            for ts in times:
                per_gpu[(gpu, ts)] += 1
    figures: dict[str, dict[Labels, float]] = {name: {} for name in q.SERIES_FIGURES}
    capacity: dict[Labels, set[float]] = defaultdict(set)
    pod_shares: dict[float, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
    pod_seen: dict[float, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
    hosts: dict[float, dict[Labels, float]] = defaultdict(dict)
    empty: dict[float, float] = {}
    for metric, times in series:
        capacity[_pick(metric, c.DCGM_IDENTITY_LABELS)].update(times)
        host = _pick(metric, host_labels)
        for ts in times:
            hosts[ts][host] = 1.0
        if not metric.get(pod):
            continue
        gpu = tuple(metric.get(name) for name in q.GPU_LABELS)
        share_key, seen_key = _pick(metric, share_labels), _pick(metric, seen_labels)
        labels = _key(metric)
        values = [m.get(labels, empty) for m in (sm, gr, tensor, util)]
        sums: dict[str, float] = {}
        for ts in times:
            n = per_gpu[(gpu, ts)]
            share = 1 / n
            sums["allocated"] = sums.get("allocated", 0.0) + share
            if n > 1:
                sums["shared"] = sums.get("shared", 0.0) + share
            pod_shares[ts][share_key] += share
            pod_seen[ts][seen_key] += 1
            window = (v.get(ts) for v in values)
            for name, value in _figures(limits, share, *window):
                sums[name] = sums.get(name, 0.0) + value
        for name, value in sums.items():
            figures[name][labels] = figures[name].get(labels, 0.0) + value
    found.answers = {name: _vector(values, end) for name, values in figures.items()}
    found.answers[q.CAPACITY] = _vector({key: float(len(ts)) for key, ts in capacity.items()}, end)
    found.answers[q.POD_SHARES] = _matrix(pod_shares)
    found.answers[q.POD_SEEN] = _matrix(pod_seen)
    found.answers[q.HOSTS] = _matrix(hosts)
    return found
