"""Reading what the hoarding rules need from the stored windows, and only that.

The rules (``alerts.rules``) look at three things per window: the rows of workloads that may be
idle or have no telemetry, the holders whose gang runs short of pods, and the GPU quota samples
that borrow or lend. Most of a large fleet's window is busy, whole gangs, so the database
selects, per chunk of consecutive windows (``Chunk``):

* candidate rows: the allocated rows of every workload with a GPU below the highest idle
  threshold in force (or without telemetry) in the window, and every allocated row without
  telemetry, each with whether its node's exporter answered in the window; a busy workload's
  rows never leave the database (with every threshold at or below that highest one, such a
  workload cannot be idle at any ``idle_gpu_fraction`` above 0). They come per row identity
  over the chunk (``WindowSeries``: one row's columns, and its activity in each window), from one
  pass over the chunk's rows (``_identities``); the rules then put them into their windows,
  or move a workload whose rows did not change through the chunk in one step
  (``RuleSet.split``);
* ghost candidates: per window, the holders with fewer running pods than their gang's GPU pods
  (``Workload.gpu_pods``), holders absent from the window included;
* the GPU quota samples with something borrowed or lent (the others add nothing).

A chunk holds about ``ROWS_PER_READ`` stored rows, so a backfill of a week is a few hundred
reads, and a live window is one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, FloatField, Q, QuerySet, Sum, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Concat

from alerts.rows import (
    EPSILON,
    Chunk,
    Hold,
    QueueSample,
    StoredWindow,
    UsageFact,
    WindowSeries,
)
from core.bulk import fetch_rows, fetch_sql, sql_moment
from core.mig import GPU_RESOURCE
from ledger.models import GpuUsage, UsageWindow
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


def read_chunks(
    cluster_id: int,
    start: datetime,
    end: datetime,
    holders: dict[int, Hold],
    idle_threshold: float,
    prepare: Callable[[Chunk], None] | None = None,
) -> Generator[Chunk, None, None]:
    """The stored windows of the cluster ending in ``(start, end]``, oldest first, in chunks of
    about ``ROWS_PER_READ`` rows.

    ``holders`` collects the holds of the gangs that ran short of pods (``_short``);
    ``prepare`` is called with each chunk before it is yielded, for the caller's own reads:
    while the caller works on a yielded chunk, the database groups the next one
    (``_Grouping``), and the caller's queries would wait for it."""
    _count_gpu_pods(cluster_id)
    usage = GpuUsage.objects.filter(cluster_id=cluster_id)
    plan = _Plan(cluster_id, end)
    windows = plan.after(start)
    if windows is None:
        return
    grouping = _Grouping(cluster_id, idle_threshold)
    grouping.start(windows)
    try:
        while windows is not None:
            grouping.wait()
            chunk = Chunk(windows)
            first, last = windows[0].end, windows[-1].end
            _candidates(cluster_id, first, last, chunk)
            _short(
                cluster_id,
                start,
                usage.filter(window_end__gte=first, window_end__lte=last),
                chunk.windows,
                holders,
            )
            _samples(cluster_id, first, last, {window.end: window for window in windows})
            if prepare is not None:
                prepare(chunk)
            windows = plan.after(last)
            if windows is not None:
                grouping.start(windows)
            yield chunk
    finally:
        grouping.close()


class _Plan:
    """Which stored windows of the cluster up to ``end`` the next chunk holds."""

    def __init__(self, cluster_id: int, end: datetime) -> None:
        self.cluster_id = cluster_id
        self.end = end
        self.usage = UsageWindow.objects.filter(cluster_id=cluster_id)
        self.span: timedelta | None = None

    def after(self, cursor: datetime) -> list[StoredWindow] | None:
        """The next chunk's windows, ending after ``cursor``; None when there are none."""
        usage, end = self.usage, self.end
        first = (
            usage.filter(window_end__gt=cursor, window_end__lte=end)
            .order_by("window_end")
            .values_list("window_start", "window_end")
            .first()
        )
        if first is None:
            return None
        if not usage.filter(window_end__gt=first[1], window_end__lte=end).exists():
            # The range's last window (a live evaluation's only one): every row of a window
            # is written together with the window's start (``ledger.store.write_window``).
            return [StoredWindow(first[0], first[1])]
        if self.span is None:
            per_window = usage.filter(window_end=first[1]).values_list("rows", flat=True)[0]
            self.span = (first[1] - first[0]) * max(1, ROWS_PER_READ // max(per_window, 1))
        return _windows(self.cluster_id, first[1], min(end, first[0] + self.span))


class _Grouping:
    """``_identities`` of one chunk after another. On PostgreSQL each chunk after the first is
    grouped by a worker thread on the evaluation's own database session (its transaction and
    temporary table), while the caller works on the chunk before: the server groups the rows
    on one core while Python runs the rules on the other. psycopg serializes the session's
    use, so a query of the caller's meanwhile waits for the grouping instead of interleaving,
    and ``wait`` hands back the grouping's error, if any."""

    def __init__(self, cluster_id: int, idle_threshold: float) -> None:
        self.cluster_id = cluster_id
        self.idle_threshold = idle_threshold
        self.pool: ThreadPoolExecutor | None = None
        self.running: Future[None] | None = None
        self.started = False
        self.sort = "on"  # the session's enable_sort, given back after each grouping
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_setting('enable_sort')")
                self.sort = cursor.fetchone()[0]

    def start(self, windows: list[StoredWindow]) -> None:
        first, last = windows[0].end, windows[-1].end
        if not self.started or connection.vendor != "postgresql":
            self.started = True
            with connection.cursor() as cursor:
                self._identities(cursor.execute, first, last)
            return
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="alerts-grouping")
        session = connection.connection
        self.running = self.pool.submit(self._group, session, first, last)

    def _group(self, session: Any, first: datetime, last: datetime) -> None:
        with session.cursor() as cursor:
            self._identities(cursor.execute, first, last)

    def _identities(
        self, execute: Callable[[str, list[Any]], object], first: datetime, last: datetime
    ) -> None:
        _identities(execute, self.cluster_id, first, last, self.idle_threshold, self.sort)

    def wait(self) -> None:
        running, self.running = self.running, None
        if running is not None:
            running.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            if self.pool is not None:
                self.pool.shutdown()


def _windows(cluster_id: int, first: datetime, last: datetime) -> list[StoredWindow]:
    """The stored windows ending in [first, last], oldest first (``UsageWindow``: one row a
    window, not a pass over the windows' rows)."""
    stored = UsageWindow.objects.filter(
        cluster_id=cluster_id, window_end__gte=first, window_end__lte=last
    ).order_by("window_end")
    rows = fetch_rows(stored, "window_start", "window_end")
    return [StoredWindow(sql_moment(start), sql_moment(end)) for start, end in rows]


# Per chunk, what one pass over its rows says of each row identity (``_identities``).
CHUNK_ROWS = "alerts_chunk_rows"


def _identities(
    execute: Callable[[str, list[Any]], object],
    cluster_id: int,
    first: datetime,
    last: datetime,
    idle_threshold: float,
    sort: str = "on",
) -> None:
    """One pass over the allocated rows of the windows ending in [first, last], into the
    temporary table ``CHUNK_ROWS``: per row identity (its columns but the activity; one row
    per window at most, ``gpu_key``, namespace and pod being unique in a window), how many
    windows it has a row in and whether one of them was a candidate (below
    ``idle_threshold``, or without telemetry). On PostgreSQL also its windows' ends and
    activities (two arrays, in the order the rows were read), so the candidate rows
    (``_candidates``) need no second pass; the ghost pruning (``_short``) reads it too.
    ``execute`` runs a statement on the evaluation's session (``_Grouping``); ``sort`` is the
    session's ``enable_sort``, set again after the statement that turns it off."""
    table = connection.ops.quote_name(GpuUsage._meta.db_table)
    adapt = connection.ops.adapt_datetimefield_value
    identity = ", ".join(connection.ops.quote_name(name) for name in _IDENTITY)
    postgres = connection.vendor == "postgresql"
    columns = ", ".join(
        [
            *(f"{connection.ops.quote_name(name)} {kind}" for name, kind in _IDENTITY_TYPES),
            "windows integer",
            "candidate integer",
            *(["ends timestamp with time zone[]", "activities double precision[]"] * postgres),
        ]
    )
    arrays = ", ARRAY_AGG(window_end), ARRAY_AGG(activity)" if postgres else ""
    if postgres:
        # Gone at commit, like the episode staging table (``alerts.store``).
        execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {CHUNK_ROWS} ({columns}) ON COMMIT DROP", [])
        execute(f"TRUNCATE {CHUNK_ROWS}", [])
    else:
        execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {CHUNK_ROWS} ({columns})", [])
        execute(f"DELETE FROM {CHUNK_ROWS}", [])  # noqa: S608 - a constant name
    insert = f"""
        INSERT INTO {CHUNK_ROWS}
        SELECT {identity}, COUNT(*),
            MAX(CASE WHEN activity IS NULL OR activity < %s THEN 1 ELSE 0 END){arrays}
        FROM {table}
        WHERE cluster_id = %s AND window_end >= %s AND window_end <= %s AND allocated
        GROUP BY {identity}
    """  # noqa: S608 - table and column names come from the model and a constant
    params: list[Any] = [idle_threshold, cluster_id, adapt(first), adapt(last)]
    if postgres:
        # Hashed: a sort of the chunk's rows by the identity's text columns (PostgreSQL's
        # choice for the arrays) took twice as long (bench/alerts.py). Set for this statement
        # only, and with the session's own functions (``execute`` may run on a worker thread,
        # outside Django's connection handling).
        execute("SELECT set_config('enable_sort', 'off', true)", [])
        try:
            execute(insert, params)
        finally:
            execute("SELECT set_config('enable_sort', %s, true)", [sort])
    else:
        execute(insert, params)


def _candidates(cluster_id: int, first: datetime, last: datetime, chunk: Chunk) -> None:
    """The candidate rows of the windows ending in [first, last] (module docstring), per row
    identity (``WindowSeries``): every identity of a workload with a candidate identity, and the
    rows without telemetry of identities without a workload. PostgreSQL has them in
    ``CHUNK_ROWS``; elsewhere the rows come one by one and are grouped here."""
    identity = ", ".join(connection.ops.quote_name(name) for name in _IDENTITY)
    candidates = f"SELECT DISTINCT workload_id FROM {CHUNK_ROWS} WHERE candidate = 1"
    width = len(_IDENTITY)
    grouped: list[tuple[tuple, list, list]] = []
    if connection.vendor == "postgresql":
        for values in fetch_sql(
            f"""
            SELECT {identity}, ends, activities FROM {CHUNK_ROWS}
            WHERE workload_id IN ({candidates}) OR (workload_id IS NULL AND candidate = 1)
            """,  # noqa: S608 - column names come from the model, the table is a constant
            [],
        ):
            ends, activities = values[width], values[width + 1]
            if any(later < earlier for earlier, later in zip(ends, ends[1:], strict=False)):
                pairs = sorted(zip(ends, activities, strict=True), key=lambda pair: pair[0])
                ends, activities = [end for end, _ in pairs], [value for _, value in pairs]
            grouped.append((values[:width], ends, activities))
    else:
        table = connection.ops.quote_name(GpuUsage._meta.db_table)
        columns = ", ".join(f"u.{connection.ops.quote_name(name)}" for name in _IDENTITY)
        adapt = connection.ops.adapt_datetimefield_value
        by_identity: dict[tuple, tuple[list, list]] = {}
        fetched = fetch_sql(
            f"""
            SELECT {columns}, u.window_end, u.activity FROM {table} u
            LEFT JOIN ({candidates}) c ON c.workload_id = u.workload_id
            WHERE u.cluster_id = %s AND u.window_end >= %s AND u.window_end <= %s
                AND u.allocated AND (c.workload_id IS NOT NULL OR u.workload_id IS NULL)
            """,  # noqa: S608 - table and column names come from the model and a constant
            [cluster_id, adapt(first), adapt(last)],
        )
        for values in sorted(fetched, key=lambda v: sql_moment(v[width])):
            ends, activities = by_identity.setdefault(tuple(values[:width]), ([], []))
            ends.append(sql_moment(values[width]))
            activities.append(values[width + 1])
        grouped = [(key, ends, acts) for key, (ends, acts) in by_identity.items()]
    for key, ends, activities in grouped:
        cells = list(key)
        cells[_GPUS] = float(cells[_GPUS])
        row = UsageFact._make([*cells[:_ACTIVITY], None, *cells[_ACTIVITY:], False])
        points: list[float | None] = [
            None if value is None else float(value) for value in activities
        ]
        if row.workload_id is None:
            # Rows without a workload are candidates only without telemetry.
            kept = [i for i, value in enumerate(points) if value is None]
            if not kept:
                continue
            ends, points = [ends[i] for i in kept], [points[i] for i in kept]
        chunk.series.append(WindowSeries(row, ends, points))
    # Rows of the same window in a stable order (a gang's first row names its node).
    chunk.series.sort(
        key=lambda s: (s.row.workload_id or 0, s.row.gpu_key, s.row.namespace, s.row.pod)
    )
    # Whether the exporter of a node with rows without telemetry answered in the window.
    dark_nodes = sorted(
        {s.row.node_name for s in chunk.series if any(a is None for a in s.activities)}
    )
    if dark_nodes:
        chunk.answered = {
            (sql_moment(window_end), node)
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


# GpuUsage columns of a candidate row, in UsageFact's order (without node_series), and the
# identity of a row over windows (the same without the activity).
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
_IDENTITY = tuple(name for name in _ROW_COLUMNS if name != "activity")
# Their columns' types in ``CHUNK_ROWS``.
_IDENTITY_TYPES = tuple(
    (name, "double precision" if name == "gpus" else "bigint" if name.endswith("_id") else "text")
    for name in _IDENTITY
)
_GPUS, _ACTIVITY = (_ROW_COLUMNS.index(name) for name in ("gpus", "activity"))


def _short(
    cluster_id: int,
    since: datetime,
    chunk: QuerySet[GpuUsage],
    ordered: list[StoredWindow],
    holders: dict[int, Hold],
) -> None:
    """Per window of the chunk, the holders running fewer pods than their gang's GPU pods.

    The database leaves out the gangs it can prove ran whole in every window of the chunk (most
    of them) from the chunk's row identities (``_identities``): a gang with at least its GPU
    pods' number of pods that have a row in every window of the chunk ran whole. For the rest
    (few), the pods of each window are counted exactly here. ``holders`` gets the holds read."""
    if not ordered:
        return
    first, last = ordered[0], ordered[-1]
    workloads = connection.ops.quote_name(Workload._meta.db_table)
    # Pods with a row in every window, then per gang: two hash aggregates, where a
    # COUNT(DISTINCT) sorted the identities (123 ms against 72 ms for a 50,000-GPU window).
    complete = RawSQL(
        f"""
        SELECT pods.workload_id FROM (
            SELECT workload_id, namespace, pod FROM {CHUNK_ROWS}
            WHERE windows = %s AND workload_id IS NOT NULL
            GROUP BY workload_id, namespace, pod
        ) pods
        JOIN {workloads} w ON w.id = pods.workload_id
        GROUP BY pods.workload_id, w.gpu_pods
        HAVING COUNT(*) >= w.gpu_pods
        """,  # noqa: S608 - table names come from the model and a constant
        [len(ordered)],
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
        running[(sql_moment(window_end), workload_id)] = (int(pods), float(gpus))
    for window in ordered:
        for workload_id, hold in gangs.items():
            pods, gpus = running.get((window.end, workload_id), (0, 0.0))
            if pods < hold.pods_expected and hold.through(window.start, window.end):
                window.short[workload_id] = (pods, gpus)


def _samples(
    cluster_id: int, first: datetime, last: datetime, windows: dict[datetime, StoredWindow]
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
        .order_by()
        # As floats in the database: the rules compare floats, and decimals load slower.
        .annotate(
            borrowed_gpus=Cast("borrowed", FloatField()), lent_gpus=Cast("lent", FloatField())
        ),
        "sampled_at",
        "cluster_queue_id",
        "flavor_name",
        "borrowed_gpus",
        "lent_gpus",
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
