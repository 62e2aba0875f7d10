"""Writing many changed episodes at once.

Django's ``bulk_update`` writes one ``CASE WHEN id = … THEN …`` per field and row, which
PostgreSQL evaluates row by row: quadratic in the batch. A ``VALUES`` list with one parameter
per cell was no better: psycopg spent most of the time splitting a query of 26,000
placeholders (bench/alerts.py). On PostgreSQL the rows go in as one array per column,
``UPDATE … FROM unnest(%s::bigint[], …)``; other databases use ``bulk_update``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, JSONField

from alerts.models import Episode

BATCH = 5000


def _array_type(field: Field[Any, Any]) -> str:
    if isinstance(field, JSONField):
        return "text"  # cast to jsonb in the SET
    db_type = str(field.db_type(connection))
    if db_type.startswith("varchar"):
        return "text"
    return db_type.split("(")[0]


def _cell(field: Field[Any, Any], episode: Episode) -> Any:
    value = getattr(episode, field.attname)
    if isinstance(field, JSONField):
        return json.dumps(value, cls=field.encoder)
    return field.get_db_prep_save(value, connection)


def update_episodes(episodes: Sequence[Episode], names: Sequence[str]) -> None:
    if not episodes:
        return
    if connection.vendor != "postgresql":
        Episode.objects.bulk_update(episodes, list(names), batch_size=1000)
        return
    fields: list[Field[Any, Any]] = [
        field for name in names if isinstance(field := Episode._meta.get_field(name), Field)
    ]
    quote = connection.ops.quote_name
    table = quote(Episode._meta.db_table)
    columns = [str(field.column) for field in fields]
    assignments = ", ".join(
        f"{quote(column)} = v.{quote(column)}" + ("::jsonb" if isinstance(field, JSONField) else "")
        for column, field in zip(columns, fields, strict=True)
    )
    arrays = ", ".join(["%s::bigint[]", *(f"%s::{_array_type(field)}[]" for field in fields)])
    names_sql = ", ".join(["id", *(quote(column) for column in columns)])
    sql = (
        f"UPDATE {table} AS e SET {assignments} FROM unnest({arrays}) AS v({names_sql}) "
        "WHERE e.id = v.id"
    )
    for offset in range(0, len(episodes), BATCH):
        batch = episodes[offset : offset + BATCH]
        params: list[Any] = [[episode.pk for episode in batch]]
        params.extend([_cell(field, episode) for episode in batch] for field in fields)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
