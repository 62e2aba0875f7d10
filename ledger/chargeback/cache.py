"""Built chargeback reports kept in the shared cache, keyed by their parameters and data version.

Why a cache, and not a cheaper query: the page shows 50 rows of a report, but its totals are the
sum of every row's money rounded to cents (README "Chargeback API"), so exact totals need every
row's priced sum: the whole report's aggregate (0.5-0.9 s of SQL for a month of 1,000
ClusterQueues by day, 720,000 rollup rows) and its pricing (bench/RESULTS.md, 2026-12-01). No
index or SQL rewrite brings that under the page's 300 ms; precomputed daily rollups would be a
second summing of rollups. So the report is built once by ``build_report`` (the one definition
of every figure) and kept; paging through it, coming back to it, and the API and CSV for the
same window then read the same built report (25-40 ms a page). The first request after the
data changed pays the whole build plus the version and the storing (1.6-2.4 s at that size,
about 0.15 s more than the build alone; bench/RESULTS.md).

A stored report is found only under the key of exactly what it was built from, read afresh on
every request (``data_version``):

- the parameters: window, grouping, step, cluster, the chargeback model and currency;
- the rollups of the window: the ``RollupHour`` rows of its hours. ``ledger.rollup.roll_up_hour``
  is the only writer of rollup rows and records every rollup in the hour's ``RollupHour`` row
  (``updated_at``, ``rolled_up_at``, ``rolled_changes``) in the same transaction; a prune
  deletes both. A re-roll of any hour of the window therefore changes the key;
- the rate cards in the currency (every field that prices);
- the groups that existed in the window (``known_groups``: they get zero rows; a creation
  before the window or an end after it counts as open, as it gives the same rows) and the
  cluster names: a new, renamed or deleted queue, workload or cluster changes the key.

The version is read before the report is built, so a report built while a rollup commits is
stored under the older key, which no later request asks for. Reports of a user who sees only
some teams (a team lead) are not cached: their rows depend on the access rules' tables as well,
and they are small. ``GPULEDGER_CHARGEBACK_CACHE_SECONDS`` (0: off) bounds how long an entry
lives (entries of past versions are never read again; they only take room until then).

Storage: a head (the window, totals, pricing summary, row count) and the rows as plain tuples in
chunks of ``CHUNK_ROWS``. A page reads the head and the chunk its 50 rows are in (a few ms); the
API and CSV read every chunk. An entry missing any piece (evicted) is built again, and so is
every report while the cache fails (logged): the cache never changes an answer, only its cost.
Two requests that miss at once both build (no lock): rare, and each answer is still exact.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields
from datetime import datetime
from decimal import Decimal
from operator import attrgetter
from typing import Any, overload

from django.conf import settings
from django.core.cache import cache
from django.core.paginator import Page, Paginator

from fleet.models import Cluster
from ledger.chargeback.base import Charge, chargeback_model
from ledger.chargeback.report import (
    Report,
    ReportInputs,
    Row,
    build_report,
    check_request,
    read_inputs,
)
from ledger.models import RollupHour

logger = logging.getLogger("ledger.chargeback")

# Bump when the stored layout or what a report contains changes: old entries are then never read.
CACHE_FORMAT = 3
# Rows per stored chunk: a page of 50 unpickles one chunk (~1 ms); a 31,000-row report is 31.
CHUNK_ROWS = 1000
CHARGE_FIELDS = tuple(field.name for field in fields(Charge))


class _Evicted(Exception):
    """A piece of a stored report is gone: build it again."""


def cache_seconds() -> int:
    return int(settings.GPULEDGER_CHARGEBACK_CACHE_SECONDS)


def _feed(digest: Any, values: Iterable[Any]) -> None:
    for value in values:
        digest.update(repr(value).encode())
        digest.update(b"\x1f")
    digest.update(b"\x1e")


def data_version(
    *,
    start: datetime,
    end: datetime,
    group_by: str,
    step: str,
    cluster: Cluster | None,
    inputs: ReportInputs,
) -> str:
    """The key of the report of these parameters as the data stands now (module docstring):
    ``inputs`` (``read_inputs``) and the ``RollupHour`` records of the window's hours."""
    digest = hashlib.sha256()
    cluster_id = cluster.pk if cluster is not None else None
    model, currency = chargeback_model(), settings.GPULEDGER_CURRENCY
    _feed(digest, (CACHE_FORMAT, start, end, group_by, step, cluster_id, model, currency))
    hours = RollupHour.objects.filter(hour__gte=start, hour__lt=end)
    if cluster is not None:
        hours = hours.filter(cluster=cluster)
    _feed(
        digest,
        hours.order_by("cluster_id", "hour").values_list(
            "cluster_id",
            "hour",
            "changes",
            "rolled_changes",
            "rolled_up_at",
            "usage_pruned",
            "updated_at",
        ),
    )
    _feed(
        digest,
        sorted(
            (card.pk, card.kind, card.flavor, card.gpu_model, card.price_per_gpu_hour,
             card.currency, card.effective_from)
            for card in inputs.cards
        ),
    )  # fmt: skip
    # A group's life only matters inside the window (KnownGroup.existed of its periods): one
    # created before it or ending after it (a workload finishing now) is the same report.
    _feed(
        digest,
        sorted(
            (
                group.cluster_id or 0,
                group.key,
                None if group.since is None or group.since <= start else group.since,
                None if group.until is None or group.until >= end else group.until,
            )
            for group in inputs.known
        ),
    )
    _feed(digest, sorted(inputs.cluster_names.items()))
    return digest.hexdigest()


def _keys(version: str, count: int) -> tuple[str, list[str]]:
    head = f"gpuledger:chargeback:{version}"
    chunks = (count + CHUNK_ROWS - 1) // CHUNK_ROWS
    return head, [f"{head}:rows:{index}" for index in range(chunks)]


# A row as stored: group, cluster, period start, the ``Charge`` figures, then its money as text.
# Pickling a Decimal costs a call to rebuild it, ten times a float: for 31,000 rows that was most
# of storing them; text is made exact again (Decimal of it) as rows are read. Rows of one period
# share one datetime object, which pickle then writes once per chunk.
MONEY_FIELDS = ("cost_allocated", "cost_borrowing", "cost_lending_credit")
PLAIN_FIELDS = tuple(name for name in CHARGE_FIELDS if name not in MONEY_FIELDS)
_plain = attrgetter(*PLAIN_FIELDS)
_money = attrgetter(*MONEY_FIELDS)


def _charge_tuple(charge: Charge) -> tuple[Any, ...]:
    return (*_plain(charge), *map(str, _money(charge)))


def _charge(values: Sequence[Any]) -> Charge:
    count = len(PLAIN_FIELDS)
    named: dict[str, Any] = dict(zip(PLAIN_FIELDS, values[:count], strict=True))
    named.update((name, Decimal(v)) for name, v in zip(MONEY_FIELDS, values[count:], strict=True))
    return Charge(**named)


def _row_tuples(rows: Iterable[Row]) -> list[tuple[Any, ...]]:
    periods: dict[datetime | None, datetime | None] = {}
    return [
        (
            row.group,
            row.cluster,
            periods.setdefault(row.period_start, row.period_start),
            *_plain(row.figures),
            *map(str, _money(row.figures)),
        )
        for row in rows
    ]


def _row(values: tuple[Any, ...]) -> Row:
    group, cluster, period_start, *figures = values
    return Row(group, cluster, period_start, _charge(figures))


def _store(version: str, report: Report) -> None:
    rows = _row_tuples(report.rows)
    head_key, chunk_keys = _keys(version, len(rows))
    chunks = {
        key: pickle.dumps(rows[i * CHUNK_ROWS : (i + 1) * CHUNK_ROWS], pickle.HIGHEST_PROTOCOL)
        for i, key in enumerate(chunk_keys)
    }
    head = {
        "start": report.start,
        "end": report.end,
        "group_by": report.group_by,
        "step": report.step,
        "currency": report.currency,
        "model": report.model,
        "totals": _charge_tuple(report.totals),
        "rate_cards": report.rate_cards,
        "unpriced_rows": report.unpriced_rows,
        "count": len(rows),
    }
    timeout = cache_seconds()
    # The rows before the head, so a head is found only once its rows were stored (rows
    # evicted since are noticed when read: the report is built again).
    try:
        cache.set_many(chunks, timeout)
        cache.set(head_key, head, timeout)
    except Exception:
        # A cache that is down costs the next request a build, never the answer.
        logger.warning("chargeback report %s not stored: the cache failed", version, exc_info=True)


class StoredRows(Sequence[Row]):
    """A stored report's rows, read a chunk at a time as they are asked for."""

    def __init__(self, version: str, count: int) -> None:
        self._size = count
        self._chunk_keys = _keys(version, count)[1]
        self._chunks: dict[int, list[tuple[Any, ...]]] = {}

    def __len__(self) -> int:
        return self._size

    def _load(self, indexes: Iterable[int]) -> None:
        wanted = {self._chunk_keys[i]: i for i in indexes if i not in self._chunks}
        if not wanted:
            return
        try:
            found = cache.get_many(list(wanted))
        except Exception as exc:
            logger.warning("chargeback report rows not read: the cache failed", exc_info=True)
            raise _Evicted from exc
        if len(found) != len(wanted):
            raise _Evicted
        for key, blob in found.items():
            self._chunks[wanted[key]] = pickle.loads(blob)

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        if isinstance(index, int):
            if index < 0:
                index += self._size
            if not 0 <= index < self._size:
                raise IndexError(index)
            return self[index : index + 1][0]
        start, stop, step = index.indices(self._size)
        if start >= stop:
            return []
        self._load(range(start // CHUNK_ROWS, (stop - 1) // CHUNK_ROWS + 1))
        return [
            _row(self._chunks[i // CHUNK_ROWS][i % CHUNK_ROWS]) for i in range(start, stop, step)
        ]

    def __iter__(self) -> Iterator[Row]:
        return iter(self[:])


def _stored(version: str) -> Report | None:
    try:
        head = cache.get(_keys(version, 0)[0])
    except Exception:
        logger.warning("chargeback report %s not read: the cache failed", version, exc_info=True)
        return None
    if head is None:
        return None
    return Report(
        start=head["start"],
        end=head["end"],
        group_by=head["group_by"],
        step=head["step"],
        currency=head["currency"],
        model=head["model"],
        rows=StoredRows(version, head["count"]),
        totals=_charge(head["totals"]),
        rate_cards=head["rate_cards"],
        unpriced_rows=head["unpriced_rows"],
    )


def _build(version: str | None, inputs: ReportInputs | None, params: dict[str, Any]) -> Report:
    report = build_report(**params, inputs=inputs)
    if version is not None:
        _store(version, report)
    return report


def _version(params: dict[str, Any]) -> tuple[str | None, ReportInputs | None]:
    """The cache key for these parameters and what it was computed from; (None, None) when this
    report is not cached."""
    team_ids = params.get("team_ids")
    if cache_seconds() <= 0 or team_ids is not None:
        return None, None
    # What build_report refuses, refused first, as it would: no version of a bad request.
    start, end, group_by = params["start"], params["end"], params["group_by"]
    step, cluster = params.get("step", "none"), params.get("cluster")
    check_request(group_by, step, start, end)
    inputs = read_inputs(group_by, start, end, cluster, team_ids)
    version = data_version(
        start=start, end=end, group_by=group_by, step=step, cluster=cluster, inputs=inputs
    )
    return version, inputs


def cached_report(**params: Any) -> Report:
    """``build_report(**params)`` with every row, from the cache when it holds this version."""
    version, inputs = _version(params)
    if version is not None:
        stored = _stored(version)
        if stored is not None:
            try:
                stored.rows = list(stored.rows)
            except _Evicted:
                logger.info("chargeback report %s: rows evicted, building it again", version)
            else:
                return stored
    return _build(version, inputs, params)


def cached_report_page(page_number: Any, page_size: int, **params: Any) -> tuple[Report, Page[Row]]:
    """``build_report(**params)`` and its page ``page_number`` (``Paginator.get_page``); from the
    cache, only the head and the rows of that page are read."""
    version, inputs = _version(params)
    if version is not None:
        stored = _stored(version)
        if stored is not None:
            try:
                page = Paginator(stored.rows, page_size).get_page(page_number)
                page.object_list = list(page.object_list)
            except _Evicted:
                logger.info("chargeback report %s: rows evicted, building it again", version)
            else:
                return stored, page
    built = _build(version, inputs, params)
    return built, Paginator(built.rows, page_size).get_page(page_number)
