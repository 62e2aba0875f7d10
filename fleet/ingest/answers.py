"""Prometheus answers: the /api/v1/query and /query_range envelope checked, matrices split into
one vector per timestamp. Only an unusable top-level payload raises ``IngestError``.
"""

from __future__ import annotations

import gc
import json
import logging
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fleet.ingest.rows import IngestStats

logger = logging.getLogger(__name__)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small, acyclic objects.

    A 50,000-GPU window makes millions of dicts and lists; the collector would rescan the
    growing heap over and over (bench/ingest_pure.py: parsing took twice as long with it on).
    Reference counting still frees everything; nothing built here is cyclic.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class IngestError(ValueError):
    """The top-level payload is unusable (status error, wrong resultType, not JSON)."""


def parse_query_response(payload: dict | str | bytes, expect: str | None = None) -> list[dict]:
    """Validate a Prometheus /api/v1/query or /query_range answer; return data.result items.

    ``expect='vector'|'matrix'`` checks resultType. Raises IngestError for unusable payloads.
    The items themselves are validated later, one by one, so one bad item never loses the rest.
    """
    if isinstance(payload, bytes | str):
        try:
            with gc_paused():
                payload = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            raise IngestError(f"answer is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise IngestError(f"answer is a {type(payload).__name__}, not an object")
    status = payload.get("status")
    if status != "success":
        raise IngestError(
            f"status {status!r}: {payload.get('errorType', '')} {payload.get('error', '')}".strip()
        )
    data = payload.get("data")
    if not isinstance(data, dict):
        raise IngestError("answer has no data object")
    result_type = data.get("resultType")
    if expect is not None and result_type != expect:
        raise IngestError(f"resultType {result_type!r}, expected {expect!r}")
    if result_type not in {"vector", "matrix", "scalar", "string"}:
        raise IngestError(f"unknown resultType {result_type!r}")
    result = data.get("result")
    if result_type in {"scalar", "string"}:
        raise IngestError(f"resultType {result_type!r} carries no series")
    if not isinstance(result, list):
        raise IngestError("data.result is not a list")
    warnings = payload.get("warnings")
    if warnings:
        logger.warning("Prometheus answered with warnings: %s", warnings)
    return result


def split_matrix(
    items: list[dict],
    stats: IngestStats | None = None,
) -> dict[float, list[dict]]:
    """Turn matrix items ({'metric', 'values': [[ts, 'v'], ...]}) into vector items per timestamp.

    Timestamps come back as floats in ascending order. Malformed items and points are skipped
    (counted in ``stats`` when given); their values are validated by :func:`build_window`.
    """
    by_ts: dict[float, list[dict]] = defaultdict(list)
    for metric, ts, value in matrix_points(items, stats):
        by_ts[ts].append({"metric": metric, "value": [ts, value]})
    return {ts: by_ts[ts] for ts in sorted(by_ts)}


def matrix_items(
    items: list[dict], stats: IngestStats | None = None
) -> Iterator[tuple[dict, list]]:
    """(labels, points) of each matrix item with a ``metric`` object and a ``values`` list; any
    other item is skipped as ``malformed_matrix_item`` (counted in ``stats`` when given)."""
    for item in items:
        if (
            not isinstance(item, dict)
            or not isinstance(metric := item.get("metric"), dict)
            or not isinstance(values := item.get("values"), list)
        ):
            _skip(stats, "malformed_matrix_item")
            continue
        yield metric, values


def matrix_points(
    items: list[dict], stats: IngestStats | None = None
) -> Iterator[tuple[dict, float, Any]]:
    """(labels, timestamp, raw value) of every point of matrix items, item after item; malformed
    items and points are skipped (counted in ``stats`` when given), values are not looked at."""
    for metric, values in matrix_items(items, stats):
        for point in values:
            if not isinstance(point, list | tuple) or len(point) != 2:
                _skip(stats, "malformed_matrix_point")
                continue
            ts = point[0]
            if isinstance(ts, bool) or not isinstance(ts, int | float | str):
                _skip(stats, "malformed_matrix_point")
                continue
            try:
                ts_float = float(ts)
            except ValueError:
                _skip(stats, "malformed_matrix_point")
                continue
            yield metric, ts_float, point[1]


def _skip(stats: IngestStats | None, reason: str) -> None:
    if stats is not None:
        stats.skip(reason)
