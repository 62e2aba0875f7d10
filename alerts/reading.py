"""Reading what the hoarding rules need from the stored windows, and only that.

The rules (``alerts.rules``) look at three things per window: the rows of workloads that may be
idle or have no telemetry, the holders whose gang runs short of pods, and the GPU quota samples
that borrow or lend. Most of a large fleet's window is busy, whole gangs, so the database
selects, per chunk of windows:

* candidate rows: the allocated rows of every workload with a GPU below the highest idle
  threshold in force (or without telemetry) in the window, and every allocated row without
  telemetry, each with whether its node's exporter answered in the window; a busy workload's
  rows never leave the database (with every threshold at or below that highest one, such a
  workload cannot be idle at any ``idle_gpu_fraction`` above 0);
* ghost candidates: per window, the holders with fewer running pods than their gang's GPU pods
  (``Workload.gpu_pods``), holders absent from the window included;
* the GPU quota samples with something borrowed or lent (the others add nothing).

A chunk holds about ``ROWS_PER_READ`` stored rows, so a backfill of a week is a few hundred
reads, and a live window is one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import Count, Min, Q, QuerySet, Sum, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Concat
from django.utils.dateparse import parse_datetime

from alerts.rules import EPSILON, Hold, QueueSample, UsageRow
from core.bulk import fetch_rows, fetch_sql
from core.mig import GPU_RESOURCE
from ledger.models import GpuUsage
from quotas.choices import HOLDING_STATES, TransitionKind
from quotas.models import ClusterQueueSample, Workload, WorkloadTransition

logger = logging.getLogger(__name__)

# Stored rows per chunk when a range spans many windows.
ROWS_PER_READ = 200_000

# Transitions that end a quota hold.
HOLD_ENDS = (
    TransitionKind.QUOTA_RELEASED,
    TransitionKind.EVICTED,
    TransitionKind.PREEMPTED,
    TransitionKind.DEACTIVATED,
    TransitionKind.FINISHED,
    TransitionKind.DELETED,
)


@dataclass
class Window:
    """One stored window and what the rules read of it."""

    start: datetime
    end: datetime
    rows: list[UsageRow] = field(default_factory=list)
    # Holders short of pods: workload id -> (pods running, GPUs running).
    short: dict[int, tuple[int, float]] = field(default_factory=dict)
    samples: list[QueueSample] = field(default_factory=list)

    def workload_ids(self) -> set[int]:
        ids = {row.workload_id for row in self.rows if row.workload_id is not None}
        ids.update(self.short)
        return ids


def read_windows(
    cluster_id: int,
    start: datetime,
    end: datetime,
    holders: dict[int, Hold],
    idle_threshold: float,
) -> Iterator[Window]:
    """Each stored window of the cluster ending in ``(start, end]``, oldest first.

    ``holders`` collects the holds of the gangs that ran short of pods (``_short``)."""
    _count_gpu_pods(cluster_id)
    usage = GpuUsage.objects.filter(cluster_id=cluster_id)
    cursor = start
    span: timedelta | None = None
    while True:
        first = (
            usage.filter(window_end__gt=cursor, window_end__lte=end)
            .order_by("window_end")
            .values_list("window_start", "window_end")
            .first()
        )
        if first is None:
            return
        if not usage.filter(window_end__gt=first[1], window_end__lte=end).exists():
            # The range's last window (a live evaluation's only one): every row of a window
            # is written together with the window's start (``ledger.store.write_window``).
            upto = first[1]
            windows = {first[1]: Window(first[0], first[1])}
        else:
            if span is None:
                per_window = usage.filter(window_end=first[1]).count()
                span = (first[1] - first[0]) * max(1, ROWS_PER_READ // max(per_window, 1))
            upto = min(end, first[0] + span)
            windows = {
                window_end: Window(window_start, window_end)
                for window_end, window_start in usage.filter(
                    window_end__gte=first[1], window_end__lte=upto
                )
                .order_by()
                .values_list("window_end")
                .annotate(start=Min("window_start"))
            }
        chunk = usage.filter(window_end__gte=first[1], window_end__lte=upto)
        _candidates(cluster_id, first[1], upto, idle_threshold, windows)
        _short(cluster_id, start, chunk, windows, holders)
        _samples(cluster_id, first[1], upto, windows)
        for window_end in sorted(windows):
            yield windows[window_end]
        cursor = upto


def _moment(value: object) -> datetime:
    """A timestamp from raw SQL as an aware datetime (SQLite hands back text or naive UTC)."""
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"not a timestamp: {value!r}")
        value = parsed
    if not isinstance(value, datetime):
        raise ValueError(f"not a timestamp: {value!r}")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _candidates(
    cluster_id: int,
    first: datetime,
    last: datetime,
    idle_threshold: float,
    windows: dict[datetime, Window],
) -> None:
    """The candidate rows of the windows ending in [first, last] (module docstring)."""
    table = connection.ops.quote_name(GpuUsage._meta.db_table)
    columns = ", ".join(f"u.{connection.ops.quote_name(name)}" for name in _ROW_COLUMNS)
    # A hash join on a small distinct set, not window functions (a sort of the chunk's rows)
    # nor an IN subquery (planned as a rescan per row once the set outgrows work_mem).
    scope = "cluster_id = %s AND window_end >= %s AND window_end <= %s"
    sql = f"""
        SELECT u.window_end, {columns}
        FROM {table} u
        LEFT JOIN (
            SELECT DISTINCT window_end, workload_id FROM {table}
            WHERE {scope} AND allocated AND workload_id IS NOT NULL
                AND (activity IS NULL OR activity < %s)
        ) c ON c.window_end = u.window_end AND c.workload_id = u.workload_id
        WHERE u.cluster_id = %s AND u.window_end >= %s AND u.window_end <= %s
            AND u.allocated AND (u.activity IS NULL OR c.workload_id IS NOT NULL)
    """  # noqa: S608 - table and column names come from the model
    adapt = connection.ops.adapt_datetimefield_value
    bounds = [cluster_id, adapt(first), adapt(last)]
    rows = fetch_sql(sql, [*bounds, idle_threshold, *bounds])
    # Whether the exporter of a node with rows without telemetry answered in the window.
    dark_nodes = sorted({values[1 + _NODE] for values in rows if values[1 + _ACTIVITY] is None})
    answered: set[tuple[datetime, str]] = set()
    if dark_nodes:
        answered = {
            (_moment(window_end), node)
            for window_end, node in fetch_rows(
                GpuUsage.objects.filter(
                    cluster_id=cluster_id,
                    window_end__gte=first,
                    window_end__lte=last,
                    node_name__in=dark_nodes,
                )
                .exclude(gpu_key="")
                .order_by()
                .distinct(),
                "window_end",
                "node_name",
            )
        }
    for values in rows:
        window_end = _moment(values[0])
        window = windows.get(window_end)
        if window is None:
            continue
        cells = values[1:]
        gpus, activity = cells[_GPUS], cells[_ACTIVITY]
        window.rows.append(
            UsageRow._make(
                [
                    *cells[:_GPUS],
                    float(gpus),
                    None if activity is None else float(activity),
                    *cells[_ACTIVITY + 1 :],
                    activity is not None or (window_end, cells[_NODE]) in answered,
                ]
            )
        )


# GpuUsage columns of a candidate row, in UsageRow's order (without node_series).
_ROW_COLUMNS = (
    "gpu_key",
    "node_name",
    "namespace",
    "pod",
    "workload_id",
    "local_queue_id",
    "cluster_queue_id",
    "team_id",
    "gpus",
    "activity",
    "activity_source",
    "flavor",
    "gpu_model",
)
_NODE, _GPUS, _ACTIVITY = (_ROW_COLUMNS.index(name) for name in ("node_name", "gpus", "activity"))


def _short(
    cluster_id: int,
    since: datetime,
    chunk: QuerySet[GpuUsage],
    windows: dict[datetime, Window],
    holders: dict[int, Hold],
) -> None:
    """Per window of the chunk, the holders running fewer pods than their gang's GPU pods.

    The database leaves out the gangs it can prove ran whole in every window of the chunk (most
    of them), with one grouping on integer keys: a window where a gang's rows name one pod has
    at least one pod running, one where they name two different pods at least two. A gang of
    three or more GPU pods is never left out there; for the rest (few), the pods of each window
    are counted exactly here. ``holders`` gets the holds read."""
    if not windows:
        return
    ordered = sorted(windows.values(), key=lambda window: window.end)
    first, last = ordered[0], ordered[-1]
    adapt = connection.ops.adapt_datetimefield_value
    usage = connection.ops.quote_name(GpuUsage._meta.db_table)
    workloads = connection.ops.quote_name(Workload._meta.db_table)
    complete = RawSQL(
        f"""
        SELECT per_window.workload_id FROM (
            SELECT window_end, workload_id,
                CASE WHEN MIN(pod) = MAX(pod) THEN 1 ELSE 2 END AS pods_at_least
            FROM {usage}
            WHERE cluster_id = %s AND window_end >= %s AND window_end <= %s
                AND allocated AND workload_id IS NOT NULL
            GROUP BY window_end, workload_id
        ) per_window
        JOIN {workloads} w ON w.id = per_window.workload_id
        GROUP BY per_window.workload_id, w.gpu_pods
        HAVING COUNT(*) = %s AND MIN(per_window.pods_at_least) >= w.gpu_pods
        """,  # noqa: S608 - table names come from the models
        [cluster_id, adapt(first.end), adapt(last.end), len(ordered)],
    )
    gangs = {
        workload_id: hold
        for workload_id, hold in _holds(
            holder_queryset(cluster_id, since).filter(gpu_pods__gt=0).exclude(pk__in=complete)
        ).items()
        if hold.gpus > EPSILON and hold.overlaps(first.start, last.end)
    }
    holders.update(gangs)
    if not gangs:
        return
    running: dict[tuple[datetime, int], tuple[int, float]] = {}
    # An IN list, not one array parameter (``core.bulk.filter_in``): this filters every row of
    # the chunk, and PostgreSQL hashes a list of constants but searches a parameter's array
    # linearly per row (120 ms against 17 ms for 500 gangs in a 50,000-row window).
    for window_end, workload_id, pods, gpus in fetch_rows(
        chunk.filter(allocated=True, workload_id__in=sorted(gangs))
        .order_by()
        .values("window_end", "workload_id")
        .annotate(
            pods=Count(Concat("namespace", Value("/"), "pod"), distinct=True), used=Sum("gpus")
        ),
        "window_end",
        "workload_id",
        "pods",
        "used",
    ):
        running[(_moment(window_end), workload_id)] = (int(pods), float(gpus))
    for window in ordered:
        for workload_id, hold in gangs.items():
            pods, gpus = running.get((window.end, workload_id), (0, 0.0))
            if pods < hold.pods_expected and hold.through(window.start, window.end):
                window.short[workload_id] = (pods, gpus)


def _samples(
    cluster_id: int, first: datetime, last: datetime, windows: dict[datetime, Window]
) -> None:
    """The GPU quota samples of the windows ending in [first, last] that borrow or lend."""
    for sampled_at, queue_id, flavor, borrowed, lent in fetch_rows(
        ClusterQueueSample.objects.filter(
            cluster_queue__cluster_id=cluster_id,
            sampled_at__gte=first,
            sampled_at__lte=last,
            resource=GPU_RESOURCE,
        )
        .filter(Q(borrowed__gt=0) | Q(lent__gt=0))
        .order_by(),
        "sampled_at",
        "cluster_queue_id",
        "flavor_name",
        "borrowed",
        "lent",
    ):
        window = windows.get(sampled_at)
        if window is not None:
            window.samples.append(QueueSample(queue_id, flavor, float(borrowed), float(lent)))


# --- workloads -----------------------------------------------------------------------------------


def holder_queryset(cluster_id: int, since: datetime) -> QuerySet[Workload]:
    """GPU workloads that may hold quota in or after ``since``: holding now, or with a hold
    that ended after it (an end transition, finish or deletion since)."""
    ended = WorkloadTransition.objects.filter(
        workload__cluster_id=cluster_id, kind__in=HOLD_ENDS, at__gt=since
    ).values("workload_id")
    return (
        Workload.objects.filter(cluster_id=cluster_id)
        .filter(
            Q(state__in=HOLDING_STATES, deleted_at__isnull=True)
            | Q(finished_at__gt=since)
            | Q(deleted_at__gt=since)
            | Q(pk__in=ended)
        )
        .filter(Q(admitted_gpus__gt=0) | Q(requested_gpus__gt=0))
        .order_by()
    )


def _holds(queryset: QuerySet[Workload]) -> dict[int, Hold]:
    holds: dict[int, Hold] = {}
    for values in fetch_rows(queryset, *HOLD_FIELDS):
        holds[values[0]] = hold_of(*values[1:])
    _hold_ends(holds)
    return holds


# Workload columns a Hold is made of, after the id.
HOLD_FIELDS = (
    "pk",
    "admitted_gpus",
    "requested_gpus",
    "gpu_pods",
    "state",
    "quota_reserved_at",
    "admitted_at",
    "finished_at",
    "deleted_at",
)


def hold_of(
    admitted_gpus: float,
    requested_gpus: float,
    gpu_pods: int | None,
    state: str,
    quota_reserved_at: datetime | None,
    admitted_at: datetime | None,
    finished_at: datetime | None,
    deleted_at: datetime | None,
) -> Hold:
    """A workload's last quota hold from its row; a hold that ended is refined by its end
    transition (``_hold_ends``)."""
    start = quota_reserved_at or admitted_at
    holding = state in HOLDING_STATES and deleted_at is None
    return Hold(
        gpus=admitted_gpus or requested_gpus or 0.0,
        pods_expected=gpu_pods or 0,
        start=start,
        end=None if holding else (finished_at or deleted_at or start),
        ended=not holding,
    )


def _hold_ends(holds: dict[int, Hold]) -> None:
    """A hold that ended ends at its first end transition after it began."""
    ended = [workload_id for workload_id, hold in holds.items() if hold.ended]
    if not ended:
        return
    first: dict[int, datetime] = {}
    for workload_id, at in fetch_rows(
        WorkloadTransition.objects.filter(workload_id__in=ended, kind__in=HOLD_ENDS).order_by(),
        "workload_id",
        "at",
    ):
        start = holds[workload_id].start
        if start is None or at <= start:
            continue
        if workload_id not in first or at < first[workload_id]:
            first[workload_id] = at
    for workload_id, at in first.items():
        holds[workload_id].end = at


def _count_gpu_pods(cluster_id: int) -> None:
    """Fill ``Workload.gpu_pods`` where it is still null (rows written before the column, or
    not by the sync), so the ghost query can compare in SQL."""
    missing = list(
        Workload.objects.filter(cluster_id=cluster_id, gpu_pods__isnull=True).only("pk", "pod_sets")
    )
    if not missing:
        return
    for workload in missing:
        workload.gpu_pods = Workload.count_gpu_pods(workload.pod_sets)
    Workload.objects.bulk_update(missing, ["gpu_pods"], batch_size=1000)
    logger.info("cluster %s: counted the GPU pods of %d workloads", cluster_id, len(missing))
