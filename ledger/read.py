"""The read layer over the hourly rollups (docs/architecture.md "Read layer"):
``HourlyRollupQuerySet``, the only code that sums rollup figures, as ``HourlyRollup.objects``.

``covering`` keeps the hours a range counts (``core.ranges.covered_hours``); ``figures`` sums
the figures per group, ``total`` over everything, ``ranking`` orders groups by a summed figure
or ratio, ``hourly`` / ``series`` per hour for charts; each returns ``ledger.range_figures.Figures``
(or a subclass) with the ratios. Pages, charts, the chargeback and OpenCost read figures
through it; a test fails if any other module sums a rollup column.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from django.core.exceptions import EmptyResultSet
from django.db import connections, models, transaction
from django.db.models import Case, Count, ExpressionWrapper, FloatField, Max, Sum, When
from django.db.models.functions import Cast, Round

from core.bulk import column, fetch_rows, fetch_sql
from core.pgsettings import local_settings
from core.ranges import HourSpan, TimeRange, covered_hours
from ledger.range_figures import FIGURES, PEAK_FIGURES, F, Figures

if TYPE_CHECKING:
    from ledger.models import HourlyRollup  # noqa: F401 - named in the base class, a string

# Aggregates are named sum_<figure>: a bare figure name would clash with the column.
SUM_PREFIX = "sum_"
CENTS = models.DecimalField(max_digits=30, decimal_places=2)
# The ratios ``HourlyRollupQuerySet.ranking`` ranks by: (numerator, denominator) figures, as
# the ``Figures`` properties of the same names compute them (core.ratios).
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
    """The read layer over rollups (docs/architecture.md "Read layer"): the only code that sums
    them.

    ``covering`` keeps the hours a range counts (``core.ranges.covered_hours``); ``figures``
    sums ``FIGURES`` per group, ``total`` over everything, ``hourly`` / ``series`` per hour for
    charts; each returns ``ledger.range_figures.Figures`` with the ratios.
    """

    def for_scope(self, scope: str) -> HourlyRollupQuerySet:
        return self.filter(scope=scope)

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
            return [row[0] for row in fetch_sql(sql, params, using=self.db)]

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
