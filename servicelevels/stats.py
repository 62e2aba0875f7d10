"""The statistics of the service-level figures, defined once.

Percentiles are nearest rank: the value at rank ceil(q * n) (1-based) of the sorted values, so
every percentile is a wait that really happened. No interpolation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def nearest_rank(sorted_values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of already sorted values; None if empty."""
    if not 0.0 < q <= 1.0:
        raise ValueError(f"quantile {q!r} is outside (0, 1]")
    n = len(sorted_values)
    if n == 0:
        return None
    rank = max(math.ceil(q * n), 1)
    return float(sorted_values[rank - 1])
