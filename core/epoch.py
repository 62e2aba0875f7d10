"""Datetimes read as Unix seconds (floats), in the database: for reads of many rows where the
caller only subtracts and compares times, a float loads far faster than a timezone-aware
datetime (psycopg parses each timestamp's text in Python)."""

from __future__ import annotations

from typing import Any

from django.db.models import FloatField, Func


class EpochSeconds(Func):
    """A datetime column or expression as seconds since 1970-01-01 UTC, a float (null stays null).

    PostgreSQL: ``date_part``, the double nearest to the exact value, as a cast of ``EXTRACT``'s
    numeric gives, without the numeric arithmetic (a month of admission records, 56 k rows of five
    times: 77 ms -> 22 ms, bench/RESULTS.md). SQLite (text datetimes): through ``julianday``,
    rounded to the millisecond.
    """

    arity = 1
    template = "date_part('epoch', %(expressions)s)"
    output_field = FloatField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        sql, params = compiler.compile(self.source_expressions[0])
        return f"ROUND((julianday({sql}) - 2440587.5) * 86400.0, 3)", params
