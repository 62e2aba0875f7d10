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

They are computed on arrays (series x windows), every series' labels looked at once, and
handed over as ``Presence``: per pod series its figures summed over the hour, per label set its
per-window values.
"""

from __future__ import annotations

import math
import sys
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleet import constants as c
from fleet.ingest import IngestStats
from fleet.ingest.answers import matrix_items
from ledger.deep import queries as q
from ledger.rollup.row_figures import Thresholds

Labels = tuple[tuple[str, str], ...]


@dataclass
class PerWindow:
    """Per-window sums of one shard and hour: per label set (``labels``) a row of ``rows``, its
    value in each window of the hour (0: nothing in that window)."""

    labels: list[Labels] = field(default_factory=list)
    rows: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))


@dataclass
class Presence:
    """What one shard's hour adds up to, in the shapes ``ledger.deep.grain`` reads: per pod
    series (``series``: its non-empty labels) each of ``SERIES_FIGURES`` summed over the hour's
    windows (``figures``, a column per figure; NaN: no window added to it), per GPU identity the
    windows with any of its series (``capacity``), and per window ``POD_SHARES``, ``POD_SEEN``
    and ``HOSTS`` (``windows``; window ``i`` ends at ``first + i * step``)."""

    series: list[Labels] = field(default_factory=list)
    figures: np.ndarray = field(default_factory=lambda: np.zeros((0, len(q.SERIES_FIGURES))))
    capacity: dict[Labels, float] = field(default_factory=dict)
    windows: dict[str, PerWindow] = field(default_factory=dict)
    first: float = 0.0
    step: int = 60
    stats: IngestStats = field(default_factory=IngestStats)

    def figure(self, name: str) -> dict[Labels, float]:
        """One figure per pod series that has it."""
        column = self.figures[:, q.SERIES_FIGURES.index(name)].tolist()
        return {
            labels: value
            for labels, value in zip(self.series, column, strict=True)
            if value == value  # noqa: PLR0124 (NaN: no such figure)
        }

    def points(self, name: str) -> dict[Labels, list[tuple[float, float]]]:
        """One per-window answer: per label set its (window end, value) where it has one."""
        found = self.windows.get(name, PerWindow())
        return {
            labels: [(self.first + i * self.step, float(row[i])) for i in np.flatnonzero(row)]
            for labels, row in zip(found.labels, found.rows, strict=True)
        }


def _pick(metric: dict, names: tuple[str, ...]) -> Labels:
    """The non-empty labels of ``names`` (Prometheus drops empty labels from a grouping)."""
    return tuple((name, str(metric[name])) for name in names if metric.get(name))


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
    for metric, values in matrix_items(items, stats):
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
    idle and "busy but not working" thresholds. Every series is looked at once; the windows are
    columns of arrays (series x windows)."""
    namespace, pod, _container = pod_labels
    found = Presence(first=first, step=step)
    empty = Windows()
    for answer in answers.values():
        found.stats.merge(answer.stats)
    count = 3600 // step
    rows = answers.get(q.PRESENCE, empty).series
    keys = list(rows)
    present = _table(rows, keys, count)
    present = present == present  # noqa: PLR0124 (NaN: no point in the window)
    described = [
        {name: value for name, value in zip(labels, key, strict=True) if value} for key in keys
    ]
    pods = np.fromiter((bool(metric.get(pod)) for metric in described), bool, len(keys))
    live = present & pods[:, None]
    # The pod series of each GPU in each window, and each pod series' share of its GPU.
    gpu_groups, gpu_codes = _grouped(
        [tuple(m.get(name) for name in q.GPU_LABELS) for m in described]
    )
    counts = _sum_rows(gpu_codes, len(gpu_groups), live)[gpu_codes]
    shares = np.divide(1.0, counts, out=np.zeros(live.shape), where=live)
    found.capacity = _totals([_pick(m, c.DCGM_IDENTITY_LABELS) for m in described], present)
    found.windows[q.HOSTS] = _per_window(
        [_pick(m, (*q.HOST_LABELS, c.LABEL_MODEL_NAME)) for m in described], present, any_of=True
    )
    with_pod = np.flatnonzero(pods)
    pod_described = [described[i] for i in with_pod]
    share_labels = (
        namespace,
        pod,
        *q.HOST_LABELS,
        c.LABEL_MODEL_NAME,
        c.LABEL_GPU_INSTANCE_PROFILE,
    )
    found.windows[q.POD_SHARES] = _per_window(
        [_pick(m, share_labels) for m in pod_described], shares[with_pod]
    )
    found.windows[q.POD_SEEN] = _per_window(
        [_pick(m, (namespace, pod, c.LABEL_GPU_INSTANCE_PROFILE)) for m in pod_described],
        live[with_pod],
    )
    metrics = [
        _table(answers.get(key, empty).series, keys, count)[with_pod] for key in q.METRIC_KEYS
    ]
    sums = _sums(limits, live[with_pod], counts[with_pod], shares[with_pod], *metrics)
    found.series = [tuple(sorted(m.items())) for m in pod_described]
    found.figures = sums
    return found


def _table(
    series: dict[tuple[str, ...], array], keys: list[tuple[str, ...]], count: int
) -> np.ndarray:
    """The rows of ``keys`` in ``series`` as a (series x windows) table; NaN where none."""
    table = np.full((len(keys), count), math.nan)
    for number, key in enumerate(keys):
        row = series.get(key)
        if row is not None:
            table[number] = np.frombuffer(row, dtype=np.float64)
    return table


def _grouped(keys: list[Any]) -> tuple[list[Any], np.ndarray]:
    """The distinct ``keys`` (in order of appearance) and each key's position among them."""
    index: dict[Any, int] = {}
    codes = np.fromiter((index.setdefault(key, len(index)) for key in keys), np.int64, len(keys))
    return list(index), codes


def _sum_rows(codes: np.ndarray, groups: int, rows: np.ndarray) -> np.ndarray:
    found = np.zeros((groups, rows.shape[1]))
    np.add.at(found, codes, rows)
    return found


def _per_window(labels: list[Labels], rows: np.ndarray, *, any_of: bool = False) -> PerWindow:
    """``rows`` summed per distinct label set (``any_of``: 1 where any row is non-zero)."""
    groups, codes = _grouped(labels)
    summed = _sum_rows(codes, len(groups), rows)
    return PerWindow(groups, (summed != 0).astype(np.float64) if any_of else summed)


def _totals(labels: list[Labels], present: np.ndarray) -> dict[Labels, float]:
    """Per distinct label set: the windows with any of its rows present."""
    groups, codes = _grouped(labels)
    windows = (_sum_rows(codes, len(groups), present) > 0).sum(axis=1)
    return dict(zip(groups, windows.astype(np.float64).tolist(), strict=True))


def _sums(
    limits: Thresholds,
    live: np.ndarray,
    counts: np.ndarray,
    shares: np.ndarray,
    sm: np.ndarray,
    gr: np.ndarray,
    tensor: np.ndarray,
    util: np.ndarray,
) -> np.ndarray:
    """Per pod series (rows) each of ``SERIES_FIGURES`` summed over the windows it is present
    in (``live``), as ``fleet.ingest.build_window`` counts them per window: its share of its GPU
    (``1 / counts``), times a metric's average where one counts. NaN where no window added to a
    figure (as Prometheus' sum over no point is no answer)."""
    with np.errstate(invalid="ignore"):
        activity = np.where(sm == sm, sm, gr)  # noqa: PLR0124
        active = live & (activity == activity)  # noqa: PLR0124
        tensor_ok = live & (tensor == tensor)  # noqa: PLR0124
        util_ok = live & (util == util)  # noqa: PLR0124
        parts = {
            "allocated": (live, shares),
            "shared": (live & (counts > 1), shares),
            "telemetry": (active, shares),
            "active": (active, shares * activity),
            "idle": (active & (activity < limits.idle), shares),
            "fallback": (active & (sm != sm), shares),  # noqa: PLR0124
            "tensor": (tensor_ok, shares * tensor),
            "tensor_covered": (tensor_ok, shares),
            "util": (util_ok, shares * util / 100),
            "util_covered": (util_ok, shares),
            "busy": (
                util_ok
                & (sm == sm)
                & (util >= limits.busy_gpu_util)
                & (sm < limits.busy_sm_active),  # noqa: PLR0124
                shares,
            ),
        }
        found = np.full((live.shape[0], len(q.SERIES_FIGURES)), math.nan)
        for column, name in enumerate(q.SERIES_FIGURES):
            mask, weights = parts[name]
            totals = np.where(mask, weights, 0.0).sum(axis=1)
            found[:, column] = np.where(mask.any(axis=1), totals, math.nan)
    return found


# The metrics of ``DeepQueries.samples`` by ``__name__``, and the per-window answer each gives
# (``None``: presence only).
_NAMES = tuple(c.DCGM_METRICS.values())
_POSITIONS = {name: position for position, name in enumerate(_NAMES)}
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
    for metric, item_points in matrix_items(items, stats):
        kept.append(metric)
        points.extend(item_points)
        lengths.append(len(item_points))
    times, values, good = _columns(points, stats)
    series = np.repeat(np.arange(len(lengths)), lengths)
    if not good.all():
        series = series[good]
    times_ms = np.rint(times * 1000).astype(np.int64)
    return bin_columns(kept, series, times_ms, values, labels, first, step, stats)


def bin_columns(
    series_labels: list[dict[str, str]],
    sample_series: np.ndarray,
    times_ms: np.ndarray,
    values: np.ndarray,
    labels: tuple[str, ...],
    first: float,
    step: int,
    stats: IngestStats | None = None,
    kept_labels: bool = False,
) -> dict[str, Windows]:
    """The stored samples of the six DCGM metrics over the hour (``series_labels``: each stored
    series' labels; ``sample_series``, ``times_ms`` and ``values``: each sample's series, an
    index into ``series_labels``, its time and value, in any order) binned into the hour's
    windows, as the range answers of ``DeepQueries.presence`` and ``DeepQueries.metric_windows``
    give them.

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
    ``kept_labels``: the ``series_labels`` dicts are the ones ``remote`` keeps across answers,
    so each series' metric and key are looked up by the dict (``_series_key``).
    """
    stats = stats if stats is not None else IngestStats()
    count = 3600 // step
    positions: list[int] = []
    group_of: dict[tuple[str, ...], int] = {}
    groups_list = []
    for metric in series_labels:
        position, key = _series_key(metric, labels, kept_labels)
        positions.append(position)
        if position < 0:
            stats.skip("malformed_matrix_item")
            groups_list.append(-1)
            continue
        groups_list.append(group_of.setdefault(key, len(group_of)))
    groups = np.asarray(groups_list, dtype=np.int64)
    group_keys = list(group_of)
    item_of = np.asarray(sample_series, dtype=np.int64)
    # Window of each sample: (first + (i - 1) * step, first + i * step], in milliseconds.
    offset = times_ms - round((first - step) * 1000) - 1
    window = offset // (step * 1000)
    inside = (offset >= 0) & (window < count)
    wanted_sample = groups[item_of] >= 0
    if not inside.all():
        outside = ~inside & wanted_sample
        stats.skip("matrix_point_outside_the_hour", int(outside.sum()))
    inside &= wanted_sample
    if not inside.all():
        item_of, window, values = item_of[inside], window[inside], values[inside]
    shape = (len(series_labels), count)
    cells = item_of * count + window
    samples = np.bincount(cells, minlength=shape[0] * count).reshape(shape)

    def flagged(flags: np.ndarray) -> np.ndarray:
        return np.bincount(cells, weights=flags, minlength=shape[0] * count).reshape(shape) > 0

    finite = np.isfinite(values)
    if finite.all():  # the usual case: no NaN or infinite sample
        sums = np.bincount(cells, weights=values, minlength=shape[0] * count)
        nan = high = low = np.zeros(shape, dtype=bool)
    else:
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
        _add_rows(series, group_keys, np.where(keep, best, math.nan), np.any(keep, axis=1))
    present = np.zeros(grid, dtype=bool)
    present[groups[item_of], window] = True
    rows = np.where(present, 1.0, math.nan)
    _add_rows(found[q.PRESENCE].series, group_keys, rows, np.any(present, axis=1))
    return found


# Each stored series' metric (its position in ``_NAMES``, -1: not one of them) and answer key,
# by its labels dict and the key's label names: the remote read answers give a series the same
# dict hour after hour (``remote._LABEL_CACHE``), so they are worked out once a series. An
# entry holds its dict, so no other dict takes its id while it is cached. Emptied when full.
_SERIES_KEYS: dict[tuple[int, tuple[str, ...]], tuple[dict[str, str], int, tuple[str, ...]]] = {}
_SERIES_KEYS_SIZE = 1 << 19


def _series_key(
    metric: dict[str, str], labels: tuple[str, ...], kept: bool
) -> tuple[int, tuple[str, ...]]:
    """A stored series' metric position and key (its values of ``labels``)."""
    if kept:
        hit = _SERIES_KEYS.get((id(metric), labels))
        if hit is not None and hit[0] is metric:
            return hit[1], hit[2]
    position = _POSITIONS.get(str(metric.get("__name__")), -1)
    key = tuple(sys.intern(str(metric.get(name) or "")) for name in labels) if position >= 0 else ()
    if kept:
        if len(_SERIES_KEYS) >= _SERIES_KEYS_SIZE:
            _SERIES_KEYS.clear()
        _SERIES_KEYS[(id(metric), labels)] = (metric, position, key)
    return position, key


def _add_rows(
    series: dict[tuple[str, ...], array],
    keys: list[tuple[str, ...]],
    rows: np.ndarray,
    wanted: np.ndarray,
) -> None:
    """``series[keys[i]]``: row ``i`` of ``rows`` as doubles, for each ``wanted`` row."""
    data = memoryview(np.ascontiguousarray(rows, dtype=np.float64).tobytes())
    size = rows.shape[1] * 8
    for group in np.flatnonzero(wanted).tolist():
        found = array("d")
        found.frombytes(data[group * size : (group + 1) * size])
        series[keys[group]] = found


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
