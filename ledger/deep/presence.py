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
import sys
from array import array
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


@dataclass
class Windows:
    """One range answer of a shard and hour, compacted as it arrives: per series (its label
    values in ``DeepQueries.by`` order, interned) its value in each window of the hour (NaN: no
    point), in an ``array`` of doubles; unusable items and points counted in ``stats``."""

    series: dict[tuple[str, ...], array] = field(default_factory=dict)
    stats: IngestStats = field(default_factory=IngestStats)


def compact(items: list[dict], labels: tuple[str, ...], first: float, step: int) -> Windows:
    """``items`` (a range answer over the hour's window ends ``first``, ``first + step``, ...,
    ``first + (3600 / step - 1) * step``) as ``Windows``. Non-finite values count as skipped and
    are left out (no telemetry), as ``parse_samples`` does."""
    found = Windows()
    stats = found.stats
    count = 3600 // step
    for item in items:
        if (
            not isinstance(item, dict)
            or not isinstance(metric := item.get("metric"), dict)
            or not isinstance(values := item.get("values"), list)
        ):
            stats.skip("malformed_matrix_item")
            continue
        key = tuple(sys.intern(str(metric.get(name) or "")) for name in labels)
        row = found.series.get(key)
        if row is None:
            row = found.series[key] = array("d", [math.nan]) * count
        for point in values:
            try:
                position, value = (float(point[0]) - first) / step, float(point[1])
            except (TypeError, ValueError, IndexError, KeyError):
                stats.skip("malformed_matrix_point")
                continue
            if not (position.is_integer() and 0 <= position < count):
                stats.skip("matrix_point_outside_the_hour")
            elif math.isfinite(value):
                row[int(position)] = value
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


def _at(row: array | None, position: int) -> float | None:
    if row is None:
        return None
    value = row[position]
    return None if value != value else value  # NaN: no point in that window


def derive(
    answers: dict[str, Windows],
    labels: tuple[str, ...],
    pod_labels: tuple[str, str, str],
    first: float,
    step: int,
    limits: Thresholds,
) -> Presence:
    """The hour's answers of one shard in the shapes ``ledger.deep.grain`` reads.

    ``answers``: the compacted range answers of ``DeepQueries.presence`` (``PRESENCE``) and of
    ``DeepQueries.metric_windows`` (by metric key), their series keyed by their values of
    ``labels``; ``first``, ``step``: the hour's first window end and the window; ``limits``: the
    idle and "busy but not working" thresholds."""
    namespace, pod, _container = pod_labels
    found = Presence()
    empty = Windows()
    for answer in answers.values():
        found.stats.merge(answer.stats)
    end = first + (3600 // step - 1) * step
    share_labels = (
        namespace,
        pod,
        *q.HOST_LABELS,
        c.LABEL_MODEL_NAME,
        c.LABEL_GPU_INSTANCE_PROFILE,
    )
    seen_labels = (namespace, pod, c.LABEL_GPU_INSTANCE_PROFILE)
    host_labels = (*q.HOST_LABELS, c.LABEL_MODEL_NAME)
    metrics = [answers.get(key, empty).series for key in q.METRIC_KEYS]
    series = []
    for key, row in answers.get(q.PRESENCE, empty).series.items():
        metric = {name: value for name, value in zip(labels, key, strict=True) if value}
        series.append((key, metric, [i for i, value in enumerate(row) if value == value]))
    # The pod series of each GPU in each window.
    per_gpu: dict[tuple, int] = defaultdict(int)
    for _key, metric, positions in series:
        if metric.get(pod):
            gpu = tuple(metric.get(name) for name in q.GPU_LABELS)
            for position in positions:
                per_gpu[(gpu, position)] += 1
    figures: dict[str, dict[Labels, float]] = {name: {} for name in q.SERIES_FIGURES}
    capacity: dict[Labels, set[int]] = defaultdict(set)
    pod_shares: dict[float, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
    pod_seen: dict[float, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
    hosts: dict[float, dict[Labels, float]] = defaultdict(dict)
    for key, metric, positions in series:
        capacity[_pick(metric, c.DCGM_IDENTITY_LABELS)].update(positions)
        host = _pick(metric, host_labels)
        for position in positions:
            hosts[first + position * step][host] = 1.0
        if not metric.get(pod):
            continue
        gpu = tuple(metric.get(name) for name in q.GPU_LABELS)
        share_key, seen_key = _pick(metric, share_labels), _pick(metric, seen_labels)
        rows = [by_key.get(key) for by_key in metrics]
        sums: dict[str, float] = {}
        for position in positions:
            ts = first + position * step
            n = per_gpu[(gpu, position)]
            share = 1 / n
            sums["allocated"] = sums.get("allocated", 0.0) + share
            if n > 1:
                sums["shared"] = sums.get("shared", 0.0) + share
            pod_shares[ts][share_key] += share
            pod_seen[ts][seen_key] += 1
            window = (_at(row, position) for row in rows)
            for name, value in _figures(limits, share, *window):
                sums[name] = sums.get(name, 0.0) + value
        labelled = tuple(sorted(metric.items()))
        for name, value in sums.items():
            figures[name][labelled] = figures[name].get(labelled, 0.0) + value
    found.answers = {name: _vector(values, end) for name, values in figures.items()}
    found.answers[q.CAPACITY] = _vector(
        {key: float(len(positions)) for key, positions in capacity.items()}, end
    )
    found.answers[q.POD_SHARES] = _matrix(pod_shares)
    found.answers[q.POD_SEEN] = _matrix(pod_seen)
    found.answers[q.HOSTS] = _matrix(hosts)
    return found
