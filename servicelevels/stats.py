"""The statistics of the service-level figures, defined once.

Percentiles are nearest rank: the value at rank ceil(q * n) (1-based) of the sorted values, so
every percentile is a value that really happened. No interpolation. ``ranks`` gives that rank for
many counts at once (``servicelevels.figures`` takes every (group, period) cell's percentiles
with it); ``nearest_rank`` applies it to one sorted list.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def ranks(counts: np.ndarray, q: float) -> np.ndarray:
    """The 1-based nearest rank ceil(q * n) for each count n (at least 1)."""
    if not 0.0 < q <= 1.0:
        raise ValueError(f"quantile {q!r} is outside (0, 1]")
    return np.maximum(np.ceil(q * counts).astype(np.int64), 1)


def nearest_rank(sorted_values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of already sorted values; None if empty."""
    rank = int(ranks(np.array([len(sorted_values)]), q)[0])
    if len(sorted_values) == 0:
        return None
    return float(sorted_values[rank - 1])
