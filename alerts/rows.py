"""The row and value types the alert reader fills and the rules read: one module both import,
so reading (``alerts.reading``) and the rules (``alerts.rules``) do not import each other.

``StoredWindow`` is one stored collection window as the rules see it (``core.timewindows`` has
the window to collect), ``UsageFact`` one allocated usage row of it (the ingest modules' rows are
rows to store), ``WindowSeries`` one candidate row's activity across the windows of a ``Chunk``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

# Shares below this are float noise.
EPSILON = 1e-9


class UsageFact(NamedTuple):
    """An allocated GpuUsage row as the rules read it (``alerts.reading``)."""

    gpu_key: str
    node_name: str
    namespace: str
    pod: str
    workload_id: int | None
    local_queue_id: int | None
    cluster_queue_id: int | None
    team_id: int | None
    gpus: float
    activity: float | None
    activity_source: str
    flavor: str
    gpu_model: str
    node_series: bool  # the node's exporter answered in the window (maybe with NaN)


class QueueSample(NamedTuple):
    cluster_queue_id: int
    flavor: str
    borrowed: float
    lent: float


@dataclass
class Hold:
    """A workload's last quota hold and the gang it holds for."""

    gpus: float
    pods_expected: int  # pods of the gang that request GPUs
    start: datetime | None
    end: datetime | None
    ended: bool = False

    def through(self, start: datetime, end: datetime) -> bool:
        """Held quota during the whole window (start, end]."""
        if self.start is None or self.start > start:
            return False
        return self.end is None or self.end >= end

    def overlaps(self, start: datetime, end: datetime) -> bool:
        """Held quota at some time in (start, end]: a window in it may be held through."""
        return (
            self.start is not None and self.start < end and (self.end is None or self.end > start)
        )


@dataclass
class StoredWindow:
    """One stored window and what the rules read of it."""

    start: datetime
    end: datetime
    rows: list[UsageFact] = field(default_factory=list)
    # Holders short of pods: workload id -> (pods running, GPUs running).
    short: dict[int, tuple[int, float]] = field(default_factory=dict)
    samples: list[QueueSample] = field(default_factory=list)
    # Its length, and the hour of its start (the rate card's hour), worked out once.
    seconds: int = field(init=False)
    hours: float = field(init=False)
    hour: datetime = field(init=False)

    def __post_init__(self) -> None:
        self.seconds = int((self.end - self.start).total_seconds())
        self.hours = self.seconds / 3600
        self.hour = self.start.replace(minute=0, second=0, microsecond=0)


@dataclass
class WindowSeries:
    """One candidate row's identity over a chunk: its columns but the activity (``UsageFact``
    with ``activity=None`` and ``node_series=False``), and per window it was stored in, oldest
    first, the window's end and the activity (None: no telemetry)."""

    row: UsageFact
    ends: list[datetime]
    activities: list[float | None]


@dataclass
class Chunk:
    """Consecutive stored windows, oldest first, read together.

    ``series`` are the candidate rows (module docstring) per row identity; ``answered`` the
    (window end, node) pairs whose exporter answered, for rows without telemetry. The rules
    cut each workload's series into runs of windows where its rows did not change
    (``RuleSet.split``) and put the rest into their windows' ``rows``."""

    windows: list[StoredWindow]
    series: list[WindowSeries] = field(default_factory=list)
    answered: set[tuple[datetime, str]] = field(default_factory=set)

    def workload_ids(self) -> set[int]:
        ids = {s.row.workload_id for s in self.series if s.row.workload_id is not None}
        for window in self.windows:
            ids.update(window.short)
        return ids
