"""The join: per-window GPU usage per allocation, hourly rollups of every figure, rate cards,
and the read layer over the rollups (``HourlyRollupQuerySet``: the only code that sums them).

The tables keep the names they had before this app existed (``db_table``), so the move from
``fleet`` and ``quotas`` changed no data (migrations ``ledger.0001``, ``fleet.0004``,
``quotas.0002``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import connections, models, transaction
from django.db.models import Case, Count, ExpressionWrapper, FloatField, Max, Q, Sum, When
from django.db.models.functions import Cast, Round

from core.bulk import column, fetch_rows, fetch_sql
from core.pgsettings import local_settings
from core.ranges import HourSpan, TimeRange, covered_hours
from fleet.choices import ActivitySource
from fleet.models import Cluster, Gpu
from ledger.choices import RateKind, RollupScope
from ledger.figures import FIGURES, PEAK_FIGURES, F, Figures
from quotas.models import ClusterQueue, LocalQueue, Team, Workload, default_currency


class GpuUsageQuerySet(models.QuerySet["GpuUsage"]):
    def allocated(self) -> GpuUsageQuerySet:
        return self.filter(allocated=True)

    def idle(self, threshold: float | None = None) -> GpuUsageQuerySet:
        """Allocated GPU-windows with telemetry whose activity is below the idle threshold."""
        limit = settings.GPULEDGER_IDLE_THRESHOLD if threshold is None else threshold
        return self.allocated().filter(activity__lt=limit)

    def in_window(self, start: datetime, end: datetime) -> GpuUsageQuerySet:
        return self.filter(window_end__gt=start, window_end__lte=end)


class GpuUsage(models.Model):
    """One GPU (or one pod's share of it) over one collection window.

    Rows for allocated GPUs without any DCGM series have ``gpu`` empty and ``activity`` null:
    "no data", never idle. Unallocated GPUs have rows too, so capacity is exact per window.

    The foreign keys have no database constraint (``db_constraint=False``). This is the
    high-volume fact table (50,000 rows a window per 50,000-GPU cluster), and PostgreSQL's
    deferred checks of six foreign keys per row cost ~0.4 s at each window's commit, nearly
    as much as the COPY of the rows itself (bench/ingest_pure.py). Integrity is kept by the
    only writer, ``ledger.store.write_window``, which takes every id from the database in the
    same transaction, and by Django, which still applies ``on_delete`` (CASCADE, SET_NULL)
    when the referenced rows are deleted through the ORM. The indexes remain, but for
    ``cluster``, ``workload`` and ``gpu`` no single-column one: each is the first column of a
    composite index below, which serves the same lookups; a redundant index costs every
    window's insert and let the planner scan a whole cluster's history for one window. Trade-off: a
    delete that bypasses the ORM (raw SQL, ``_raw_delete``), or an ORM delete of a workload,
    queue or team that commits while a window referencing it is being written, leaves a
    dangling id here instead of failing the write (the id then matches no row: joins lose the
    owner, and reading the relation on an instance raises ``DoesNotExist``).
    """

    cluster = models.ForeignKey(
        Cluster,
        related_name="usage",
        on_delete=models.CASCADE,
        db_constraint=False,
        db_index=False,
    )
    window_start = models.DateTimeField()
    window_end = models.DateTimeField(help_text="A window is (start, end]; samples end it.")
    gpu = models.ForeignKey(
        Gpu,
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        db_constraint=False,
        db_index=False,
    )
    gpu_key = models.CharField(
        max_length=400,
        help_text="host/UUID/GPU_I_ID, or empty for allocated GPUs with no DCGM series.",
    )
    namespace = models.CharField(max_length=253, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    container = models.CharField(max_length=253, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    flavor = models.CharField(max_length=253, blank=True)
    gpu_model = models.CharField(max_length=200, blank=True)
    workload = models.ForeignKey(
        Workload,
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
        db_index=False,
    )
    local_queue = models.ForeignKey(
        LocalQueue,
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    team = models.ForeignKey(
        Team,
        related_name="usage",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    allocated = models.BooleanField(help_text="Held by a running pod in this window.")
    gpus = models.FloatField(
        help_text=(
            "GPUs this row stands for: 1 per whole GPU, slices/7 per MIG instance, divided by "
            "the pods sharing a time-sliced GPU; N for N allocated GPUs without telemetry."
        ),
    )
    capacity_gpus = models.FloatField(
        default=0.0,
        help_text="Physical capacity this row carries (0 on the extra rows of a shared GPU).",
    )
    shared = models.BooleanField(default=False, help_text="Time-sliced between several pods.")
    sm_active = models.FloatField(null=True, blank=True)
    pipe_tensor_active = models.FloatField(null=True, blank=True)
    dram_active = models.FloatField(null=True, blank=True)
    gr_engine_active = models.FloatField(null=True, blank=True)
    gpu_util = models.FloatField(null=True, blank=True, help_text="DCGM_FI_DEV_GPU_UTIL, 0-100.")
    fb_used_mib = models.FloatField(null=True, blank=True)
    activity = models.FloatField(
        null=True,
        blank=True,
        help_text="SM_ACTIVE, else GR_ENGINE_ACTIVE; null = no telemetry.",
    )
    activity_source = models.CharField(
        max_length=20,
        choices=ActivitySource.choices,
        default=ActivitySource.NONE,
    )
    samples = models.PositiveIntegerField(default=0, help_text="Activity samples in the window.")
    expected_samples = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = GpuUsageQuerySet.as_manager()

    class Meta:
        db_table = "fleet_gpuusage"
        ordering = ["-window_end", "gpu_key", "namespace", "pod"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "window_end", "gpu_key", "namespace", "pod"],
                name="fleet_gpuusage_window_gpu_pod",
            ),
        ]
        indexes = [
            # Rollup of one hour: all rows of a cluster in (hour, hour + 1h].
            models.Index(fields=["cluster", "window_end"], name="fleet_usage_cluster_window"),
            # Workload page and idle-workload alerts: one workload's recent windows.
            models.Index(fields=["workload", "window_end"], name="fleet_usage_workload_window"),
            # GPU page: one GPU over time.
            models.Index(fields=["gpu", "window_end"], name="fleet_usage_gpu_window"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_key or 'no-telemetry'} {self.namespace}/{self.pod} @ {self.window_end}"


# Aggregates are named sum_<figure>: a bare figure name would clash with the column.
SUM_PREFIX = "sum_"
CENTS = models.DecimalField(max_digits=30, decimal_places=2)
# The ratios ``HourlyRollupQuerySet.ranking`` ranks by: (numerator, denominator) figures, as
# the ``Figures`` properties of the same names compute them (core.figures).
RANKED_RATIOS: dict[str, tuple[str, str]] = {
    "idle_share": ("idle_gpu_hours", "allocated_gpu_hours"),
    "utilization": ("active_gpu_hours", "telemetry_gpu_hours"),
}


def hour_span(
    range_or_start: TimeRange | HourSpan | datetime,
    end: datetime | None = None,
    *,
    now: datetime | None = None,
) -> HourSpan:
    """The hours a range counts (``core.ranges.covered_hours``); an ``HourSpan`` as it is."""
    if isinstance(range_or_start, HourSpan):
        return range_or_start
    if isinstance(range_or_start, TimeRange):
        return range_or_start.covered_hours(now)
    if end is None:
        raise TypeError("covering(start, end) needs an end")
    return covered_hours(range_or_start, end, now)


def _checked(names: Iterable[str]) -> tuple[str, ...]:
    names = tuple(names)
    unknown = sorted(set(names) - set(FIGURES))
    if unknown:
        raise ValueError(f"not rollup figures: {', '.join(unknown)}")
    return names


def _aggregates(names: Iterable[str]) -> dict[str, Sum | Max]:
    return {SUM_PREFIX + name: Max(name) if name in PEAK_FIGURES else Sum(name) for name in names}


def _ordering(term: str, names: tuple[str, ...]) -> str:
    """``-allocated_gpu_hours`` → ``-sum_allocated_gpu_hours``; group fields as they are."""
    bare = term.removeprefix("-")
    if bare in names:
        return term.replace(bare, SUM_PREFIX + bare, 1)
    return term


# A hash aggregate's memory per group the caller expects (``hash_groups``): a chargeback piece
# (five grouping keys, nine sums) takes ~600 bytes of PostgreSQL's hash table; the rest is room.
HASH_BYTES_PER_GROUP = 1024
HASH_WORK_MEM_MB = (4, 64)  # PostgreSQL's default, and the most one aggregate gets


def hash_aggregate_settings(groups: int) -> dict[str, str]:
    """Planner settings for an aggregate into about ``groups`` groups, which the caller knows
    and PostgreSQL cannot estimate: it multiplies each grouping column's distinct values over
    the whole table (every scope's keys), e.g. ~990,000 groups for the 200 teams of a year.
    From that estimate it sorted 1.75 M rollup rows on disk (3.3 s, where hashing them took
    0.95 s) once ``work_mem`` was large, and sorted a month of ClusterQueues by day (1.0 s,
    hashing: 0.5 s) while it was small (bench/RESULTS.md). So: hash, in memory sized for the
    groups (a table sized for the planner's estimate is slower to build, and PostgreSQL spills
    a hash that outgrows it to disk rather than fail)."""
    low, high = HASH_WORK_MEM_MB
    megabytes = min(high, max(low, math.ceil(groups * HASH_BYTES_PER_GROUP / 2**20)))
    return {"enable_sort": "off", "work_mem": f"{megabytes}MB"}


def _fetch(
    queryset: models.QuerySet[Any, Any],
    big_scan: bool,
    aggregates: dict[str, Sum | Max] | None = None,
    hash_groups: int | None = None,
) -> list[dict[str, Any]]:
    """Run the aggregate (``queryset.aggregate(**aggregates)`` when given), JIT off if asked and
    hashed into ``hash_groups`` groups (``hash_aggregate_settings``; ``core.pgsettings``: one
    statement for every setting)."""

    def run() -> list[dict[str, Any]]:
        if aggregates is not None:
            return [queryset.aggregate(**aggregates)]
        return list(queryset)

    planner: dict[str, str] = {}
    if big_scan:
        planner["jit"] = "off"
    if hash_groups is not None:
        planner.update(hash_aggregate_settings(hash_groups))
    connection = connections[queryset.db]
    if not planner or connection.vendor != "postgresql":
        return run()
    with transaction.atomic(using=queryset.db), local_settings(queryset.db, planner):
        return run()


class HourlyRollupQuerySet(models.QuerySet["HourlyRollup"]):
    """The read layer over rollups (STYLE rule 21): the only code that sums them.

    ``covering`` keeps the hours a range counts (``core.ranges.covered_hours``); ``figures``
    sums ``FIGURES`` per group, ``total`` over everything, ``hourly`` / ``series`` per hour for
    charts; each returns ``ledger.figures.Figures`` with the ratios.
    """

    def for_scope(self, scope: str) -> HourlyRollupQuerySet:
        return self.filter(scope=scope)

    def between(self, start: datetime, end: datetime) -> HourlyRollupQuerySet:
        """Rows whose hour starts in ``[start, end)``, as given; ranges use ``covering``."""
        return self.filter(hour__gte=start, hour__lt=end)

    def covering(
        self,
        range_or_start: TimeRange | HourSpan | datetime,
        end: datetime | None = None,
        *,
        now: datetime | None = None,
    ) -> HourlyRollupQuerySet:
        """Rows of the hours a range counts: ``covering(time_range)``, ``covering(start, end)``.

        Every hour that ends inside the range and has ended (README "What the numbers mean").
        """
        span = hour_span(range_or_start, end, now=now)
        return self.filter(hour__gte=span.first, hour__lt=span.stop)

    def figures(
        self,
        group_by: Sequence[str],
        *,
        names: Iterable[str] = FIGURES,
        computed: Mapping[str, Any] | None = None,
        order_by: Sequence[str] = (),
        limit: int | None = None,
        big_scan: bool = False,
        hash_groups: int | None = None,
        into: type[F] = Figures,  # type: ignore[assignment]
    ) -> dict[Any, F]:
        """``{group: Figures}`` in one GROUP BY query.

        ``group_by`` names fields (``"team_id"``, ``"cluster_queue__name"``, ``"hour"``) or keys
        of ``computed`` (expressions per row, e.g. a ``TruncDay("hour")`` period). A group is
        the field's value for one field, the tuple of values for several. ``names`` limits the
        figures read (the others stay 0): the chargeback reads only what its covering index
        carries. ``order_by`` takes figure names (``"-allocated_gpu_hours"``) and group fields;
        with ``limit`` it returns the top groups. ``big_scan`` turns PostgreSQL's JIT off for
        this query: on scans of months of rows compiling costs 1-3 s, more than the scan;
        ``hash_groups``: the number of groups the caller expects, for the aggregate's plan
        (``hash_aggregate_settings``).
        ``into`` is the value type, ``Figures`` or a subclass (the chargeback's priced one).
        """
        if not group_by:
            raise ValueError("figures() needs a grouping; total() sums everything")
        names = _checked(names)
        queryset = self.annotate(**computed) if computed else self
        queryset = (
            queryset.values(*group_by)
            .annotate(**_aggregates(names))
            .order_by(*(_ordering(term, names) for term in order_by))
        )
        if limit is not None:
            queryset = queryset[:limit]
        group_of = itemgetter(*group_by)  # the value for one field, the tuple for several
        return {
            group_of(row): into.from_values(row, SUM_PREFIX, names)
            for row in _fetch(queryset, big_scan, hash_groups=hash_groups)
        }

    def ranking(
        self,
        group_by: str,
        by: str,
        *,
        priced: Sequence[tuple[str, Any, int]] = (),
        then: Sequence[str] = (),
        limit: int | None = None,
        big_scan: bool = False,
    ) -> list[Any]:
        """The groups, largest ``by`` first (ties in ``then`` order), at most ``limit``: the
        groups of ``ranked``, in the order ``ranked`` gives them, JIT off with ``big_scan``
        (see ``figures``).

        The groups are ranked first and ordered after: ``then`` may name fields of the row a
        foreign-key ``group_by`` points at (``"-workload__observed_at"``), and that table is
        joined to the ranked groups (50,000 workloads), not to every rollup row they sum (the
        month's 600,000: a third of the query, bench/RESULTS.md). The sort keys are the same, so
        the order is the same; with ``limit`` PostgreSQL keeps only the top rows as it sorts.
        """
        quote = connections[self.db].ops.quote_name
        grouped = self._rank_keys(group_by, by, priced).values(group_by, "rank_key").order_by()
        try:
            inner, params = grouped.query.sql_with_params()
        except EmptyResultSet:
            return []
        group_column = quote(column(self.model._meta.get_field(group_by)))
        join = ""
        order = ['"ranked"."rank_key" DESC']
        for term in then:
            name = term.removeprefix("-")
            direction = "DESC" if term.startswith("-") else "ASC"
            if name == group_by:
                order.append(f'"ranked".{group_column} {direction}')
                continue
            relation, _, field_name = name.partition("__")
            foreign_key = self.model._meta.get_field(relation)
            if not isinstance(foreign_key, models.ForeignKey) or foreign_key.attname != group_by:
                raise ValueError(f"ranking ties by {term!r}: not a field of the row {group_by} is")
            target = foreign_key.target_field
            tie = quote(column(target.model._meta.get_field(field_name)))
            table = quote(target.model._meta.db_table)
            key = quote(column(target))
            join = f' INNER JOIN {table} AS "tie" ON ("tie".{key} = "ranked".{group_column})'
            order.append(f'"tie".{tie} {direction}')
        sql = (
            f'SELECT "ranked".{group_column} FROM ({inner}) AS "ranked"{join} '
            f"ORDER BY {', '.join(order)}"
        )
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        planner = {"jit": "off"} if big_scan else {}
        with transaction.atomic(using=self.db), local_settings(self.db, planner):
            return [row[0] for row in fetch_sql(sql, params)]

    def _rank_keys(
        self, group_by: str, by: str, priced: Sequence[tuple[str, Any, int]]
    ) -> models.QuerySet[Any, Any]:
        """Per value of ``group_by``, its ``rank_key`` (see ``ranked``); groups without one left
        out."""
        queryset: models.QuerySet[Any, Any] = self.values(group_by)
        if by == "cost":
            if not priced:
                raise ValueError("ranking by cost needs priced components")
            _checked(figure for figure, _price, _sign in priced)
            key: Any = None
            for figure, price, sign in priced:
                product = ExpressionWrapper(models.F(figure) * price, output_field=FloatField())
                exact = Cast(Sum(product), models.DecimalField(max_digits=30, decimal_places=12))
                component = Round(exact, 2) * sign
                key = component if key is None else ExpressionWrapper(key + component, CENTS)
        elif by in RANKED_RATIOS:
            numerator, denominator = RANKED_RATIOS[by]
            queryset = queryset.annotate(rank_num=Sum(numerator), rank_den=Sum(denominator))
            ratio = models.F("rank_num") / models.F("rank_den")
            key = Case(When(rank_den__gt=0, then=ratio), output_field=FloatField())
        else:
            key = _aggregates(_checked((by,)))[SUM_PREFIX + by]
        queryset = queryset.annotate(rank_key=key)
        if by in RANKED_RATIOS:
            # Only a ratio can be unknown. A sum of figures (NOT NULL columns) or of figure ×
            # price (prices are values or CASEs with a default) over a group's rows never is:
            # no HAVING, which computed the rounded cost of every group twice.
            queryset = queryset.filter(rank_key__isnull=False)
        return queryset

    def ranked(
        self,
        group_by: str,
        by: str,
        *,
        priced: Sequence[tuple[str, Any, int]] = (),
        then: Sequence[str] = (),
    ) -> models.QuerySet[Any, Any]:
        """The values of ``group_by``, largest ``by`` first (ties in ``then`` order): one GROUP
        BY query that returns only the group values, so a page can rank every group without
        building its figures (lazy: also a subquery of the groups ranked; ``ranking`` runs it).

        ``by`` is a figure (its sum), a ratio of ``RANKED_RATIOS`` (the ratio of the sums, as
        ``Figures``; groups where it is unknown are left out), or ``"cost"``: per component
        ``(figure, price, sign)`` of ``priced``, Σ figure × price (a per-row price expression
        that is never NULL: a value, or a CASE with a default) rounded to cents, signed and
        added, as the chargeback prices and rounds a row.
        """
        return (
            self._rank_keys(group_by, by, priced)
            .order_by(models.F("rank_key").desc(), *then)
            .values_list(group_by, flat=True)
        )

    def total(self, *, names: Iterable[str] = FIGURES, big_scan: bool = False) -> Figures:
        """The figures of every row together (zeros when there is none)."""
        names = _checked(names)
        values = _fetch(self.order_by(), big_scan, aggregates=_aggregates(names))
        return Figures.from_values(values[0], SUM_PREFIX, names)

    def hours_with_data(self, group_by: str) -> dict[Any, int]:
        """``{group: hours that have a row}``: what a mean over a range that began before the
        data existed divides by (a range's hours without rows are "no data", not 0 GPUs)."""
        rows = self.order_by().values(group_by).annotate(hours=Count("hour", distinct=True))
        return {row[group_by]: row["hours"] for row in rows}

    def hourly(
        self, time_range: TimeRange | HourSpan, *, names: Iterable[str] = FIGURES
    ) -> list[Figures | None]:
        """One ``Figures`` per hour the range counts, oldest first; None where no row exists
        (a gap, "no data", never 0). The x axis is ``time_range.complete_hours()``."""
        span = hour_span(time_range)
        return self.series(span, (), names=names).get((), [None] * span.count)

    def series(
        self,
        time_range: TimeRange | HourSpan,
        group_by: Sequence[str],
        *,
        names: Iterable[str] = FIGURES,
    ) -> dict[Any, list[Figures | None]]:
        """Per group (as in ``figures``; ``()`` without grouping), one ``Figures`` per hour the
        range counts, oldest first, None where the group has no row.

        Rows come as tuples rather than dicts: a month of a 20-queue cohort is 14,000
        group-hours, where building a dict per row cost as much as the query (bench/pages.py).
        """
        span = hour_span(time_range)
        names = _checked(names)
        position = {hour: index for index, hour in enumerate(span.starts())}
        width = len(group_by)
        aggregates = _aggregates(names)
        grouped = self.covering(span).values("hour", *group_by).annotate(**aggregates).order_by()
        result: dict[Any, list[Figures | None]] = {}
        # One fetch with psycopg's own timestamp loader (``core.bulk.fetch_rows``): Django's
        # per-value loader was a third of a 30-day cohort chart.
        for row in fetch_rows(grouped, "hour", *group_by, *aggregates):
            group = row[1] if width == 1 else tuple(row[1 : 1 + width])
            found = Figures(
                **{name: value or 0.0 for name, value in zip(names, row[1 + width :], strict=True)}
            )
            result.setdefault(group, [None] * len(position))[position[row[0]]] = found
        return result


class HourlyRollup(models.Model):
    """Every figure of DESIGN "Figures" for one group, one hour, one flavor / GPU model.

    ``key`` is the group's natural name (team name, ``namespace/name`` for namespaced objects,
    node name, cluster name for the fleet); the optional foreign keys let pages join cheaply.
    """

    cluster = models.ForeignKey(Cluster, related_name="rollups", on_delete=models.CASCADE)
    scope = models.CharField(max_length=20, choices=RollupScope.choices)
    key = models.CharField(max_length=520)
    hour = models.DateTimeField(help_text="Start of the hour (UTC).")
    flavor = models.CharField(max_length=253, blank=True)
    gpu_model = models.CharField(max_length=200, blank=True)
    team = models.ForeignKey(
        Team,
        related_name="rollups",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        related_name="rollups",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    workload = models.ForeignKey(
        Workload,
        related_name="rollups",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
    )
    capacity_gpu_hours = models.FloatField(default=0.0)
    allocated_gpu_hours = models.FloatField(default=0.0)
    telemetry_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Allocated GPU-hours that have telemetry.",
    )
    active_gpu_hours = models.FloatField(default=0.0, help_text="Σ activity × GPU-hours.")
    idle_gpu_hours = models.FloatField(default=0.0)
    shared_gpu_hours = models.FloatField(default=0.0)
    fallback_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Telemetry GPU-hours whose activity came from GR_ENGINE_ACTIVE.",
    )
    tensor_active_gpu_hours = models.FloatField(default=0.0)
    tensor_covered_gpu_hours = models.FloatField(default=0.0)
    gpu_util_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Σ GPU_UTIL/100 × GPU-hours, for 'busy but not working'.",
    )
    gpu_util_covered_gpu_hours = models.FloatField(default=0.0)
    busy_not_working_gpu_hours = models.FloatField(
        default=0.0,
        help_text="Allocated GPU-hours with GPU_UTIL high while SM_ACTIVE is low.",
    )
    nominal_gpu_hours = models.FloatField(default=0.0)
    borrowed_gpu_hours = models.FloatField(default=0.0)
    lent_gpu_hours = models.FloatField(default=0.0)
    pending_gpu_hours = models.FloatField(default=0.0)
    peak_allocated_gpus = models.FloatField(default=0.0)
    windows = models.PositiveIntegerField(default=0, help_text="Collection windows rolled in.")
    updated_at = models.DateTimeField(auto_now=True)

    objects = HourlyRollupQuerySet.as_manager()

    # The figure columns, summed by the read layer (ledger.figures.Figures has one field each).
    FIGURES = FIGURES

    class Meta:
        db_table = "fleet_hourlyrollup"
        ordering = ["-hour", "scope", "key"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "scope", "key", "hour", "flavor", "gpu_model"],
                name="fleet_rollup_identity",
            ),
        ]
        indexes = [
            # Chargeback and pages: one scope over a time range, grouped by key.
            models.Index(fields=["scope", "hour", "key"], name="fleet_rollup_scope_hour"),
            # Team page: one team's hours.
            models.Index(fields=["team", "scope", "hour"], name="fleet_rollup_team_hour"),
            # ClusterQueue page: one queue's hours.
            models.Index(
                fields=["cluster_queue", "scope", "hour"],
                name="fleet_rollup_cq_hour",
            ),
            # Workload page and workload chargeback.
            models.Index(fields=["workload", "hour"], name="fleet_rollup_workload_hour"),
            # Busy-but-not-working page, per workload over a range (busy_by_workload):
            # partial (only group-hours that had any) and carrying every summed column, so
            # PostgreSQL answers 30 days of 50,000 workloads with an index-only scan. Plain key
            # columns rather than INCLUDE, which SQLite does not support.
            models.Index(
                fields=[
                    "scope",
                    "hour",
                    "workload",
                    "team",
                    "busy_not_working_gpu_hours",
                    "allocated_gpu_hours",
                    "gpu_util_gpu_hours",
                    "gpu_util_covered_gpu_hours",
                    "active_gpu_hours",
                    "telemetry_gpu_hours",
                    "peak_allocated_gpus",
                ],
                condition=Q(busy_not_working_gpu_hours__gt=0),
                name="fleet_rollup_busy_hour",
            ),
            # Chargeback (ledger.chargeback.aggregate_pieces): one scope over a range, summed
            # per (cluster, key, flavor, GPU model) as an index-only scan, so a year by team
            # reads ~200 MB of index instead of the whole table (bench/RESULTS.md).
            models.Index(
                fields=["scope", "hour"],
                include=[
                    "cluster",
                    "key",
                    "flavor",
                    "gpu_model",
                    "capacity_gpu_hours",
                    "allocated_gpu_hours",
                    "telemetry_gpu_hours",
                    "active_gpu_hours",
                    "idle_gpu_hours",
                    "nominal_gpu_hours",
                    "borrowed_gpu_hours",
                    "lent_gpu_hours",
                    "pending_gpu_hours",
                ],
                name="fleet_rollup_chargeback",
            ),
            # Cohort and team charts and the cohort's borrowing flows: a month of every member
            # ClusterQueue's hours (20 queues: 14,400 rows, each on its own table page) as an
            # index-only scan of what those charts plot (bench/RESULTS.md, 2026-12-01).
            models.Index(
                fields=["cluster_queue", "hour"],
                include=[
                    "flavor",
                    "allocated_gpu_hours",
                    "nominal_gpu_hours",
                    "borrowed_gpu_hours",
                    "lent_gpu_hours",
                ],
                condition=Q(scope=RollupScope.CLUSTER_QUEUE),
                name="fleet_rollup_cq_series",
            ),
            # The busy-but-not-working page's team table and chart (dashboard.queries.busy
            # busy_by_team): a month of every team's hours (72,000 rows on bench/pages.py's
            # data, each on its own table page: a bitmap heap scan of 70 ms) as an index-only
            # scan of the figures that table shows.
            models.Index(
                fields=["hour"],
                include=[
                    "team",
                    "busy_not_working_gpu_hours",
                    "allocated_gpu_hours",
                    "gpu_util_gpu_hours",
                    "gpu_util_covered_gpu_hours",
                    "active_gpu_hours",
                    "telemetry_gpu_hours",
                ],
                condition=Q(scope=RollupScope.TEAM),
                name="fleet_rollup_team_busy",
            ),
            # The workload list sorted by a figure (HourlyRollupQuerySet.ranking): every
            # workload's rows of the range, with what its GPU-hours, idle share and cost sum.
            models.Index(
                fields=["hour"],
                include=[
                    "workload",
                    "flavor",
                    "gpu_model",
                    "allocated_gpu_hours",
                    "idle_gpu_hours",
                    "nominal_gpu_hours",
                    "borrowed_gpu_hours",
                    "lent_gpu_hours",
                ],
                condition=Q(scope=RollupScope.WORKLOAD),
                name="fleet_rollup_workload_rank",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope}:{self.key} {self.hour:%Y-%m-%d %H:00}"

    @classmethod
    def figures_in_index(cls, index_name: str) -> tuple[str, ...]:
        """The figures an index of this table carries: a sum of only those (and of grouping
        columns it carries) can be answered by an index-only scan."""
        index = next(index for index in cls._meta.indexes if index.name == index_name)
        carried = {*index.fields, *index.include}
        return tuple(name for name in FIGURES if name in carried)

    @property
    def figures(self) -> Figures:
        """This row's figures, with the ratios."""
        return Figures.of(self)

    @property
    def utilization(self) -> float | None:
        return self.figures.utilization

    @property
    def telemetry_coverage(self) -> float | None:
        return self.figures.telemetry_coverage


class RateCardQuerySet(models.QuerySet["RateCard"]):
    def in_currency(self, currency: str) -> RateCardQuerySet:
        return self.filter(currency=currency)


class RateCard(models.Model):
    """A price per GPU-hour for one flavor, one GPU model, or everything else, from a date on.

    A new price is a new card with a later ``effective_from``; each hour is priced with the card
    in force when it starts, so past periods keep their price. A flavor card beats a GPU-model
    card, which beats a default card (both empty).
    """

    kind = models.CharField(
        max_length=16,
        choices=RateKind.choices,
        default=RateKind.ALLOCATED,
    )
    flavor = models.CharField(
        max_length=253,
        blank=True,
        help_text="ResourceFlavor name this price is for; empty = not flavor-specific.",
    )
    gpu_model = models.CharField(
        max_length=200,
        blank=True,
        help_text="GPU model (DCGM modelName), used when no flavor card matches.",
    )
    price_per_gpu_hour = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        help_text="Price of one GPU-hour (credit per lent GPU-hour for lending cards).",
    )
    currency = models.CharField(
        max_length=3,
        default=default_currency,
        help_text="ISO 4217; only cards in GPULEDGER_CURRENCY are used.",
    )
    effective_from = models.DateTimeField(
        help_text="Hours starting at or after this instant use this price.",
    )
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RateCardQuerySet.as_manager()

    class Meta:
        db_table = "quotas_ratecard"
        ordering = ["kind", "flavor", "gpu_model", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "flavor", "gpu_model", "currency", "effective_from"],
                name="quotas_ratecard_effective",
            ),
            models.CheckConstraint(
                condition=models.Q(flavor="") | models.Q(gpu_model=""),
                name="quotas_ratecard_one_target",
            ),
            models.CheckConstraint(
                condition=models.Q(price_per_gpu_hour__gte=0),
                name="quotas_ratecard_price_not_negative",
            ),
        ]

    def __str__(self) -> str:
        target = self.flavor or self.gpu_model or "default"
        return f"{self.kind} {target} {self.price_per_gpu_hour} {self.currency}"


def _dirty() -> Q:
    return Q(changes__gt=models.F("rolled_changes"))


def _unsettled(now: datetime) -> Q:
    wait = RollupHour.settle_delay()
    settled_at = models.ExpressionWrapper(
        models.F("hour") + wait, output_field=models.DateTimeField()
    )
    return Q(hour__lte=now - wait) & (Q(rolled_up_at__isnull=True) | Q(rolled_up_at__lt=settled_at))


class RollupHourQuerySet(models.QuerySet["RollupHour"]):
    def kept(self) -> RollupHourQuerySet:
        """Hours whose usage rows are all still there (none pruned), so they can be re-rolled."""
        return self.filter(usage_pruned=False)

    def dirty(self) -> RollupHourQuerySet:
        """Hours with a window written since (or while) their last successful rollup read them."""
        return self.filter(_dirty())

    def unsettled(self, now: datetime) -> RollupHourQuerySet:
        """Hours past their settle time whose last rollup ran before it, or that never ran."""
        return self.filter(_unsettled(now))

    def due(self, now: datetime) -> RollupHourQuerySet:
        """Hours to roll up now: kept, and dirty or unsettled (``RollupHour.is_due``)."""
        return self.kept().filter(_dirty() | _unsettled(now))


class RollupHour(models.Model):
    """Whether one cluster-hour's rollup includes every window written to it (ledger.rollup).

    The collector bumps ``changes`` in the transaction that writes a window of the hour;
    ``roll_up_hour`` reads ``changes`` before it computes and stores what it read in
    ``rolled_changes`` in the transaction that replaces the rollup rows. So a rollup that failed,
    was killed, or raced a later window leaves ``changes > rolled_changes``: the hour is dirty
    until a rollup that saw every window commits. Queue samples are written by the Kueue sync,
    which cannot bump the counter: an hour last rolled up before ``GPULEDGER_ROLLUP_SETTLE_SECONDS``
    after its end is rolled up once more after that.
    """

    cluster = models.ForeignKey(
        Cluster,
        related_name="rollup_hours",
        on_delete=models.CASCADE,
    )
    hour = models.DateTimeField(help_text="Start of the hour (UTC).")
    changes = models.PositiveBigIntegerField(
        default=0,
        help_text="Bumped with every window written to this hour.",
    )
    rolled_changes = models.PositiveBigIntegerField(
        default=0,
        help_text="The change count the last successful rollup read before computing.",
    )
    rolled_up_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the last successful rollup started reading the hour.",
    )
    usage_pruned = models.BooleanField(
        default=False,
        help_text="Retention deleted usage rows of this hour: its rollup is kept, never rebuilt.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RollupHourQuerySet.as_manager()

    class Meta:
        ordering = ["-hour", "cluster_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "hour"],
                name="ledger_rolluphour_cluster_hour",
            ),
        ]
        indexes = [
            # The sweep (ledger.rollup.completeness.due_hours): only hours whose usage is kept,
            # a couple of weeks per cluster out of the 400 days of rollups.
            models.Index(
                fields=["cluster", "hour"],
                condition=Q(usage_pruned=False),
                name="ledger_rolluphour_kept",
            ),
        ]

    def __str__(self) -> str:
        done = f"{self.rolled_changes}/{self.changes} changes rolled up"
        return f"cluster {self.cluster_id} {self.hour:%Y-%m-%d %H:00} ({done})"

    @staticmethod
    def settle_delay() -> timedelta:
        """From an hour's start until its late queue samples are in: the hour, then the settle."""
        return timedelta(hours=1, seconds=settings.GPULEDGER_ROLLUP_SETTLE_SECONDS)

    @property
    def is_dirty(self) -> bool:
        return self.changes > self.rolled_changes

    def is_unsettled(self, now: datetime) -> bool:
        settled_at = self.hour + self.settle_delay()
        if now < settled_at:
            return False
        return self.rolled_up_at is None or self.rolled_up_at < settled_at

    def is_due(self, now: datetime) -> bool:
        """Whether the hour wants a rollup now; the Python twin of ``RollupHourQuerySet.due``."""
        return not self.usage_pruned and (self.is_dirty or self.is_unsettled(now))
