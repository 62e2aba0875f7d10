"""Queue service-level figures, read from admission records: the one definition of each.

For a group (ClusterQueue, LocalQueue, cohort, team or priority class) and a period ``(start, end]``
(the whole range, or each UTC hour or day in it, clipped to the range):

- ``admissions``: records whose ``admitted_at`` falls in the period;
- ``wait_seconds_*``: queued -> admitted of those admissions; p50/p90/p95 are nearest rank
  (``servicelevels.stats.nearest_rank``), ``max`` and ``mean`` are plain;
- ``running_delay_seconds_*``: admitted -> first pod Running, over those admissions whose pods ran;
- ``pending_at_end``: records queued at or before the period's end and not yet admitted, evicted or
  finished then; ``oldest_pending_seconds`` is the longest of their waits at the end;
- ``evictions``: records evicted in the period, by reason; ``preemptions`` those whose reason is
  Preempted, by the Preempted condition's reason and by the preempting ClusterQueue;
- ``preempted_gpu_hours``: the GPU-hours of the runs that ended in a preemption in the period, from
  the first pod Running to the eviction (a run whose pods never ran lost no GPU time).

Visibility is the caller's: pass the teams a user may see (None = every team, admins only;
records of no team are then shown too). A preempting ClusterQueue of a team the user may not
see is counted under ``HIDDEN_QUEUE``, never named.

Periods before a cluster's first record (they end at or before its earliest ``queued_at``, or the
cluster has no record) come from Kueue's metrics (``QueueMetricsHour``) where those hours are
stored, with ``source = "metrics"``: whole UTC hours inside the period, grouped by ClusterQueue,
LocalQueue, or the ClusterQueue's cohort or team as the queues are configured now (no priority
class: the metrics do not say it). ``admissions`` and ``evictions`` are the counters'; the wait
percentiles are Prometheus's ``histogram_quantile`` for one queue's hour, and for a longer period
or several queues the same interpolation over the summed buckets (bucket resolution); the mean is
the histograms' sum / count. ``preemptions`` are the Preempted evictions, and
``preemptions_made`` the workloads the group's queues preempted (Kueue counts preemptions by the
preempting queue). What the metrics cannot know is None: the maximum wait, the running delay,
pending at the end and its oldest age, preempted GPU-hours.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, overload

import numpy as np
from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Count, Q, QuerySet

from core.epoch import EpochSeconds
from core.timewindows import floor_time
from quotas.models import ClusterQueue, LocalQueue
from servicelevels.choices import EvictionReason
from servicelevels.metrics import HOUR, bucket_quantile
from servicelevels.models import AdmissionRecord, QueueMetricsHour
from servicelevels.stats import ranks

GROUP_BY = ("cluster_queue", "local_queue", "cohort", "team", "priority_class")
STEPS = ("none", "hour", "day")
SOURCE_RECORDS = "records"
SOURCE_METRICS = "metrics"
# What a viewer who may not see the preempting queue's team reads in its place.
HIDDEN_QUEUE = "(another team)"

_STEP_DELTA = {"hour": timedelta(hours=1), "day": timedelta(days=1)}


@dataclass(slots=True)
class LevelRow:
    """The figures of one group over one period."""

    group: str
    cluster: str
    period_start: datetime
    period_end: datetime
    admissions: int = 0
    wait_seconds_p50: float | None = None
    wait_seconds_p90: float | None = None
    wait_seconds_p95: float | None = None
    wait_seconds_max: float | None = None
    wait_seconds_mean: float | None = None
    running_delay_seconds_p50: float | None = None
    running_delay_seconds_p95: float | None = None
    pending_at_end: int | None = 0
    oldest_pending_seconds: float | None = None
    evictions: dict[str, int] = field(default_factory=dict)
    preemptions: int = 0
    preemptions_by_reason: dict[str, int] = field(default_factory=dict)
    preemptions_by_queue: dict[str, int] = field(default_factory=dict)
    preempted_gpu_hours: float | None = 0.0
    source: str = SOURCE_RECORDS
    preemptions_made: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "cluster": self.cluster,
            "period_start": self.period_start,
            "period_end": self.period_end,
            "admissions": self.admissions,
            "wait_seconds_p50": self.wait_seconds_p50,
            "wait_seconds_p90": self.wait_seconds_p90,
            "wait_seconds_p95": self.wait_seconds_p95,
            "wait_seconds_max": self.wait_seconds_max,
            "wait_seconds_mean": self.wait_seconds_mean,
            "running_delay_seconds_p50": self.running_delay_seconds_p50,
            "running_delay_seconds_p95": self.running_delay_seconds_p95,
            "pending_at_end": self.pending_at_end,
            "oldest_pending_seconds": self.oldest_pending_seconds,
            "evictions": dict(self.evictions),
            "preemptions": self.preemptions,
            "preemptions_by_reason": dict(self.preemptions_by_reason),
            "preemptions_by_queue": dict(self.preemptions_by_queue),
            "preempted_gpu_hours": self.preempted_gpu_hours,
            "source": self.source,
            "preemptions_made": dict(self.preemptions_made),
        }


def periods(start: datetime, end: datetime, step: str) -> list[tuple[datetime, datetime]]:
    """The periods ``(a, b]`` of ``(start, end]``: the whole range, or each UTC hour or day."""
    if step not in STEPS:
        raise ValueError(f"step must be one of {', '.join(STEPS)}")
    if end <= start:
        return []
    if step == "none":
        return [(start, end)]
    delta = _STEP_DELTA[step]
    edge = floor_time(start, int(delta.total_seconds()))
    out: list[tuple[datetime, datetime]] = []
    while edge < end:
        stop = edge + delta
        out.append((max(edge, start), min(stop, end)))
        edge = stop
    return out


# The columns that name a record's group, per grouping (ids are named after the read).
_GROUP_COLUMNS = {
    "cluster_queue": ("cluster_queue_name",),
    "local_queue": ("namespace", "local_queue_name"),
    "cohort": ("cohort_name",),
    "team": ("team_id",),
    "priority_class": ("priority_class_name",),
}
# The times, read as Unix seconds (``EpochSeconds``): a month of a large fleet's records is read
# in one pass, and floats load far faster than aware datetimes.
_TIMES = ("queued_at", "admitted_at", "running_at", "evicted_at", "finished_at")
_EPOCHS = {f"e_{name}": EpochSeconds(name) for name in _TIMES}
# What an eviction row carries after its group's columns (read only for the records evicted
# in the range).
_EVICTION = (
    "gpus",
    "eviction_reason",
    "preemption_reason",
    "preempting_cluster_queue_name",
    "e_running_at",
    "e_evicted_at",
)


def records(
    start: datetime,
    end: datetime,
    *,
    cluster: str | None = None,
    teams: Iterable[int] | None = None,
    cluster_queue: str | None = None,
) -> QuerySet[AdmissionRecord]:
    """Every record that can count in ``(start, end]``: admitted, evicted or pending in it (of
    one ClusterQueue, by name, when ``cluster_queue`` is given)."""
    qs = AdmissionRecord.objects.filter(queued_at__lte=end).filter(
        Q(admitted_at__gt=start)
        | Q(evicted_at__gt=start)
        | Q(admitted_at__isnull=True, finished_at__isnull=True, evicted_at__isnull=True)
        | Q(admitted_at__isnull=True, finished_at__gt=start)
        | Q(admitted_at__isnull=True, evicted_at__gt=start)
    )
    if cluster:
        qs = qs.filter(cluster__name=cluster)
    if teams is not None:
        qs = qs.filter(team_id__in=list(teams))
    if cluster_queue:
        qs = qs.filter(cluster_queue_name=cluster_queue)
    return qs


def _read(queryset: QuerySet[Any, Any]) -> list[tuple[Any, ...]]:
    """The value tuples of ``queryset`` straight from the database cursor: the columns are
    floats, ids and text, which need none of the ORM's per-row conversions."""
    try:
        sql, params = queryset.query.get_compiler(queryset.db).as_sql()
    except EmptyResultSet:  # e.g. a filter on no teams: nothing to read
        return []
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def levels(
    start: datetime,
    end: datetime,
    *,
    group_by: str = "cluster_queue",
    step: str = "none",
    cluster: str | None = None,
    teams: Iterable[int] | None = None,
    cluster_queue: str | None = None,
) -> Sequence[LevelRow]:
    """The figures per group and period, ordered by cluster, group, then period (only of the
    records of one ClusterQueue, by name, when ``cluster_queue`` is given).

    The groups are listed first (one small query): the rows are every group times every period,
    so their number and order are known before any record is read. The rows are built when read
    (``Levels`` is a sequence): a slice of them (a page of the API) reads and computes the records
    of only its own groups, everything else reads all the groups at once; a group's figures are
    the same either way, since each group's cells depend on its own records only. From the
    records, arrays: each admission and eviction lands in the period that holds it (periods are
    ``(a, b]``, found by a sorted search of their ends); waits are sorted per (group, period)
    once, and each percentile is an index into its run of sorted waits; a record counts as
    pending at every period end between its queueing and its admission, eviction or finish.
    Periods answered from Kueue's metrics make the answer a plain list.
    """
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}")
    spans = periods(start, end, step)
    team_ids = None if teams is None else list(teams)
    if not spans:
        return []
    # No ORDER BY: the model's ordering would join and sort every record for nothing.
    base = (
        records(start, end, cluster=cluster, teams=team_ids, cluster_queue=cluster_queue)
        .order_by()
        .annotate(**_EPOCHS)
    )
    columns = ("cluster_id", *_GROUP_COLUMNS[group_by])
    keys = _read(base.values_list(*columns).distinct().order_by(*columns))
    names = _Names(group_by)
    labelled = sorted((names.label(key), index) for index, key in enumerate(keys))
    shown = None if team_ids is None else visible_queue_names(team_ids)
    reader = _GroupReader(base, columns, spans, start, end)
    from_records = Levels([(label, keys[index]) for label, index in labelled], spans, reader, shown)
    from_metrics = _metrics_rows(spans, group_by, cluster, team_ids, cluster_queue)
    if not from_metrics:
        return from_records
    # Hours before the install: the metrics' rows replace the records' (empty) ones.
    taken = {(row.cluster, row.group, row.period_start) for row in from_metrics}
    merged = [
        row for row in from_records if (row.cluster, row.group, row.period_start) not in taken
    ]
    merged.extend(from_metrics)
    merged.sort(key=lambda row: (row.cluster, row.group, row.period_start))
    return merged


# A slice of more groups than this reads every record and keeps those of its own groups: the
# IN lists of the restriction stay short (SQLite bounds a statement's parameters), and such a
# slice holds most groups anyway.
RESTRICT_UP_TO = 2000


class _GroupReader:
    """The figures of some of the listed groups, from the records of those groups only.

    A record is placed by its own group columns, never by a position: a record of a group that
    was written after the groups were listed (the sync runs beside the pages) belongs to no
    listed group and is left out, as if it had been written just after this read; it can never
    count under another group's name.
    """

    def __init__(
        self,
        base: QuerySet[AdmissionRecord, Any],
        columns: tuple[str, ...],
        spans: list[tuple[datetime, datetime]],
        start: datetime,
        end: datetime,
    ) -> None:
        self.base, self.columns, self.spans = base, columns, spans
        self.start, self.end = start, end

    def tally(self, keys: list[tuple[Any, ...]], every: bool) -> _Tally:
        """The cells of ``keys`` (numbered in their order); ``every``: they are all the groups,
        so the read needs no restriction. Records of other groups are left out by key."""
        if not every and len(keys) <= RESTRICT_UP_TO:
            base = self.base.filter(_of_groups(self.columns, keys))
        else:
            base = self.base
        number = {key: index for index, key in enumerate(keys)}
        width = len(self.columns)
        tally = _Tally(len(keys), self.spans)
        rows = _read(base.values_list(*self.columns, *_EPOCHS))
        if not rows:
            return tally
        group_of = np.array([number.get(row[:width], -1) for row in rows], dtype=np.int64)
        values = np.array([row[width:] for row in rows], dtype=float)
        known = group_of >= 0
        group_of, values = group_of[known], values[known]
        tally.add(group_of, {name: values[:, i] for i, name in enumerate(_TIMES)})
        evicted = base.filter(evicted_at__gt=self.start, evicted_at__lte=self.end)
        tally.add_evictions(_read(evicted.values_list(*self.columns, *_EVICTION)), number, width)
        return tally


def _of_groups(columns: tuple[str, ...], keys: list[tuple[Any, ...]]) -> Q:
    """Records of at least these groups: each column among the keys' values (a few more groups
    may match the combination; the reader drops their records by key)."""
    condition = Q()
    for position, column in enumerate(columns):
        values = {key[position] for key in keys}
        part = Q(**{f"{column}__in": sorted(value for value in values if value is not None)})
        if None in values:
            part |= Q(**{f"{column}__isnull": True})
        condition &= part
    return condition


class _Names:
    """Cluster and team names for the ids the read returns, looked up once."""

    def __init__(self, group_by: str) -> None:
        from fleet.models import Cluster
        from quotas.models import Team

        self.group_by = group_by
        self.clusters = dict(Cluster.objects.values_list("pk", "name"))
        self.teams = dict(Team.objects.values_list("pk", "name")) if group_by == "team" else {}

    def label(self, key: tuple[Any, ...]) -> tuple[str, str]:
        """(cluster, group) of a group key: the cluster id, then the group's columns."""
        cluster = self.clusters.get(key[0], "")
        if self.group_by == "team":
            return cluster, self.teams.get(key[1], "") if key[1] is not None else ""
        if self.group_by == "local_queue":
            return cluster, f"{key[1]}/{key[2]}" if key[2] else ""
        return cluster, key[1] or ""


class Levels(Sequence[LevelRow]):
    """The rows of ``levels``: (cluster, group) pairs in order, each with every period.

    A slice reads the records of its own groups only; indexing one row or iterating reads every
    group once (kept for further reads)."""

    def __init__(
        self,
        groups: list[tuple[tuple[str, str], tuple[Any, ...]]],
        spans: list[tuple[datetime, datetime]],
        reader: _GroupReader,
        shown: set[tuple[str, str]] | None,
    ) -> None:
        self.groups, self.spans, self.reader, self.shown = groups, spans, reader, shown
        self._every: _Tally | None = None

    def __len__(self) -> int:
        return len(self.groups) * len(self.spans)

    @overload
    def __getitem__(self, index: int) -> LevelRow: ...

    @overload
    def __getitem__(self, index: slice) -> list[LevelRow]: ...

    def __getitem__(self, index: int | slice) -> LevelRow | list[LevelRow]:
        if isinstance(index, slice):
            positions = range(*index.indices(len(self)))
            if not positions:
                return []
            if self._every is not None:
                return [self._row(position, self._every, 0) for position in positions]
            low = min(positions[0], positions[-1]) // len(self.spans)
            high = max(positions[0], positions[-1]) // len(self.spans) + 1
            if high - low == len(self.groups):
                return [self._row(position, self._all(), 0) for position in positions]
            keys = [key for _, key in self.groups[low:high]]
            tally = self.reader.tally(keys, every=False)
            return [self._row(position, tally, low) for position in positions]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._row(index, self._all(), 0)

    def __iter__(self) -> Iterator[LevelRow]:
        if not len(self):
            return
        tally = self._all()
        for position in range(len(self)):
            yield self._row(position, tally, 0)

    def _all(self) -> _Tally:
        if self._every is None:
            self._every = self.reader.tally([key for _, key in self.groups], every=True)
        return self._every

    def _row(self, position: int, tally: _Tally, first_group: int) -> LevelRow:
        """Row ``position`` from ``tally``, whose cells start at group ``first_group``."""
        group_position, period = divmod(position, len(self.spans))
        (cluster, group), _ = self.groups[group_position]
        period_start, period_end = self.spans[period]
        level = tally.row(
            group_position - first_group, period, group, cluster, period_start, period_end
        )
        if self.shown is not None and level.preemptions_by_queue:
            level.preemptions_by_queue = _hide_queues(
                level.preemptions_by_queue, cluster, self.shown
            )
        return level


class _Tally:
    """The figures of every (group, period) cell, gathered from the records' arrays."""

    def __init__(self, groups: int, spans: list[tuple[datetime, datetime]]) -> None:
        self.periods = len(spans)
        cells = groups * self.periods
        self.start = spans[0][0].timestamp()
        self.ends = np.array([stop.timestamp() for _, stop in spans], dtype=float)
        self.waits = _Sorted(cells)
        self.delays = _Sorted(cells)
        self.pending = np.zeros(cells, dtype=np.int64)
        self.oldest_queued = np.full(cells, math.inf)
        # Evictions are few: their rows, by cell.
        self.evicted: dict[int, list[tuple[Any, ...]]] = {}

    def _period(self, moments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The period index of each moment and whether it falls inside the range."""
        index = np.searchsorted(self.ends, moments, side="left")
        inside = (moments > self.start) & (index < self.periods)  # NaN compares False
        return index, inside

    def add(self, group_of: np.ndarray, t: dict[str, np.ndarray]) -> None:
        queued, admitted, running = t["queued_at"], t["admitted_at"], t["running_at"]
        base = group_of * self.periods
        index, inside = self._period(admitted)
        self.waits.put(base[inside] + index[inside], np.maximum(admitted - queued, 0.0)[inside])
        ran = inside & ~np.isnan(running)
        self.delays.put(base[ran] + index[ran], np.maximum(running - admitted, 0.0)[ran])
        # Pending at every period end b with queued <= b < the first of admitted/evicted/finished.
        stops = np.fmin(np.fmin(admitted, t["evicted_at"]), t["finished_at"])
        stops = np.where(np.isnan(stops), math.inf, stops)
        first = np.searchsorted(self.ends, queued, side="left")
        last = np.searchsorted(self.ends, stops, side="left")
        for row in np.flatnonzero(last > first):
            cells = slice(int(base[row] + first[row]), int(base[row] + last[row]))
            self.pending[cells] += 1
            np.minimum(self.oldest_queued[cells], queued[row], out=self.oldest_queued[cells])

    def add_evictions(
        self, rows: list[tuple[Any, ...]], keys: dict[tuple[Any, ...], int], width: int
    ) -> None:
        """The evictions in the range (group columns, then ``_EVICTION``), each in its group's
        cell of the period holding it."""
        if not rows:
            return
        index, inside = self._period(np.array([row[-1] for row in rows], dtype=float))
        for position, row in enumerate(rows):
            group = keys.get(row[:width])
            if group is None or not inside[position]:
                continue
            cell = group * self.periods + int(index[position])
            self.evicted.setdefault(cell, []).append(row[width:])

    def row(
        self,
        group_index: int,
        period: int,
        group: str,
        cluster: str,
        start: datetime,
        end: datetime,
    ) -> LevelRow:
        cell = group_index * self.periods + period
        level = LevelRow(group=group, cluster=cluster, period_start=start, period_end=end)
        level.pending_at_end = int(self.pending[cell])
        oldest = float(self.oldest_queued[cell])
        if oldest != math.inf:
            level.oldest_pending_seconds = end.timestamp() - oldest
        waits = self.waits.stats()
        level.admissions = int(waits["count"][cell])
        if level.admissions:
            level.wait_seconds_p50 = _value(waits["p50"], cell)
            level.wait_seconds_p90 = _value(waits["p90"], cell)
            level.wait_seconds_p95 = _value(waits["p95"], cell)
            level.wait_seconds_max = _value(waits["max"], cell)
            level.wait_seconds_mean = _value(waits["mean"], cell)
        delays = self.delays.stats()
        if delays["count"][cell]:
            level.running_delay_seconds_p50 = _value(delays["p50"], cell)
            level.running_delay_seconds_p95 = _value(delays["p95"], cell)
        # In one order whatever order the database returned them in, so the dicts' order and
        # the GPU-hours' float sum are the same for a page and for the whole answer.
        for evicted in sorted(self.evicted.get(cell, ()), key=_eviction_order):
            _count_eviction(level, evicted)
        return level


class _Sorted:
    """Values per cell; once all are in, each cell's count, nearest-rank percentiles, maximum and
    mean, for every cell at once (NaN where a cell has no value)."""

    def __init__(self, cells: int) -> None:
        self.cells = cells
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []
        self._stats: dict[str, np.ndarray] | None = None

    def put(self, cells: np.ndarray, values: np.ndarray) -> None:
        self.parts.append((cells, values))
        self._stats = None

    def stats(self) -> dict[str, np.ndarray]:
        if self._stats is None:
            self._stats = self._compute()
        return self._stats

    def _compute(self) -> dict[str, np.ndarray]:
        cells = np.concatenate([part[0] for part in self.parts] or [np.zeros(0, np.int64)])
        values = np.concatenate([part[1] for part in self.parts] or [np.zeros(0)])
        order = np.lexsort((values, cells))
        values = values[order]
        bounds = np.searchsorted(cells[order], np.arange(self.cells + 1), side="left")
        lower, count = bounds[:-1], np.diff(bounds)
        stats: dict[str, np.ndarray] = {"count": count}
        if not len(values):
            for name in (*PERCENTILES, "max", "mean"):
                stats[name] = np.full(self.cells, np.nan)
            return stats
        some = count > 0
        for name, q in PERCENTILES.items():
            # Nearest rank (servicelevels.stats); cells without values point anywhere valid and
            # are masked.
            at = np.minimum(lower + ranks(count, q) - 1, len(values) - 1)
            stats[name] = np.where(some, values[at], np.nan)
        stats["max"] = np.where(some, values[np.maximum(bounds[1:] - 1, 0)], np.nan)
        owners = np.repeat(np.arange(self.cells), count)
        sums = np.bincount(owners, weights=values, minlength=self.cells)
        stats["mean"] = np.where(some, sums / np.maximum(count, 1), np.nan)
        return stats


PERCENTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95}


def _value(array: np.ndarray, cell: int) -> float | None:
    value = float(array[cell])
    return None if math.isnan(value) else value


def _metrics_rows(
    spans: list[tuple[datetime, datetime]],
    group_by: str,
    cluster: str | None,
    teams: Iterable[int] | None,
    cluster_queue: str | None = None,
) -> list[LevelRow]:
    """Rows from Kueue's metrics for the periods before each cluster's first record."""
    if group_by == "priority_class":
        return []
    scope = "local_queue" if group_by == "local_queue" else "cluster_queue"
    hours = QueueMetricsHour.objects.filter(
        scope=scope, hour__gte=spans[0][0] - HOUR, hour__lt=spans[-1][1]
    )
    if cluster:
        hours = hours.filter(cluster__name=cluster)
    rows = list(hours.select_related("cluster").order_by("hour"))
    if not rows:
        return []
    cluster_ids = {row.cluster_id for row in rows}
    queues: dict[tuple[int, str], dict[str, Any]] = {
        (q["cluster_id"], q["name"]): dict(q)
        for q in ClusterQueue.objects.filter(cluster_id__in=cluster_ids).values(
            "cluster_id", "name", "cohort_name", "team_id", "team__name"
        )
    }
    lq_queue = {
        (lq["cluster_id"], f"{lq['namespace']}/{lq['name']}"): lq["cluster_queue_name"]
        for lq in LocalQueue.objects.filter(cluster_id__in=cluster_ids).values(
            "cluster_id", "namespace", "name", "cluster_queue_name"
        )
    }
    cutover: dict[int, datetime | None] = {}
    for cid in cluster_ids:
        cutover[cid] = (
            AdmissionRecord.objects.filter(cluster_id=cid)
            .order_by("queued_at")
            .values_list("queued_at", flat=True)
            .first()
        )
    allowed = None if teams is None else set(teams)
    grouped: dict[tuple[str, str], list[QueueMetricsHour]] = defaultdict(list)
    for row in rows:
        cq_name = row.name if scope == "cluster_queue" else lq_queue.get((row.cluster_id, row.name))
        if cluster_queue and cq_name != cluster_queue:
            continue
        queue = queues.get((row.cluster_id, cq_name or ""), {})
        if allowed is not None and queue.get("team_id") not in allowed:
            continue
        if group_by in ("cluster_queue", "local_queue"):
            group = row.name
        elif group_by == "cohort":
            group = queue.get("cohort_name") or ""
        else:
            group = queue.get("team__name") or ""
        grouped[(row.cluster.name, group)].append(row)
    out: list[LevelRow] = []
    for (cluster_name, group), members in sorted(grouped.items()):
        first = cutover.get(members[0].cluster_id)
        for start, end in spans:
            if first is not None and end > first:
                continue
            inside = [m for m in members if m.hour >= start and m.hour + HOUR <= end]
            if inside:
                out.append(_metrics_figures(group, cluster_name, start, end, inside))
    return out


def _metrics_figures(
    group: str, cluster: str, start: datetime, end: datetime, hours: list[QueueMetricsHour]
) -> LevelRow:
    level = LevelRow(
        group=group,
        cluster=cluster,
        period_start=start,
        period_end=end,
        source=SOURCE_METRICS,
        pending_at_end=None,
        preempted_gpu_hours=None,
    )
    level.admissions = sum(h.admissions for h in hours)
    count = sum(h.wait_count for h in hours)
    if count > 0:
        level.wait_seconds_mean = sum(h.wait_seconds_sum for h in hours) / count
    if len(hours) == 1:
        (only,) = hours
        level.wait_seconds_p50 = only.wait_seconds_p50
        level.wait_seconds_p90 = only.wait_seconds_p90
        level.wait_seconds_p95 = only.wait_seconds_p95
    else:
        buckets: dict[str, float] = defaultdict(float)
        for h in hours:
            for le, n in (h.wait_buckets or {}).items():
                buckets[le] += float(n)
        level.wait_seconds_p50 = bucket_quantile(0.50, buckets)
        level.wait_seconds_p90 = bucket_quantile(0.90, buckets)
        level.wait_seconds_p95 = bucket_quantile(0.95, buckets)
    for h in hours:
        for reason, n in (h.evictions or {}).items():
            level.evictions[reason] = level.evictions.get(reason, 0) + int(n)
        for reason, n in (h.preemptions_made or {}).items():
            level.preemptions_made[reason] = level.preemptions_made.get(reason, 0) + int(n)
    level.preemptions = level.evictions.get(EvictionReason.PREEMPTED, 0)
    return level


def admissions_by_queue(start: datetime, end: datetime, *, cluster: str) -> dict[str, int]:
    """ClusterQueue name -> its admissions in ``(start, end]``: the ``admissions`` figure of
    ``levels(group_by="cluster_queue")`` over the whole range, in one query (every team's, for a
    queue's own pace; a range that ends before the cluster's first record has none)."""
    counts = (
        AdmissionRecord.objects.filter(
            cluster__name=cluster, admitted_at__gt=start, admitted_at__lte=end
        )
        .order_by()
        .values_list("cluster_queue_name")
        .annotate(admissions=Count("pk"))
    )
    return {name: admissions for name, admissions in counts}


def visible_queue_names(team_ids: Iterable[int]) -> set[tuple[str, str]]:
    """(cluster, ClusterQueue name) of the queues of these teams."""
    from quotas.models import ClusterQueue

    return set(
        ClusterQueue.objects.filter(team_id__in=list(team_ids)).values_list("cluster__name", "name")
    )


def _hide_queues(
    counts: dict[str, int], cluster: str, shown: set[tuple[str, str]]
) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, count in counts.items():
        key = name if (cluster, name) in shown else HIDDEN_QUEUE
        out[key] = out.get(key, 0) + count
    return out


def _eviction_order(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A total order of eviction rows (``_EVICTION``; a run that never started sorts first)."""
    gpus, reason, preemption_reason, preempting_queue, running, evicted = row
    started = -math.inf if running is None else running
    return (evicted, started, reason, preemption_reason, preempting_queue, gpus or 0.0)


def _count_eviction(level: LevelRow, row: tuple[Any, ...]) -> None:
    """One eviction row (``_EVICTION``): by reason, and a preemption's reason, queue and the
    GPU time its run lost."""
    gpus, reason, preemption_reason, preempting_queue, running, evicted = row
    reason = reason or EvictionReason.OTHER
    level.evictions[reason] = level.evictions.get(reason, 0) + 1
    if reason != EvictionReason.PREEMPTED:
        return
    level.preemptions += 1
    preemption_reason = preemption_reason or "Other"
    level.preemptions_by_reason[preemption_reason] = (
        level.preemptions_by_reason.get(preemption_reason, 0) + 1
    )
    by = preempting_queue or ""
    level.preemptions_by_queue[by] = level.preemptions_by_queue.get(by, 0) + 1
    if running is not None and evicted > running:
        lost = float(gpus or 0.0) * (evicted - running) / 3600.0
        level.preempted_gpu_hours = (level.preempted_gpu_hours or 0.0) + lost
