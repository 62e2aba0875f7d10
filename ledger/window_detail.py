"""Which part of a time range has per-window usage rows (docs/architecture.md "Read layer").

Per-window rows (``GpuUsage``) are kept ``GPULEDGER_USAGE_RETENTION_DAYS``. An hour older than
that has only its hourly rollups: retention dropped its rows, or the deep backfill wrote it
straight into rollups; both flag it ``RollupHour.usage_pruned``. Hours before a cluster's first
stored window have no per-window rows either (never collected per window, or rows lost before
that flag existed). ``window_detail`` is the one answer to "from when on does this range have
per-window rows": the pages and charts that draw per-window rows read them only after
``WindowDetail.since``, draw the hourly rollups before it, and say so (``WindowDetail.note``);
alert evaluation never evaluates a window at or before it.

Pruned hours are always the oldest ones (retention and the deep backfill both work from the
past up to the retention), so one boundary per cluster describes a range: the end of the newest
flagged hour, or the start of the hour of the first stored window, whichever is later. The hour
a SQLite prune cut into keeps some rows but is flagged: it counts as hourly, whole, so no hour
is drawn from both sources or from part of its windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Max

from core.ranges import HOUR, HourSpan, covered_hours
from core.timewindows import hour_floor
from ledger.models import RollupHour, UsageWindow


@dataclass(frozen=True)
class WindowDetail:
    """The range ``(start, end]`` and ``since``: per-window rows exist for the windows ending
    after ``since`` (``start <= since <= end``); before it only hourly rollups can say anything.
    ``pruned``: some hour of the range lost its per-window rows to retention or was deep
    backfilled (rather than never collected)."""

    start: datetime
    end: datetime
    since: datetime
    pruned: bool

    @property
    def whole(self) -> bool:
        """Every window of the range has its per-window rows (nothing to fall back for)."""
        return self.since <= self.start

    @property
    def window_start(self) -> datetime:
        """Read per-window rows with ``window_end > window_start`` (and ``<= end``)."""
        return max(self.start, self.since)

    def hourly_span(self, now: datetime | None = None) -> HourSpan:
        """The rollup hours of the range before ``since`` (an empty span when it is whole)."""
        span = covered_hours(self.start, self.end, now)
        if self.whole:
            return HourSpan(span.first, span.first)
        return HourSpan(span.first, max(span.first, min(span.stop, hour_floor(self.since))))

    def note(self, shown: str = "hourly figures", missing: str = "") -> str:
        """What a page says about the part of the range before ``since``: what it shows there
        (``shown``), and what it cannot show (``missing``); "" when the range is whole.

        "Before 2025-01-31 14:00 UTC: hourly figures; per-minute detail is kept 14 days."
        """
        if self.whole:
            return ""
        text = f"Before {self.since:%Y-%m-%d %H:%M} UTC: {shown}"
        if missing:
            text += f" ({missing})"
        days = settings.GPULEDGER_USAGE_RETENTION_DAYS
        return f"{text}; per-minute detail is kept {days} day{'s' if days != 1 else ''}."


def window_detail(cluster_id: int, start: datetime, end: datetime) -> WindowDetail:
    """Which part of ``(start, end]`` has one cluster's per-window rows: two index lookups (the
    newest flagged hour before ``end``, the cluster's first stored window)."""
    newest_pruned = RollupHour.objects.filter(
        cluster_id=cluster_id, usage_pruned=True, hour__lt=end
    ).aggregate(hour=Max("hour"))["hour"]
    # The oldest window by its end: the (cluster, window end) index gives it at once.
    first = (
        UsageWindow.objects.filter(cluster_id=cluster_id)
        .order_by("window_end")
        .values_list("window_start", flat=True)
        .first()
    )
    since = start
    pruned = False
    if newest_pruned is not None and newest_pruned + HOUR > start:
        since = newest_pruned + HOUR
        pruned = True
    if first is None:
        since = end  # no per-window row at all
    elif hour_floor(first) > since:
        since = hour_floor(first)
    return WindowDetail(start=start, end=end, since=min(max(since, start), end), pruned=pruned)
