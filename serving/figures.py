"""How much of its knee a serving deployment used, hour by hour (pure, no I/O).

"Over-provisioned" (README "Serving: metrics"): the deployment ran below half its knee for most
of the range. An hour is *below the knee* when its throughput per replica, in the knee's own
unit (output tokens per second, else requests per second), is under ``fraction`` x the knee's
per-replica throughput. An hour whose figure is missing (no serving telemetry, or no replica
time) is not judged: it counts neither way, and a range with no judged hour has no share.
"""

from __future__ import annotations

from collections.abc import Iterable

from serving.knee import HourFigures, Knee

# "below half its knee ... for most of the range"
KNEE_FRACTION = 0.5
MOST_OF_THE_RANGE = 0.5


def per_replica(figures: HourFigures, unit: str) -> float | None:
    """The hour's throughput per replica in ``unit`` (a ``serving.knee`` unit), None unknown."""
    throughput = getattr(figures, unit)
    if throughput is None or figures.replica_hours <= 0:
        return None
    return float(throughput) / figures.replica_hours


def below_knee(figures: HourFigures, knee: Knee, fraction: float = KNEE_FRACTION) -> bool | None:
    """Whether the hour delivered under ``fraction`` of the knee per replica; None unjudged."""
    delivered = per_replica(figures, knee.unit)
    if delivered is None:
        return None
    return delivered < fraction * knee.per_replica


def below_knee_share(
    hours: Iterable[HourFigures], knee: Knee, fraction: float = KNEE_FRACTION
) -> tuple[float | None, int]:
    """(share of the judged hours below the knee, judged hours); (None, 0) with none judged."""
    judged = [verdict for h in hours if (verdict := below_knee(h, knee, fraction)) is not None]
    if not judged:
        return None, 0
    return sum(judged) / len(judged), len(judged)


def is_overprovisioned(
    hours: Iterable[HourFigures],
    knee: Knee | None,
    fraction: float = KNEE_FRACTION,
    most: float = MOST_OF_THE_RANGE,
) -> bool:
    """Below ``fraction`` of its knee in more than ``most`` of the judged hours. Without a knee
    (no hour within target) nothing can be said, and the answer is False."""
    if knee is None or knee.per_replica <= 0:
        return False
    share, _ = below_knee_share(hours, knee, fraction)
    return share is not None and share > most
