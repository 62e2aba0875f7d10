"""Writing many changed episodes at once.

Django's ``bulk_update`` writes one ``CASE WHEN id = … THEN …`` per field and row, which
PostgreSQL evaluates row by row: quadratic in the batch. A ``VALUES`` list with one parameter
per cell was no better (psycopg spent most of the time splitting a query of 26,000
placeholders), nor one array per column (psycopg escapes every text element of an array with a
regular expression: 6 s for 5,800 episodes' evidence under a profiler, bench/alerts.py). On
PostgreSQL the rows go into a temporary table with binary COPY (``core.bulk.copy_rows``), then
one ``UPDATE … FROM`` it; other databases run one prepared ``UPDATE`` per episode.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Any

from django.db import connection
from django.db.models import Field, JSONField

from alerts.models import Episode
from core.bulk import copy_rows

STAGING = "alerts_episode_staging"


def _rows(fields: Sequence[Field[Any, Any]], episodes: Sequence[Episode]) -> Iterator[tuple]:
    """The staging rows: the attributes as they are (datetimes, decimals, numbers, text, ids),
    JSON as its text (cast back to jsonb in the UPDATE)."""
    values = attrgetter("pk", *(field.attname for field in fields))
    encoders = [
        (position + 1, field.encoder)
        for position, field in enumerate(fields)
        if isinstance(field, JSONField)
    ]
    for episode in episodes:
        row = list(values(episode))
        for position, encoder in encoders:
            row[position] = json.dumps(row[position], cls=encoder)
        yield tuple(row)


def update_episodes(episodes: Sequence[Episode], names: Sequence[str]) -> None:
    if not episodes:
        return
    fields: list[Field[Any, Any]] = [
        field for name in names if isinstance(field := Episode._meta.get_field(name), Field)
    ]
    quote = connection.ops.quote_name
    table = quote(Episode._meta.db_table)
    if connection.vendor != "postgresql":
        _update_each(table, fields, episodes)
        return
    columns = [str(field.column) for field in fields]
    select = ", ".join(
        [
            "id",
            *(
                f"{quote(c)}::text" if isinstance(f, JSONField) else quote(c)
                for c, f in zip(columns, fields, strict=True)
            ),
        ]
    )
    names_sql = ", ".join(["id", *(quote(column) for column in columns)])
    assignments = ", ".join(
        f"{quote(column)} = v.{quote(column)}" + ("::jsonb" if isinstance(field, JSONField) else "")
        for column, field in zip(columns, fields, strict=True)
    )
    with connection.cursor() as cursor:
        # Same column types as the table, JSON as text; no constraints; gone at commit.
        cursor.execute(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGING} ON COMMIT DROP AS "
            f"SELECT {select} FROM {table} WITH NO DATA"
        )
        cursor.execute(f"TRUNCATE {STAGING}")
        copy_rows(STAGING, ["id", *columns], _rows(fields, episodes))
        cursor.execute(
            f"UPDATE {table} AS e SET {assignments} FROM {STAGING} AS v({names_sql}) "
            "WHERE e.id = v.id"
        )


def _update_each(
    table: str, fields: Sequence[Field[Any, Any]], episodes: Sequence[Episode]
) -> None:
    """One ``UPDATE … WHERE id = %s`` executed for every episode (a prepared statement on
    SQLite), the values prepared as ``save`` prepares them. ``bulk_update``'s CASE expressions
    were compiled in Python per field and row: 11 s of the alert-run tests' 18 s world."""
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(str(field.column))} = %s" for field in fields)
    params = [
        [field.get_db_prep_save(getattr(episode, field.attname), connection) for field in fields]
        + [episode.pk]
        for episode in episodes
    ]
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {table} SET {assignments} WHERE id = %s", params)  # noqa: S608
