"""The four hoarding rules over one stored window (DESIGN "Hoarding"); no I/O.

``detect`` turns what ``alerts.reading`` read of one window (the candidate GpuUsage rows, the
holders short of pods, the ClusterQueue samples that borrow or lend) into ``Finding``s per rule
and subject: the condition held in this window. For the idle rule a workload whose GPUs have no
telemetry in the window is a ``gap``: it neither starts, extends nor ends an episode.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from alerts.choices import Rule
from alerts.exemptions import Subject
from alerts.thresholds import ThresholdResolver, Thresholds
from fleet.choices import ActivitySource

if TYPE_CHECKING:
    from alerts.reading import Chunk, Series, Window

# Shares below this are float noise.
EPSILON = 1e-9


class UsageRow(NamedTuple):
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


@dataclass(frozen=True)
class QueueInfo:
    name: str
    team_id: int | None
    cohort_id: int | None


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
class WorkloadInfo:
    """What the rules and exemptions need of a Workload."""

    id: int
    namespace: str
    name: str
    cluster_queue_id: int | None
    local_queue_id: int | None
    labels: dict[str, Any]
    priority_class: str
    owner_kind: str
    gpus: float
    flavor: str

    @property
    def path(self) -> str:
        return f"{self.namespace}/{self.name}"

    def subject(self) -> Subject:
        return Subject(
            cluster_queue_id=self.cluster_queue_id,
            local_queue_id=self.local_queue_id,
            namespace=self.namespace,
            workload_id=self.id,
            labels=self.labels,
            priority_class=self.priority_class,
            owner_kind=self.owner_kind,
            gpus=self.gpus,
        )


@dataclass
class Finding:
    """The condition of one rule held for one subject in one window."""

    rule: str
    key: str
    thresholds: Thresholds
    gpus: float = 0.0
    idle_gpus: float = 0.0  # GPUs wasted in the window (idle, or held without a pod)
    held_gpus: float = 0.0
    # (flavor, GPU model, GPUs) of the wasted GPUs, for the rate card.
    priced: list[tuple[str, str, float]] = field(default_factory=list)
    team_id: int | None = None
    cluster_queue_id: int | None = None
    local_queue_id: int | None = None
    namespace: str = ""
    workload_id: int | None = None
    node_name: str = ""
    gpu_keys: list[str] = field(default_factory=list)
    # Per GPU key: (activity or None, idle) in this window.
    per_gpu: dict[str, tuple[float | None, bool]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    def subject(self) -> tuple[object, ...]:
        """What the finding names: its GPUs, and whose and where they are."""
        return (
            self.gpus,
            self.team_id,
            self.cluster_queue_id,
            self.local_queue_id,
            self.namespace,
            self.workload_id,
            self.node_name,
            self.gpu_keys,
        )


@dataclass
class Findings:
    hits: dict[str, dict[str, Finding]] = field(
        default_factory=lambda: {rule: {} for rule in Rule.values}
    )
    gaps: dict[str, dict[str, Finding]] = field(
        default_factory=lambda: {rule: {} for rule in Rule.values}
    )


@dataclass
class Run:
    """A workload whose candidate rows were the same in every window of a chunk but for their
    activities, each GPU always on one side of the workload's idle threshold and never without
    telemetry (``RuleSet.split``): its idle finding is the same in every window (``finding``,
    None when it is not idle) but for each GPU's activity, and so are its idle GPUs."""

    workload_id: int
    rows: list[UsageRow]  # as in the chunk's first window
    finding: Finding | None
    idle: float
    # Per GPU key: (idle, its activity in each window of the chunk).
    gpus: dict[str, tuple[bool, list[float | None]]]


def uuid_of(gpu_key: str) -> str:
    """``host/UUID/GI`` → UUID (with the MIG instance when there is one)."""
    parts = gpu_key.split("/")
    if len(parts) < 2:
        return gpu_key
    return parts[1] if len(parts) < 3 or not parts[2] else f"{parts[1]}/{parts[2]}"


def workload_key(cluster: str, workload: WorkloadInfo) -> str:
    return f"workload:{cluster}/{workload.path}"


class RuleSet:
    """The rules for one cluster with its thresholds, queues, holds and workloads."""

    def __init__(
        self,
        cluster: str,
        resolver: ThresholdResolver,
        queues: dict[int, QueueInfo],
        holders: dict[int, Hold],
    ) -> None:
        self.cluster = cluster
        self.resolver = resolver
        self.queues = queues
        self.holders = holders
        # Filled by the caller with every workload a chunk names (``Chunk.workload_ids``).
        self.workloads: dict[int, WorkloadInfo] = {}
        # The current chunk's workloads whose rows run unchanged through it (``split``).
        self.steady: dict[int, Run] = {}

    def split(self, chunk: Chunk, highest: float) -> None:
        """Sort the chunk's series (``alerts.reading.Chunk``): each workload whose rows run
        unchanged through the chunk becomes a ``Run`` (``steady``); the rows of the others go
        into the windows where their workload is a candidate (a row below ``highest``, the
        highest idle threshold in force, or without telemetry), as the database would select
        them one window at a time."""
        groups: dict[int | None, list[Series]] = defaultdict(list)
        for series in chunk.series:
            groups[series.row.workload_id].append(series)
        self.steady = {}
        count = len(chunk.windows)
        loose: list[Series] = []
        for workload_id, group in groups.items():
            run = None if workload_id is None else self._run(workload_id, group, count, highest)
            if run is None:
                loose.extend(group)
            else:
                self.steady[run.workload_id] = run
        cells: dict[tuple[datetime, int | None], list[UsageRow]] = defaultdict(list)
        for series in loose:
            row, node = series.row, series.row.node_name
            for end, activity in zip(series.ends, series.activities, strict=True):
                cells[(end, row.workload_id)].append(
                    row._replace(
                        activity=activity,
                        node_series=activity is not None or (end, node) in chunk.answered,
                    )
                )
        windows = {window.end: window for window in chunk.windows}
        for (end, workload_id), rows in cells.items():
            window = windows.get(end)
            if window is None:
                continue
            if workload_id is None or any(
                row.activity is None or row.activity < highest for row in rows
            ):
                window.rows.extend(rows)

    def _run(self, workload_id: int, group: list[Series], count: int, highest: float) -> Run | None:
        """The workload's run through the chunk's ``count`` windows, or None when its rows
        change: a row missing from a window or without telemetry in one, a GPU on both sides
        of the workload's idle threshold, or a window where it is no candidate."""
        if workload_id not in self.workloads:
            return None
        if any(len(series.activities) != count or None in series.activities for series in group):
            return None
        first = group[0].row
        limits = self.resolver.for_subject(
            first.cluster_queue_id, first.local_queue_id, first.namespace
        )
        threshold = limits.idle_threshold
        idle_rows: list[bool] = []
        for series in group:
            activities = cast(list[float], series.activities)
            low, high = min(activities), max(activities)
            if low < threshold <= high:
                return None
            idle_rows.append(high < threshold)
        if not any(max(cast(list[float], s.activities)) < highest for s in group) and not all(
            min(column) < highest
            for column in zip(*(cast(list[float], s.activities) for s in group), strict=True)
        ):
            return None
        rows = [
            series.row._replace(activity=series.activities[0], node_series=True) for series in group
        ]
        finding, idle, _gap = self._idle_of(workload_id, rows)
        gpus: dict[str, tuple[bool, list[float | None]]] = {}
        for series, is_idle in zip(group, idle_rows, strict=True):
            if series.row.gpu_key:
                gpus[series.row.gpu_key] = (is_idle, series.activities)
        return Run(workload_id, rows, finding, idle, gpus)

    def detect(self, window: Window) -> Findings:
        found = Findings()
        by_workload: dict[int, list[UsageRow]] = defaultdict(list)
        for row in window.rows:
            if row.workload_id is not None:
                by_workload[row.workload_id].append(row)
        idle_by_queue = self._idle(by_workload, found)
        for workload_id, run in self.steady.items():
            queue_id = run.rows[0].cluster_queue_id
            if run.idle > EPSILON and queue_id is not None:
                idle_by_queue[queue_id][workload_id] = run.idle
        self._ghosts(window, by_workload, found)
        self._borrowing(window.samples, idle_by_queue, found)
        self._telemetry(window.rows, found)
        return found

    # --- idle_workload ---------------------------------------------------------------------

    def _idle(
        self, by_workload: dict[int, list[UsageRow]], found: Findings
    ) -> dict[int, dict[int, float]]:
        """Idle workloads; returns idle GPUs per ClusterQueue and workload (queue's threshold)."""
        idle_by_queue: dict[int, dict[int, float]] = defaultdict(dict)
        for workload_id, rows in by_workload.items():
            finding, idle, gap = self._idle_of(workload_id, rows)
            queue_id = rows[0].cluster_queue_id
            if idle > EPSILON and queue_id is not None and workload_id in self.workloads:
                idle_by_queue[queue_id][workload_id] = idle
            if finding is not None:
                (found.gaps if gap else found.hits)[Rule.IDLE_WORKLOAD][finding.key] = finding
        return idle_by_queue

    def _idle_of(
        self, workload_id: int, rows: list[UsageRow]
    ) -> tuple[Finding | None, float, bool]:
        """One workload's rows of one window: its idle finding (None: not idle, or unknown
        workload), its idle GPUs at its threshold, and whether the window is a gap (no
        telemetry: the finding is the gap's)."""
        workload = self.workloads.get(workload_id)
        if workload is None:
            return None, 0.0, False
        first = rows[0]
        limits = self.resolver.for_subject(
            first.cluster_queue_id, first.local_queue_id, first.namespace
        )
        telemetry = idle = allocated = 0.0
        for row in rows:
            allocated += row.gpus
            if row.activity is None:
                continue
            telemetry += row.gpus
            if row.activity < limits.idle_threshold:
                idle += row.gpus
        gap = telemetry <= EPSILON
        if not gap and idle / telemetry + EPSILON < limits.idle_gpu_fraction:
            return None, idle, False
        finding = Finding(
            rule=Rule.IDLE_WORKLOAD,
            key=workload_key(self.cluster, workload),
            thresholds=limits,
            gpus=allocated,
            idle_gpus=idle,
            held_gpus=allocated,
            team_id=first.team_id,
            cluster_queue_id=first.cluster_queue_id,
            local_queue_id=first.local_queue_id,
            namespace=workload.namespace,
            workload_id=workload_id,
            node_name=first.node_name,
            gpu_keys=sorted({row.gpu_key for row in rows if row.gpu_key}),
        )
        if gap:
            return finding, idle, True
        for row in rows:
            if row.activity is None:
                continue
            is_idle = row.activity < limits.idle_threshold
            if row.gpu_key:
                finding.per_gpu[row.gpu_key] = (row.activity, is_idle)
            if is_idle:
                finding.priced.append((row.flavor, row.gpu_model, row.gpus))
        if any(row.activity_source == ActivitySource.GR_ENGINE_ACTIVE for row in rows):
            finding.facts["fallback"] = True
        finding.facts["telemetry_gpus"] = telemetry
        return finding, idle, False

    # --- ghost_reservation -----------------------------------------------------------------

    def _ghosts(
        self, window: Window, by_workload: dict[int, list[UsageRow]], found: Findings
    ) -> None:
        """Holders that held quota through the window with fewer pods running than their gang
        (``Window.short``: the database compared the pods)."""
        for workload_id, (pods, running_gpus) in window.short.items():
            hold = self.holders.get(workload_id)
            workload = self.workloads.get(workload_id)
            if hold is None or workload is None:
                continue
            if hold.pods_expected <= pods or hold.gpus <= EPSILON:
                continue
            if not hold.through(window.start, window.end):
                continue
            run = self.steady.get(workload_id)
            rows = run.rows if run is not None else by_workload.get(workload_id, [])
            unused = max(hold.gpus - running_gpus, 0.0)
            queue = self.queues.get(workload.cluster_queue_id or 0)
            finding = Finding(
                rule=Rule.GHOST_RESERVATION,
                key=workload_key(self.cluster, workload),
                thresholds=self.resolver.for_subject(
                    workload.cluster_queue_id, workload.local_queue_id, workload.namespace
                ),
                gpus=hold.gpus,
                idle_gpus=unused,
                held_gpus=hold.gpus,
                priced=[(workload.flavor, "", unused)],
                team_id=queue.team_id if queue else None,
                cluster_queue_id=workload.cluster_queue_id,
                local_queue_id=workload.local_queue_id,
                namespace=workload.namespace,
                workload_id=workload_id,
                gpu_keys=sorted({row.gpu_key for row in rows if row.gpu_key}),
                facts={"pods_running": pods, "pods_expected": hold.pods_expected},
            )
            found.hits[Rule.GHOST_RESERVATION][finding.key] = finding

    # --- borrowing_while_idle --------------------------------------------------------------

    def _borrowing(
        self,
        samples: Iterable[QueueSample],
        idle_by_queue: dict[int, dict[int, float]],
        found: Findings,
    ) -> None:
        borrowed: dict[int, float] = defaultdict(float)
        lent: dict[int, float] = defaultdict(float)
        by_flavor: dict[int, list[tuple[str, str, float]]] = defaultdict(list)
        for sample in samples:
            borrowed[sample.cluster_queue_id] += sample.borrowed
            lent[sample.cluster_queue_id] += sample.lent
            if sample.borrowed > EPSILON:
                by_flavor[sample.cluster_queue_id].append((sample.flavor, "", sample.borrowed))
        # The queues that lend in this window, per cohort (read once, not per borrower).
        lending: dict[int, list[tuple[int, str]]] = defaultdict(list)
        for other, credit in lent.items():
            lender = self.queues.get(other)
            if credit > EPSILON and lender is not None and lender.cohort_id is not None:
                lending[lender.cohort_id].append((other, lender.name))
        for queue_id, amount in borrowed.items():
            if amount <= EPSILON:
                continue
            idle_workloads = idle_by_queue.get(queue_id, {})
            # Summed in one order whichever way the windows were read (float sums depend on it).
            idle = sum(idle_workloads[workload_id] for workload_id in sorted(idle_workloads))
            if idle + EPSILON < amount:
                continue
            queue = self.queues.get(queue_id)
            if queue is None:
                continue
            cohort_lenders = lending.get(queue.cohort_id) if queue.cohort_id is not None else None
            lenders = sorted(name for other, name in cohort_lenders or () if other != queue_id)
            names = sorted(
                self.workloads[wid].path for wid in idle_workloads if wid in self.workloads
            )
            finding = Finding(
                rule=Rule.BORROWING_WHILE_IDLE,
                key=f"cluster_queue:{self.cluster}/{queue.name}",
                thresholds=self.resolver.for_subject(queue_id, None, ""),
                gpus=amount,
                idle_gpus=min(idle, amount),
                held_gpus=amount,
                priced=by_flavor[queue_id],
                team_id=queue.team_id,
                cluster_queue_id=queue_id,
                facts={
                    "borrowed": amount,
                    "idle": idle,
                    "lenders": lenders,
                    "idle_workloads": names,
                },
            )
            found.hits[Rule.BORROWING_WHILE_IDLE][finding.key] = finding

    # --- telemetry_missing -----------------------------------------------------------------

    def _telemetry(self, rows: list[UsageRow], found: Findings) -> None:
        dark: dict[str, list[UsageRow]] = defaultdict(list)
        for row in rows:
            if row.activity is None:
                dark[row.node_name].append(row)
        for node, missing in dark.items():
            whole_node = bool(node) and not missing[0].node_series
            groups: dict[str, list[UsageRow]] = defaultdict(list)
            for row in missing:
                if whole_node:
                    key = f"node:{self.cluster}/{node}"
                elif row.gpu_key:
                    key = f"gpu:{self.cluster}/{row.gpu_key}"
                else:
                    key = f"pod:{self.cluster}/{row.namespace}/{row.pod}"
                groups[key].append(row)
            for key, group in groups.items():
                first = group[0]
                single = len({row.workload_id for row in group}) == 1
                single_team = len({row.team_id for row in group}) == 1
                finding = Finding(
                    rule=Rule.TELEMETRY_MISSING,
                    key=key,
                    thresholds=self.resolver.for_subject(
                        first.cluster_queue_id, first.local_queue_id, first.namespace
                    ),
                    gpus=sum(row.gpus for row in group),
                    held_gpus=sum(row.gpus for row in group),
                    team_id=first.team_id if single_team else None,
                    cluster_queue_id=first.cluster_queue_id if single else None,
                    local_queue_id=first.local_queue_id if single else None,
                    namespace=first.namespace if single else "",
                    workload_id=first.workload_id if single else None,
                    node_name=node,
                    gpu_keys=sorted({row.gpu_key for row in group if row.gpu_key}),
                    per_gpu={row.gpu_key: (None, False) for row in group if row.gpu_key},
                    facts={
                        "whole_node": whole_node,
                        "pods": sorted({f"{row.namespace}/{row.pod}" for row in group})[:20],
                    },
                )
                found.hits[Rule.TELEMETRY_MISSING][key] = finding
