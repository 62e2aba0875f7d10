"""Aligned collection windows (docs/architecture.md "Time model and storage").

A window is the half-open interval ``(end - seconds, end]``: a sample describes the window that ends
at its timestamp. Windows are aligned to multiples of ``seconds`` since the Unix epoch, so every
worker computes the same windows.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True, order=True)
class Window:
    start: datetime
    end: datetime

    @property
    def seconds(self) -> int:
        return int((self.end - self.start).total_seconds())

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0


def ensure_aware(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment.isoformat()} (give a UTC offset)")
    return moment.astimezone(UTC)


def floor_time(moment: datetime, seconds: int) -> datetime:
    """The last aligned boundary at or before ``moment``."""
    moment = ensure_aware(moment)
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=UTC)


def last_complete_window(now: datetime, seconds: int) -> Window:
    end = floor_time(now, seconds)
    return Window(end - timedelta(seconds=seconds), end)


def windows_between(start: datetime, end: datetime, seconds: int) -> Iterator[Window]:
    """Aligned windows whose end lies in ``(start, end]``, oldest first."""
    cursor = floor_time(start, seconds)
    stop = floor_time(end, seconds)
    step = timedelta(seconds=seconds)
    while cursor < stop:
        yield Window(cursor, cursor + step)
        cursor += step


def hour_floor(moment: datetime) -> datetime:
    return floor_time(moment, 3600)
