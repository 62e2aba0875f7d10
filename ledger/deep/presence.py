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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
    count = 3600 // step
    series = []
    for key, row in answers.get(q.PRESENCE, empty).series.items():
        metric = {name: value for name, value in zip(labels, key, strict=True) if value}
        series.append((key, metric, [i for i, value in enumerate(row) if value == value]))
    # The pod series of each GPU in each window.
    per_gpu: dict[tuple, array] = {}
    for _key, metric, positions in series:
        if metric.get(pod):
            gpu = tuple(metric.get(name) for name in q.GPU_LABELS)
            counts = per_gpu.get(gpu)
            if counts is None:
                counts = per_gpu[gpu] = array("i", [0]) * count
            for position in positions:
                counts[position] += 1
    figures: dict[str, dict[Labels, float]] = {name: {} for name in q.SERIES_FIGURES}
    capacity: dict[Labels, set[int]] = defaultdict(set)
    shares_of: dict[Labels, array] = {}
    seen_of: dict[Labels, array] = {}
    hosts_of: dict[Labels, array] = {}
    nothing = array("d", [math.nan]) * count
    for key, metric, positions in series:
        capacity[_pick(metric, c.DCGM_IDENTITY_LABELS)].update(positions)
        host = _pick(metric, host_labels)
        present = hosts_of.get(host)
        if present is None:
            present = hosts_of[host] = array("d", [0.0]) * count
        for position in positions:
            present[position] = 1.0
        if not metric.get(pod):
            continue
        counts = per_gpu[tuple(metric.get(name) for name in q.GPU_LABELS)]
        share_key, seen_key = _pick(metric, share_labels), _pick(metric, seen_labels)
        shares = shares_of.get(share_key)
        if shares is None:
            shares = shares_of[share_key] = array("d", [0.0]) * count
        seen = seen_of.get(seen_key)
        if seen is None:
            seen = seen_of[seen_key] = array("d", [0.0]) * count
        sm_row, gr_row, tensor_row, util_row = (by_key.get(key, nothing) for by_key in metrics)
        sums = _sums(limits, positions, counts, shares, seen, sm_row, gr_row, tensor_row, util_row)
        labelled = tuple(sorted(metric.items()))
        for name, value in sums.items():
            figures[name][labelled] = figures[name].get(labelled, 0.0) + value
    found.answers = {name: _vector(values, end) for name, values in figures.items()}
    found.answers[q.CAPACITY] = _vector(
        {key: float(len(positions)) for key, positions in capacity.items()}, end
    )
    found.answers[q.POD_SHARES] = _rows(shares_of, first, step)
    found.answers[q.POD_SEEN] = _rows(seen_of, first, step)
    found.answers[q.HOSTS] = _rows(hosts_of, first, step)
    return found


def _rows(rows: dict[Labels, array], first: float, step: int) -> list[dict]:
    """Per-window sums as a matrix answer (a window without any contribution has no point)."""
    return [
        {
            "metric": dict(labels),
            "values": [[first + i * step, repr(value)] for i, value in enumerate(row) if value],
        }
        for labels, row in rows.items()
    ]


def _sums(
    limits: Thresholds,
    positions: list[int],
    counts: array,
    shares: array,
    seen: array,
    sm_row: array,
    gr_row: array,
    tensor_row: array,
    util_row: array,
) -> dict[str, float]:
    """One pod series' figures summed over its windows (``positions``), as
    ``fleet.ingest.build_window`` counts them per window; adds its share of its GPU and its
    presence to its pod's per-window ``shares`` and ``seen``. A figure no window added to is
    left out (as Prometheus' sum over no point is no answer)."""
    idle, busy_util, busy_sm = limits.idle, limits.busy_gpu_util, limits.busy_sm_active
    sums: dict[str, float] = {}
    for position in positions:
        n = counts[position]
        share = 1 / n
        shares[position] += share
        seen[position] += 1
        sums["allocated"] = sums.get("allocated", 0.0) + share
        if n > 1:
            sums["shared"] = sums.get("shared", 0.0) + share
        sm, gr = sm_row[position], gr_row[position]
        activity = sm if sm == sm else gr
        if activity == activity:
            sums["telemetry"] = sums.get("telemetry", 0.0) + share
            sums["active"] = sums.get("active", 0.0) + share * activity
            if activity < idle:
                sums["idle"] = sums.get("idle", 0.0) + share
            if sm != sm:
                sums["fallback"] = sums.get("fallback", 0.0) + share
        tensor = tensor_row[position]
        if tensor == tensor:
            sums["tensor"] = sums.get("tensor", 0.0) + share * tensor
            sums["tensor_covered"] = sums.get("tensor_covered", 0.0) + share
        util = util_row[position]
        if util == util:
            sums["util"] = sums.get("util", 0.0) + share * util / 100
            sums["util_covered"] = sums.get("util_covered", 0.0) + share
            if sm == sm and util >= busy_util and sm < busy_sm:
                sums["busy"] = sums.get("busy", 0.0) + share
    return sums


# The metrics of ``DeepQueries.samples`` by ``__name__``, and the per-window answer each gives
# (``None``: presence only).
_NAMES = tuple(c.DCGM_METRICS.values())
_KEYS = tuple(key if key in q.METRIC_KEYS else None for key in c.DCGM_METRICS)


def bin_samples(
    items: list[dict], labels: tuple[str, ...], first: float, step: int
) -> dict[str, Windows]:
    """``bin_columns`` of a JSON answer of ``DeepQueries.samples`` (an instant query of a range
    selector: matrix items, one per stored series); unusable items and points are skipped and
    counted, the rest kept."""
    stats = IngestStats()
    kept: list[dict[str, str]] = []
    points: list[Any] = []
    lengths: list[int] = []
    for item in items:
        if (
            not isinstance(item, dict)
            or not isinstance(metric := item.get("metric"), dict)
            or not isinstance(values := item.get("values"), list)
        ):
            stats.skip("malformed_matrix_item")
            continue
        kept.append(metric)
        points.extend(values)
        lengths.append(len(values))
    times, values, good = _columns(points, stats)
    if not good.all():
        positions = np.repeat(np.arange(len(lengths)), lengths)[good]
        lengths = np.bincount(positions, minlength=len(lengths)).tolist()
    times_ms = np.rint(times * 1000).astype(np.int64)
    return bin_columns(kept, lengths, times_ms, values, labels, first, step, stats)


def bin_columns(
    series_labels: list[dict[str, str]],
    lengths: list[int],
    times_ms: np.ndarray,
    values: np.ndarray,
    labels: tuple[str, ...],
    first: float,
    step: int,
    stats: IngestStats | None = None,
) -> dict[str, Windows]:
    """The stored samples of the six DCGM metrics over the hour (``series_labels``: each stored
    series' labels, ``lengths`` its sample count; ``times_ms`` and ``values`` the samples, series
    after series) binned into the hour's windows, as the range answers of
    ``DeepQueries.presence`` and ``DeepQueries.metric_windows`` give them.

    Window ``i`` ends at ``first + i * step`` and holds the samples after the previous end up to
    and including its own (``<function>_over_time(<metric>[<window> - 1ms])`` at its end). Per
    series (its values of ``labels``) and window:

    - ``PRESENCE``: 1 where a stored series of any of the six metrics has a sample (NaN samples
      count), NaN elsewhere;
    - per ``METRIC_KEYS`` key: the largest of the stored series' averages over the window
      (``max by``) where one is finite and none is +Inf, as Prometheus computes them: an average
      is NaN when a sample is NaN or both infinities occur, else ±Inf when a sample is. A window
      with samples and no such answer counts as a non-finite skip.

    A series of another metric is skipped and counted; samples outside the hour too.
    """
    stats = stats if stats is not None else IngestStats()
    count = 3600 // step
    wanted = {name: position for position, name in enumerate(_NAMES)}
    positions = [wanted.get(str(metric.get("__name__")), -1) for metric in series_labels]
    group_of: dict[tuple[str, ...], int] = {}
    groups_list = []
    for metric, position in zip(series_labels, positions, strict=True):
        if position < 0:
            stats.skip("malformed_matrix_item")
            groups_list.append(-1)
            continue
        key = tuple(sys.intern(str(metric.get(name) or "")) for name in labels)
        groups_list.append(group_of.setdefault(key, len(group_of)))
    groups = np.asarray(groups_list, dtype=np.int64)
    group_keys = list(group_of)
    item_of = np.repeat(np.arange(len(series_labels), dtype=np.int64), lengths)
    # Window of each sample: (first + (i - 1) * step, first + i * step], in milliseconds.
    offset = times_ms - round((first - step) * 1000) - 1
    window = offset // (step * 1000)
    inside = (offset >= 0) & (window < count)
    if not inside.all():
        outside = ~inside & (groups[item_of] >= 0)
        stats.skip("matrix_point_outside_the_hour", int(outside.sum()))
    inside &= groups[item_of] >= 0
    item_of, window, values = item_of[inside], window[inside], values[inside]
    shape = (len(series_labels), count)
    cells = item_of * count + window
    samples = np.bincount(cells, minlength=shape[0] * count).reshape(shape)

    def flagged(flags: np.ndarray) -> np.ndarray:
        return np.bincount(cells, weights=flags, minlength=shape[0] * count).reshape(shape) > 0

    finite = np.isfinite(values)
    sums = np.bincount(cells, weights=np.where(finite, values, 0.0), minlength=shape[0] * count)
    nan = flagged(np.isnan(values))
    high, low = flagged(values == math.inf), flagged(values == -math.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        averages = sums.reshape(shape) / samples
    # Per stored series and window: a finite average, +Inf (wins any max: no answer), or neither.
    usable = (samples > 0) & ~nan & ~high & ~low
    poisoned = (samples > 0) & ~nan & high & ~low
    candidates = np.where(usable, averages, -math.inf)
    found = {q.PRESENCE: Windows(stats=stats)}
    metrics_of = np.asarray(positions, dtype=np.int64)
    grid = (len(group_keys), count)
    for position, answer in enumerate(_KEYS):
        mine = np.flatnonzero(metrics_of == position)
        if answer is None or not len(mine):
            continue
        series = found.setdefault(answer, Windows()).series
        if len(np.unique(groups[mine])) == len(mine):
            # One stored series per answer series (the usual case): its averages as they are.
            best = np.full(grid, -math.inf)
            spoiled, sampled = np.zeros(grid, dtype=bool), np.zeros(grid, dtype=bool)
            best[groups[mine]] = candidates[mine]
            spoiled[groups[mine]] = poisoned[mine]
            sampled[groups[mine]] = samples[mine] > 0
        else:
            best = np.full(grid, -math.inf)
            spoiled, sampled = np.zeros(grid, dtype=bool), np.zeros(grid, dtype=bool)
            np.maximum.at(best, groups[mine], candidates[mine])
            np.logical_or.at(spoiled, groups[mine], poisoned[mine])
            np.logical_or.at(sampled, groups[mine], samples[mine] > 0)
        keep = (best > -math.inf) & ~spoiled
        stats.nonfinite_skipped += int((sampled & ~keep).sum())
        rows = np.where(keep, best, math.nan)
        for group in np.flatnonzero(keep.any(axis=1)):
            series[group_keys[group]] = _doubles(rows[group])
    present = np.zeros(grid, dtype=bool)
    present[groups[item_of], window] = True
    rows = np.where(present, 1.0, math.nan)
    series = found[q.PRESENCE].series
    for group in np.flatnonzero(present.any(axis=1)):
        series[group_keys[group]] = _doubles(rows[group])
    return found


def _doubles(row: np.ndarray) -> array:
    found = array("d")
    found.frombytes(np.ascontiguousarray(row, dtype=np.float64).tobytes())
    return found


def _columns(points: list[Any], stats: IngestStats) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Times and values of ``[time, "value"]`` points as doubles, and which points they are
    (unreadable points are skipped and counted)."""
    try:
        table = np.array(points, dtype=object).reshape(len(points), 2)
        times, values = table[:, 0].astype(np.float64), table[:, 1].astype(np.float64)
        return times, values, np.ones(len(points), dtype=bool)
    except (TypeError, ValueError):
        pass
    good = np.zeros(len(points), dtype=bool)
    times, values = np.zeros(len(points)), np.zeros(len(points))
    for number, point in enumerate(points):
        try:
            at, value = point
            times[number], values[number] = float(at), float(value)
        except (TypeError, ValueError):
            stats.skip("malformed_matrix_point")
            continue
        good[number] = True
    return times[good], values[good], good
