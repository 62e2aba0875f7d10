"""Set-based reads and writes on Django's connection: the one bulk engine every store writes with.

Model-free (it takes model classes and querysets, imports no app). A write costs a constant number
of statements whatever the number of rows (docs/conventions.md "Background work"); batch sizes are
the caller's, from its app's ``constants.py``, and matter only off PostgreSQL.

Two ways to write, for the two shapes of work:

* :func:`insert_rows` takes rows as tuples of column values and INSERTs them, with ``ON CONFLICT``
  on a unique constraint. PostgreSQL gets binary COPY (:func:`copy_rows`) into a temporary table
  and one ``INSERT … SELECT``; other databases one ``executemany``. The caller decides which rows
  to write. It carries the per-window writes of tens of thousands of rows (GPUs, allocations and
  usage from DCGM and kube-state-metrics), where building model instances and Django's per-value
  SQL compilation were most of the cost (bench/ingest_pure.py).
* :func:`upsert` takes rows as field values keyed by their identity, reads what is stored, and
  writes only the rows that are new or changed with ``bulk_create(update_conflicts=True)``; rows
  missing from a complete list get ``deleted_at``. It carries the API server's objects (Kueue
  kinds, nodes, pods): fewer rows, many field types (JSON, decimals), strings cut to their column.

Reads: :func:`filter_in` (one array parameter on PostgreSQL, ``IN`` batches elsewhere),
:func:`fetch_rows` (tuples in one fetch on PostgreSQL), :func:`read_keys` (rows by a composite
key), :func:`fetch_instances` (model instances from one fetch); :func:`update_in` updates rows
picked by one field's values the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

from django.core.exceptions import EmptyResultSet, FieldDoesNotExist
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import BooleanField, DecimalField, Field, JSONField, Model, Q, QuerySet
from django.db.models.base import ModelState
from django.db.models.expressions import RawSQL
from django.db.models.fields.reverse_related import ForeignObjectRel
from django.db.models.signals import post_init
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.batching import chunks

M = TypeVar("M", bound=Model)

# --- Reading -------------------------------------------------------------------------------------


def column(model_field: Field | ForeignObjectRel) -> str:
    """The database column of a concrete field."""
    if isinstance(model_field, ForeignObjectRel) or model_field.column is None:
        raise ValueError(f"{model_field!r} has no database column")
    return model_field.column


def _in(queryset: QuerySet, name: str, values: Sequence[Any]) -> QuerySet:
    """``queryset`` filtered on ``name IN values``: one array parameter on PostgreSQL.

    Building an ``IN`` list of thousands of placeholders cost more CPU than the query itself
    (Django prepares every value; profiled on the 50,000-GPU write of bench/ingest_pure.py).
    """
    if connection.vendor != "postgresql":
        return queryset.filter(**{f"{name}__in": values})
    meta = queryset.model._meta
    quote = connection.ops.quote_name
    target = meta.pk if name == "pk" else meta.get_field(name)
    qualified = f"{quote(meta.db_table)}.{quote(column(target))}"
    condition = RawSQL(f"{qualified} = ANY(%s)", (list(values),), output_field=BooleanField())
    return queryset.filter(condition)


def filter_in(
    queryset: QuerySet, name: str, values: Sequence[Any], batch_size: int
) -> Iterator[QuerySet]:
    """``queryset`` filtered on ``name IN values``, in as few queries as the database allows.

    PostgreSQL: one query with one array parameter. Elsewhere: ``IN`` in batches of
    ``batch_size`` values (SQLite limits the variables of a statement).

    For lookups through an index on ``name`` (ids, keys). As a filter on every row of a large
    scan, a parameter's array is searched linearly per row, where PostgreSQL hashes an ``IN``
    list of constants: 120 ms against 17 ms for 500 ids over 50,000 rows (``alerts.reading``).
    """
    if not values:
        return
    if connection.vendor == "postgresql":
        yield _in(queryset, name, values)
        return
    for chunk in chunks(values, batch_size):
        yield _in(queryset, name, chunk)


def fetch_rows(queryset: QuerySet, *fields: str) -> list[tuple]:
    """``queryset.values_list(*fields)`` as a list, in one fetch on PostgreSQL.

    Django fetches 100 rows at a time and loads ``timestamptz`` with a pure-Python loader (to
    attach the connection's time zone); psycopg's C loader returns the same instants, aware,
    in the session time zone Django sets (UTC). Reading the 18,271 stored allocations of
    bench/ingest_pure.py's steady-state window took 0.09 s of CPU this way, 0.17 s through
    ``values_list``. JSON fields of the model are decoded as Django decodes them; other
    fields with a ``from_db_value`` converter are not for this. Other databases keep Django's
    path and its converters.
    """
    values = queryset.values_list(*fields)
    if connections[values.db].vendor != "postgresql":
        return list(values)
    try:
        sql, params = values.query.sql_with_params()
    except EmptyResultSet:
        return []
    rows = fetch_sql(sql, params, using=values.db)
    decoded = [
        (position, field.decoder)
        for position, name in enumerate(fields)
        if isinstance(field := _model_field(queryset.model, name), JSONField)
    ]
    if not decoded or not rows:
        return rows
    # Django reads jsonb as text and decodes it in the field (``from_db_value``): so here.
    out = []
    for row in rows:
        cells = list(row)
        for position, decoder in decoded:
            if isinstance(cells[position], str):
                cells[position] = json.loads(cells[position], cls=decoder)
        out.append(tuple(cells))
    return out


def fetch_instances(queryset: QuerySet[M]) -> list[M]:
    """Every row of ``queryset`` as a model instance with all its concrete fields, from one
    ``fetch_rows``.

    Each instance is in the state ``Model.from_db`` leaves it (``_state.adding`` false,
    ``_state.db`` the queryset's database, one attribute per field's ``attname``, ``post_init``
    sent), but its attributes are set in one ``__dict__`` update: ``Model.__init__`` assigns
    them one by one, through the descriptor of every foreign key, which was half the cost of
    reading the ~5,800 open alert episodes a 50,000-GPU window moves on (bench/alerts.py).
    """
    model = queryset.model
    names = [model_field.attname for model_field in model._meta.concrete_fields]
    db = queryset.db
    instances = []
    for values in fetch_rows(queryset, *names):
        instance = model.__new__(model)
        instance.__dict__.update(zip(names, values, strict=True))
        state = ModelState()
        state.adding = False
        state.db = db
        instance._state = state
        post_init.send(sender=model, instance=instance)
        instances.append(instance)
    return instances


def _model_field(model: type[Model], name: str) -> Field | None:
    try:
        found = model._meta.get_field("id" if name == "pk" else name)
    except FieldDoesNotExist:
        return None
    return found if isinstance(found, Field) else None


def fetch_sql(sql: str, params: Sequence[Any], using: str = DEFAULT_DB_ALIAS) -> list[tuple]:
    """All rows of one SQL statement on database ``using`` (a read replica for a page:
    ``queryset.db``); on PostgreSQL ``timestamptz`` columns load with psycopg's C loader (aware,
    UTC: see ``fetch_rows``). Elsewhere the database driver's values as they come: the caller
    converts what it selects."""
    database = connections[using]
    with database.cursor() as cursor:
        if database.vendor == "postgresql":
            from psycopg import postgres, pq

            # The cursor's own adapters map: the connection keeps Django's loader.
            cursor.cursor.adapters.register_loader(
                "timestamptz",
                postgres.adapters.get_loader(postgres.types["timestamptz"].oid, pq.Format.TEXT),
            )
        cursor.execute(sql, params)
        return cursor.fetchall()


def sql_moment(value: object) -> datetime:
    """A timestamp column of a raw SQL row (``fetch_sql``) as an aware datetime: SQLite hands back
    text or naive UTC, PostgreSQL an aware datetime. Anything else is a ``ValueError``."""
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"not a timestamp: {value!r}")
        value = parsed
    if not isinstance(value, datetime):
        raise ValueError(f"not a timestamp: {value!r}")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def read_keys(
    queryset: QuerySet,
    key_fields: Sequence[str],
    keys: Iterable[tuple],
    fields: Sequence[str],
    batch_size: int,
) -> dict[tuple, dict[str, Any]]:
    """Rows of ``queryset`` whose key is in ``keys``: key -> ``fields`` (key fields included).

    Each key field is matched against the keys' values (one array each on PostgreSQL, ``IN`` for
    ``batch_size`` values at most elsewhere) and the exact keys in Python. More than
    ``batch_size`` keys read the whole queryset at once, which is cheaper than many lookups.
    """
    wanted = set(keys)
    if not wanted:
        return {}
    columns = list(dict.fromkeys([*key_fields, *fields]))
    queries: list[QuerySet] = []
    if len(wanted) > batch_size:
        queries.append(queryset)
    else:
        # One batch on PostgreSQL, where each field's values go as one array.
        size = len(wanted) if connection.vendor == "postgresql" else batch_size // len(key_fields)
        for chunk in chunks(sorted(wanted), size):
            query = queryset
            for position, name in enumerate(key_fields):
                query = _in(query, name, sorted({key[position] for key in chunk}))
            queries.append(query)
    found = {}
    for query in queries:
        for row in query.values(*columns):
            key = tuple(row[name] for name in key_fields)
            if key in wanted:
                found[key] = row
    return found


def update_in(
    queryset: QuerySet, name: str, values: Sequence[Any], batch_size: int, **changes: Any
) -> int:
    """``UPDATE`` the rows of ``queryset`` whose ``name`` is in ``values``; returns rows updated.

    Set-based like :func:`filter_in`: one statement on PostgreSQL. ``changes`` are written as
    given (``QuerySet.update``: ``auto_now`` fields are not touched unless named).
    """
    return sum(query.update(**changes) for query in filter_in(queryset, name, values, batch_size))


# --- Writing tuples: COPY / executemany -----------------------------------------------------------


def insert_rows(
    model: type[Model],
    columns: Sequence[str],
    rows: Sequence[tuple],
    unique_fields: Sequence[str] = (),
    update_fields: Sequence[str] = (),
    returning: bool = False,
) -> dict[tuple, int]:
    """INSERT (… ON CONFLICT) of many rows in a constant number of statements.

    ``rows`` are tuples of the values of ``columns`` (attnames, e.g. ``cluster_id``); columns not
    named get their field default, ``auto_now``/``auto_now_add`` ones the current time.

    PostgreSQL: COPY into a temporary table, then one ``INSERT … SELECT … ON CONFLICT``, which
    with ``returning`` returns the ids as ``{values of unique_fields: id}``. Profiling a
    10,000-GPU write, ``bulk_create``'s per-value SQL compilation was more than half of it;
    building model instances for 50,000 GPUs was most of what was left. Other databases:
    ``executemany`` of one prepared statement, because Django caps a multi-row INSERT at 999
    parameters on SQLite (33 usage rows), which would make the statement count grow with the
    GPUs; the result is empty and the caller reads ids back. ``unique_fields`` without
    ``update_fields`` ignores conflicts.
    """
    if not rows:
        return {}
    meta = model._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    given = {name: position for position, name in enumerate(columns)}
    now = timezone.now()
    # Per column: where to take the value from (its position in a row), or the constant for all.
    sources: list[tuple[int | None, Any]] = []
    for f in fields:
        if f.attname in given:
            sources.append((given[f.attname], None))
        elif getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            sources.append((None, now))
        else:
            sources.append((None, f.get_default()))
    if all(position == index for index, (position, _) in enumerate(sources)) and len(
        columns
    ) == len(fields):
        full_rows: Sequence[tuple] = rows
    else:
        full_rows = [
            tuple(row[position] if position is not None else value for position, value in sources)
            for row in rows
        ]
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    column_list = ", ".join(quote(column(f)) for f in fields)
    conflict = ""
    unique = [meta.get_field(name) for name in unique_fields]
    if unique:
        targets = ", ".join(quote(column(f)) for f in unique)
        if update_fields:
            updated = [quote(column(meta.get_field(name))) for name in update_fields]
            sets = ", ".join(f"{name} = excluded.{name}" for name in updated)
            conflict = f" ON CONFLICT ({targets}) DO UPDATE SET {sets}"
        else:
            conflict = f" ON CONFLICT ({targets}) DO NOTHING"
    if connection.vendor != "postgresql":
        statement = (
            f"INSERT INTO {table} ({column_list}) VALUES ({', '.join(['%s'] * len(fields))})"
        )
        params = [
            [f.get_db_prep_save(value, connection) for f, value in zip(fields, row, strict=True)]
            for row in full_rows
        ]
        with connection.cursor() as cursor:
            cursor.executemany(statement + conflict, params)
        return {}

    scratch_name = f"_gl_load_{meta.db_table}"
    scratch = quote(scratch_name)
    returned_columns = ""
    if returning:
        returned_columns = " RETURNING " + ", ".join(["id", *(quote(column(f)) for f in unique)])
    with connection.cursor() as cursor:
        # Column types only: no constraints, no identity, nothing to check twice. Dropped at
        # commit; dropped first in case this transaction loaded the same model already.
        cursor.execute(
            f"DROP TABLE IF EXISTS {scratch}; "
            f"CREATE TEMPORARY TABLE {scratch} ON COMMIT DROP AS "
            f"SELECT {column_list} FROM {table} WITH NO DATA"
        )
    copy_rows(scratch_name, [column(f) for f in fields], full_rows)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({column_list}) SELECT {column_list} FROM {scratch}"
            f"{conflict}{returned_columns}"
        )
        returned = cursor.fetchall() if returning else []
    return {tuple(row[1:]): row[0] for row in returned}


def copy_rows(table: str, columns: Sequence[str], rows: Iterable[tuple]) -> None:
    """COPY rows into a PostgreSQL table on Django's connection (inside its transaction).

    Binary COPY, with the column types read from the table: in text format this process spent
    0.26 s of CPU formatting 50,000 usage rows, in binary 0.03 s, and the server parses binary
    a little faster too (bench/ingest_pure.py). Values must have their column's Python type
    (``str`` for a text column: binary COPY does not call ``str()``).
    """
    from psycopg import sql

    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(quote(name) for name in columns)} FROM {quote(table)} LIMIT 0"
        )
        types = [description.type_code for description in cursor.description]
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            sql.Identifier(table),
            sql.SQL(", ").join(sql.Identifier(name) for name in columns),
        )
        with cursor.cursor.copy(statement) as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)


# --- Writing field values: compare, then bulk_create ---------------------------------------------

# (model, field name) -> max_length / decimal_places, looked up once per process.
_MAX_LENGTHS: dict[tuple[type[Model], str], int | None] = {}
_QUANTA: dict[tuple[type[Model], str], Decimal | None] = {}


def fit(model: type[Model], values: dict[str, Any]) -> dict[str, Any]:
    """Cut strings to their column's max_length: one odd upstream value must not fail the batch."""
    for name, value in values.items():
        if isinstance(value, str):
            try:
                limit = _MAX_LENGTHS[(model, name)]
            except KeyError:
                limit = getattr(model._meta.get_field(name), "max_length", None)
                _MAX_LENGTHS[(model, name)] = limit
            if limit and len(value) > limit:
                values[name] = value[:limit]
    return values


def _comparable(model: type[Model], name: str, value: Any) -> Any:
    # A decimal is stored with its column's decimal places; compare it the way it comes back.
    if not isinstance(value, Decimal):
        return value
    try:
        quantum = _QUANTA[(model, name)]
    except KeyError:
        model_field = model._meta.get_field(name)
        quantum = None
        if isinstance(model_field, DecimalField) and model_field.decimal_places is not None:
            quantum = Decimal(1).scaleb(-model_field.decimal_places)
        _QUANTA[(model, name)] = quantum
    return value.quantize(quantum) if quantum is not None else value


def unchanged(model: type[Model], stored: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    """Whether a stored row (``.values()``) already holds ``values``."""
    return all(
        _comparable(model, name, stored[name]) == _comparable(model, name, value)
        for name, value in values.items()
    )


@dataclass
class Upserted:
    """What :func:`upsert` did."""

    created: int = 0
    updated: int = 0
    # Ids of the rows marked deleted (missing from ``seen``).
    deleted: list[int] = field(default_factory=list)
    # key -> id; which keys, see ``upsert``.
    ids: dict[tuple, int] = field(default_factory=dict)


def upsert(
    model: type[Model],
    scope: Q,
    key_fields: tuple[str, ...],
    rows: Mapping[tuple, Mapping[str, Any]],
    *,
    parent: Mapping[str, Any],
    batch_size: int,
    lookup_batch_size: int,
    seen: set[tuple] | None = None,
    deleted_at: datetime | None = None,
    keep_existing: bool = False,
    soft_delete: bool = True,
    want_ids: bool = True,
    selective: bool = False,
    stamp: Mapping[str, Any] | None = None,
) -> Upserted:
    """Upsert ``rows`` (key -> field values) of ``model`` within ``scope``, writing only changes.

    ``parent``: the fields every row of the scope shares (e.g. ``{"cluster": cluster}``); with
    ``key_fields`` they are the unique constraint upserted on. Stored rows are compared field by
    field (:func:`unchanged`), so a re-run writes nothing. ``seen``: the keys listed upstream;
    rows in scope outside it and ``rows`` get ``deleted_at`` (pass it for a complete list only).
    ``keep_existing``: create missing rows, never touch existing ones. ``soft_delete``: the model
    has ``deleted_at``, cleared by the row's values. ``selective``: unless ``seen`` is given, read
    only the keys of ``rows`` and return ids for those (else ids of every row in scope).
    ``stamp``: values set on every row written, never compared. ``batch_size``: rows per INSERT;
    ``lookup_batch_size``: see :func:`read_keys`.
    """
    manager = model._default_manager
    update_fields = sorted({name for values in rows.values() for name in values})
    read_fields = {*update_fields, "deleted_at"} if soft_delete else set(update_fields)
    full = ("id", *key_fields, *sorted(read_fields))
    if selective and seen is None:
        current = read_keys(manager.filter(scope), key_fields, rows, full, lookup_batch_size)
    else:
        current = {
            tuple(row[k] for k in key_fields): row for row in manager.filter(scope).values(*full)
        }
    to_write = []
    created_keys = []
    result = Upserted()
    for key, values in rows.items():
        existing = current.get(key)
        if existing is None:
            created_keys.append(key)
        elif keep_existing or unchanged(model, existing, values):
            continue
        else:
            result.updated += 1
        fields = dict(zip(key_fields, key, strict=True))
        to_write.append(model(**parent, **fit(model, {**fields, **values, **(stamp or {})})))
    result.created = len(created_keys)
    if to_write:
        manager.bulk_create(
            to_write,
            batch_size=batch_size,
            update_conflicts=True,
            unique_fields=[*parent, *key_fields],
            update_fields=[*update_fields, *sorted(stamp or ()), "updated_at"],
        )
    if seen is not None:
        result.deleted = [
            row["id"]
            for key, row in current.items()
            if key not in seen and key not in rows and row["deleted_at"] is None
        ]
        update_in(manager.all(), "pk", result.deleted, lookup_batch_size, deleted_at=deleted_at)
    if not want_ids:
        return result
    result.ids = {key: row["id"] for key, row in current.items()}
    if not result.created:
        return result
    if not selective:
        result.ids = {
            tuple(row[:-1]): row[-1] for row in manager.filter(scope).values_list(*key_fields, "id")
        }
        return result
    # PostgreSQL and SQLite return the ids of upserted rows; read them back otherwise.
    written = {tuple(getattr(obj, k) for k in key_fields): obj.pk for obj in to_write}
    missing = [key for key in created_keys if written.get(key) is None]
    result.ids.update({key: written[key] for key in created_keys if written.get(key) is not None})
    result.ids.update(
        {
            key: row["id"]
            for key, row in read_keys(
                manager.filter(scope), key_fields, missing, ("id",), lookup_batch_size
            ).items()
        }
    )
    return result
