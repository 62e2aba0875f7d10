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

from collections import defaultdict
from dataclasses import dataclass, field

from fleet import constants as c
from fleet.ingest import IngestStats
from ledger.deep import queries as q

Labels = tuple[tuple[str, str], ...]


@dataclass
class Presence:
    """The presence-derived answers of one shard and hour, and its time-sliced GPUs' UUIDs."""

    answers: dict[str, list[dict]] = field(default_factory=dict)
    sliced_uuids: list[str] = field(default_factory=list)
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


def derive(matrix: list[dict], pod_labels: tuple[str, str, str], end: float) -> Presence:
    """The presence-derived answers from the per-window series of one shard and hour.

    ``matrix``: the answer of ``DeepQueries.presence(shard)`` as a range query (its items
    carry the identity and pod labels); ``end``: the hour's end (the instant of hour values)."""
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
    series = _series(matrix, found.stats)
    # The pod series of each GPU in each window.
    per_gpu: dict[tuple, int] = defaultdict(int)
    for metric, times in series:
        if metric.get(pod):
            gpu = tuple(metric.get(name) for name in q.GPU_LABELS)
            for ts in times:
                per_gpu[(gpu, ts)] += 1
    allocated: dict[Labels, float] = {}
    shared: dict[Labels, float] = {}
    capacity: dict[Labels, set[float]] = defaultdict(set)
    pod_shares: dict[float, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
    pod_seen: dict[float, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
    hosts: dict[float, dict[Labels, float]] = defaultdict(dict)
    sliced: set[str] = set()
    for metric, times in series:
        capacity[_pick(metric, c.DCGM_IDENTITY_LABELS)].update(times)
        host = _pick(metric, host_labels)
        for ts in times:
            hosts[ts][host] = 1.0
        if not metric.get(pod):
            continue
        gpu = tuple(metric.get(name) for name in q.GPU_LABELS)
        share_key, seen_key = _pick(metric, share_labels), _pick(metric, seen_labels)
        held = apart = 0.0
        for ts in times:
            n = per_gpu[(gpu, ts)]
            share = 1 / n
            held += share
            if n > 1:
                apart += share
            pod_shares[ts][share_key] += share
            pod_seen[ts][seen_key] += 1
        labels = tuple(sorted((name, str(value)) for name, value in metric.items()))
        allocated[labels] = allocated.get(labels, 0.0) + held
        if apart:
            shared[labels] = shared.get(labels, 0.0) + apart
            sliced.add(str(metric.get(c.LABEL_UUID) or ""))
    found.answers = {
        "allocated": _vector(allocated, end),
        "shared": _vector(shared, end),
        q.CAPACITY: _vector({key: float(len(ts)) for key, ts in capacity.items()}, end),
        q.POD_SHARES: _matrix(pod_shares),
        q.POD_SEEN: _matrix(pod_seen),
        q.HOSTS: _matrix(hosts),
    }
    found.sliced_uuids = sorted(sliced - {""})
    return found
