"""Vector items -> (labels, value): malformed items counted and skipped, NaN/±Inf kept as "no
telemetry", and the order that picks one of two duplicate series whatever the answer's order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from fleet.ingest.rows import IngestStats


def parse_sample(item: Any, stats: IngestStats) -> tuple[dict, float | None] | None:
    """(labels, value) of a vector item, or None after counting why it was skipped.

    A NaN or ±Inf value is counted and returned as None: the series (a GPU, a pod) is real, it
    just has no telemetry in the window.
    """
    if not isinstance(item, dict):
        stats.skip("malformed_item")
        return None
    metric = item.get("metric")
    if not isinstance(metric, dict):
        stats.skip("missing_metric")
        return None
    value = item.get("value")
    if not isinstance(value, list | tuple) or len(value) != 2:
        stats.skip("malformed_value")
        return None
    raw = value[1]
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        stats.skip("malformed_value")
        return None
    try:
        number = float(raw)
    except ValueError:
        stats.skip("unparsable_value")
        return None
    if not math.isfinite(number):
        stats.nonfinite_skipped += 1
        return metric, None
    return metric, number


def label_sort_key(metric: dict) -> tuple:
    return tuple(sorted((str(k), str(v)) for k, v in metric.items()))


def parse_samples(items: list, stats: IngestStats) -> Iterator[tuple[dict, float | None]]:
    """(labels, value) of each usable vector item; see :func:`parse_sample` for the rules.

    Items of the usual shape (``{"metric": {...}, "value": [ts, "1.5"]}``) take a short path;
    anything else goes through :func:`parse_sample`'s checks, which count why it was skipped.
    """
    isfinite = math.isfinite
    for item in items:
        if (
            type(item) is dict
            and type(metric := item.get("metric")) is dict
            and type(pair := item.get("value")) is list
            and len(pair) == 2
            and type(raw := pair[1]) is str
        ):
            try:
                number = float(raw)
            except ValueError:
                stats.skip("unparsable_value")
                continue
            if isfinite(number):
                yield metric, number
            else:
                stats.nonfinite_skipped += 1
                yield metric, None
            continue
        sample = parse_sample(item, stats)
        if sample is not None:
            yield sample
