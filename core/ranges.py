"""Time ranges: which rollup hours a range covers, and the picker every time-based page shares.

``covered_hours`` is the one rule for the hours a range counts (README "What the numbers mean"):
a range ``(start, end]`` covers every hour that **ends** inside it and **has ended**. So the hour
in progress (being collected, its rollup partial) never counts; a range that starts mid-hour
counts the hour it starts in and not the one it ends in; ranges that follow each other share
no hour and miss none. Pages, charts, the chargeback and OpenCost all go through it (the rollup
read layer applies it in ``HourlyRollupQuerySet.covering``).

The picker: ``range=24h|7d|30d`` or ``start``/``end``. ``start`` and ``end`` are ISO dates
(``2025-01-31``) or datetimes (``2025-01-31T12:00``, ``2025-01-31T12:00:00+02:00``). Naive values
are UTC. A date-only ``end`` includes that whole day. Anything else raises ``RangeError``, which
the page and chart decorators turn into a 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.conf import settings
from django.http import QueryDict
from django.utils import timezone

from core.params import InvalidParameter, check_moment, check_text
from core.timewindows import floor_time

PRESETS: dict[str, tuple[timedelta, str]] = {
    "24h": (timedelta(hours=24), "Last 24 hours"),
    "7d": (timedelta(days=7), "Last 7 days"),
    "30d": (timedelta(days=30), "Last 30 days"),
}
DEFAULT_PRESET = "24h"
CUSTOM = "custom"
# Query parameters the picker owns; links it builds keep every other parameter.
RANGE_PARAMS = ("range", "start", "end")
# Changing the range sends the user back to the first page of any paginated list.
RESET_ON_CHANGE = ("page",)


HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class HourSpan:
    """The rollup hours a range covers: the hours starting in ``[first, stop)``."""

    first: datetime
    stop: datetime

    @property
    def count(self) -> int:
        return int((self.stop - self.first) / HOUR)

    def starts(self) -> list[datetime]:
        """The starts of the covered hours, oldest first (the x axis of hourly charts)."""
        return [self.first + index * HOUR for index in range(self.count)]


def covered_hours(start: datetime, end: datetime, now: datetime | None = None) -> HourSpan:
    """The hours the range ``(start, end]`` covers: those that end inside it by ``now``.

    An hour (a rollup row's ``hour`` is its start) counts when ``start < hour + 1h <= end`` and
    ``hour + 1h <= now``: whole hours only, each in exactly one of two ranges that follow each
    other, and never the hour still being collected. For whole-hour bounds in the past this is
    ``[start, end)``.
    """
    moment = timezone.now() if now is None else now
    first = floor_time(start, 3600)
    stop = floor_time(min(end, moment), 3600)
    return HourSpan(first, max(first, stop))


class RangeError(ValueError):
    """A time-range parameter that cannot be honoured; the message is shown to the user."""


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime
    preset: str  # one of PRESETS, or CUSTOM

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0

    @property
    def label(self) -> str:
        if self.preset in PRESETS:
            return PRESETS[self.preset][1]
        return f"{self.start:%Y-%m-%d %H:%M} – {self.end:%Y-%m-%d %H:%M} UTC"

    @property
    def hour_start(self) -> datetime:
        """The first whole hour that overlaps the range (rollups are keyed on hour starts)."""
        return floor_time(self.start, 3600)

    def covered_hours(self, now: datetime | None = None) -> HourSpan:
        """The hours the range counts (``covered_hours``)."""
        return covered_hours(self.start, self.end, now)

    def counted_windows(self, now: datetime | None = None) -> tuple[datetime, datetime]:
        """``(after, until]``: the window ends of the hours the range counts, so a figure summed
        from usage rows counts the hours the rollups count (the hour in progress left out)."""
        span = self.covered_hours(now)
        return span.first, max(span.first, span.stop)

    def complete_hours(self) -> list[datetime]:
        """Starts of the hours the range counts, oldest first (the x axis of rollup charts)."""
        return self.covered_hours().starts()

    def query(self) -> dict[str, str]:
        """The query parameters that reproduce this range."""
        if self.preset in PRESETS:
            return {"range": self.preset}
        return {
            "start": self.start.strftime("%Y-%m-%dT%H:%M"),
            "end": self.end.strftime("%Y-%m-%dT%H:%M"),
        }


def _parse_moment(raw: str, name: str, *, is_end: bool) -> datetime:
    raw = raw.strip()
    try:
        check_text(name, raw, max_length=64)
        if len(raw) == 10:
            day = date.fromisoformat(raw)
            moment = datetime.combine(day, time.min, tzinfo=UTC)
        else:
            moment = datetime.fromisoformat(raw)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
        moment = check_moment(name, moment)
    except InvalidParameter as exc:
        raise RangeError(f"{name}={raw[:64]!r} {exc.reason}") from None
    except ValueError as exc:
        raise RangeError(
            f"{name}={raw[:64]!r} is not an ISO date or datetime "
            "(e.g. 2025-01-31 or 2025-01-31T12:00)"
        ) from exc
    # A date-only end includes that whole day (check_moment left room for it).
    return moment + timedelta(days=1) if is_end and len(raw) == 10 else moment


def parse_range(params: QueryDict | dict[str, str], now: datetime | None = None) -> TimeRange:
    """The range the query parameters ask for; 24 hours when they ask for none."""
    now = floor_time(now or timezone.now(), 60)
    preset = (params.get("range") or "").strip()[:64]
    raw_start = (params.get("start") or "").strip()
    raw_end = (params.get("end") or "").strip()

    if preset in PRESETS:
        return TimeRange(now - PRESETS[preset][0], now, preset)
    if preset not in ("", CUSTOM):
        choices = ", ".join([*PRESETS, CUSTOM])
        raise RangeError(f"range={preset!r} is not one of {choices}")
    if not raw_start and not raw_end:
        if preset == CUSTOM:
            raise RangeError("a custom range needs a start date")
        return TimeRange(now - PRESETS[DEFAULT_PRESET][0], now, DEFAULT_PRESET)
    if not raw_start:
        raise RangeError("a custom range needs a start date")

    start = _parse_moment(raw_start, "start", is_end=False)
    end = _parse_moment(raw_end, "end", is_end=True) if raw_end else now
    end = min(end, now)
    if start >= end:
        raise RangeError("start must be before end (and before now)")
    longest = timedelta(days=settings.GPULEDGER_ROLLUP_RETENTION_DAYS)
    if end - start > longest:
        raise RangeError(
            f"a range can span at most {longest.days} days (the rollup retention)",
        )
    return TimeRange(start, end, CUSTOM)


def form_hidden(
    params: QueryDict, current: TimeRange, owned: tuple[str, ...]
) -> list[tuple[str, str]]:
    """Hidden inputs of a page's own GET form (filters, grouping): the shown range, and every
    other parameter except the form's ``owned`` fields and the page number, so submitting the
    form keeps the range the page shows."""
    dropped = {*RANGE_PARAMS, *RESET_ON_CHANGE, *owned}
    kept = [(key, value) for key, value in current.query().items()]
    return kept + [
        (key, value) for key, values in params.lists() if key not in dropped for value in values
    ]


def picker_links(params: QueryDict, current: TimeRange) -> list[dict[str, object]]:
    """One link per preset, keeping every other query parameter (filters, grouping)."""
    links = []
    for key, (_, label) in PRESETS.items():
        query = params.copy()
        for name in (*RANGE_PARAMS, *RESET_ON_CHANGE):
            query.pop(name, None)
        query["range"] = key
        links.append(
            {
                "key": key,
                "label": key,
                "title": label,
                "query": query.urlencode(),
                "active": current.preset == key,
            }
        )
    return links


def hidden_params(params: QueryDict) -> list[tuple[str, str]]:
    """The parameters the custom-range form must carry along as hidden inputs."""
    dropped = {*RANGE_PARAMS, *RESET_ON_CHANGE}
    return [
        (key, value) for key, values in params.lists() if key not in dropped for value in values
    ]
