"""Usage figures of one scope through the ORM: the path every database takes, and the reference.

Per scope, one GROUP BY per (group, flavor, GPU model, window) over the hour's usage, summed and
peaked over the windows. SQLite always takes it; PostgreSQL takes ``ledger.rollup.postgres``
instead, which a test compares with this path on random hours.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import F, FloatField, Func, QuerySet, Sum, Value

from ledger.figures import FIGURES, sum_q
from ledger.models import GpuUsage
from ledger.rollup.groups import Group
from ledger.rollup.row_figures import USAGE_FIGURES, WINDOW_SUMS, thresholds


class WindowSeconds(Func):
    """``end - start`` of two datetimes, in seconds, as a float."""

    arity = 2
    arg_joiner = " - "
    template = "CAST(EXTRACT(EPOCH FROM (%(expressions)s)) AS double precision)"
    output_field = FloatField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        # Windows are aligned to whole seconds, so the day fractions are rounded back to them.
        end_sql, end_params = compiler.compile(self.source_expressions[0])
        start_sql, start_params = compiler.compile(self.source_expressions[1])
        sql = f"ROUND((julianday({end_sql}) - julianday({start_sql})) * 86400.0)"
        return sql, (*end_params, *start_params)


def _usage_per_window(base: QuerySet[GpuUsage], group: Group) -> QuerySet[GpuUsage, Any]:
    """One row per (group, flavor, GPU model, window) with the window's GPU sums."""
    limits = thresholds()
    sums = {
        figure.column: Sum(expression, filter=rows)
        for figure in FIGURES
        for expression, rows in [sum_q(figure, limits)]
    }
    queryset = base.filter(allocated=True) if group.allocated_only else base
    return (
        queryset.order_by()
        .annotate(
            g_key=group.key,
            g_flavor=F("flavor"),
            g_model=F("gpu_model"),
            w_end=F("window_end"),
            w_hours=WindowSeconds(F("window_end"), F("window_start")) / Value(3600.0),
        )
        .values("g_key", "g_flavor", "g_model", "w_end", "w_hours")
        .annotate(
            **sums,
            **group.fk_maxima(),
        )
    )


def usage_rows(base: QuerySet[GpuUsage], group: Group) -> list[dict[str, Any]]:
    """The group's figures for the hour: per-window sums, then summed (and peaked) over windows.

    The ORM builds the per-window GROUP BY; the second level (a GROUP BY over that derived table)
    is plain SQL because the ORM cannot select from a subquery.
    """
    inner_sql, params = _usage_per_window(base, group).query.sql_with_params()
    foreign_keys = group.carried_keys()
    columns = [
        *(f"SUM({column} * w_hours)" for _, column in WINDOW_SUMS),
        "MAX(COALESCE(f_allocated, 0))",
        "COUNT(DISTINCT w_end)",
        *(f"MAX(fk_{name})" for name in foreign_keys),
    ]
    sql = (
        f"SELECT g_key, g_flavor, g_model, {', '.join(columns)} "
        f"FROM ({inner_sql}) per_window GROUP BY g_key, g_flavor, g_model"
    )
    names = [
        "key",
        "flavor",
        "gpu_model",
        *USAGE_FIGURES,
        "peak_allocated_gpus",
        "windows",
        *foreign_keys,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
