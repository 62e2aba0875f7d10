"""Writing many changed episodes at once.

Django's ``bulk_update`` writes one ``CASE WHEN id = … THEN …`` per field and row, which
PostgreSQL evaluates row by row: quadratic in the batch (thousands of open idle episodes took
tens of seconds per window at 50,000 GPUs, bench/alerts.py). On PostgreSQL the rows go in as one
``UPDATE … FROM (VALUES …)`` per batch instead; other databases use ``bulk_update``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field

from alerts.models import Episode

BATCH = 1000


def update_episodes(episodes: Sequence[Episode], names: Sequence[str]) -> None:
    if not episodes:
        return
    if connection.vendor != "postgresql":
        Episode.objects.bulk_update(episodes, list(names), batch_size=BATCH)
        return
    fields: list[Field[Any, Any]] = [
        field for name in names if isinstance(field := Episode._meta.get_field(name), Field)
    ]
    quote = connection.ops.quote_name
    columns = [str(field.column) for field in fields]
    casts = ["bigint", *(field.db_type(connection) for field in fields)]
    table = quote(Episode._meta.db_table)
    assignments = ", ".join(f"{quote(c)} = v.{quote(c)}" for c in columns)
    names_sql = ", ".join(["id", *(quote(c) for c in columns)])
    for offset in range(0, len(episodes), BATCH):
        batch = episodes[offset : offset + BATCH]
        params: list[Any] = []
        rows = []
        for position, episode in enumerate(batch):
            values = [episode.pk]
            for field in fields:
                values.append(field.get_db_prep_save(getattr(episode, field.attname), connection))
            params.extend(values)
            if position == 0:
                rows.append("(" + ", ".join(f"%s::{cast}" for cast in casts) + ")")
            else:
                rows.append("(" + ", ".join(["%s"] * len(values)) + ")")
        sql = (
            f"UPDATE {table} AS e SET {assignments} FROM (VALUES {', '.join(rows)}) "
            f"AS v({names_sql}) WHERE e.id = v.id"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
