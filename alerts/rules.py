"""The four hoarding rules over one stored window (docs/architecture.md "Hoarding alerts"); no I/O.

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
from typing import Any, cast

from alerts.choices import WINDOW_RULES, Rule
from alerts.exemptions import Subject
from alerts.rows import (
    EPSILON,
    Chunk,
    Hold,
    QueueSample,
    StoredWindow,
    UsageFact,
    WindowSeries,
)
from alerts.thresholds import ThresholdResolver, Thresholds
from fleet.choices import ActivitySource


@dataclass(frozen=True)
class QueueInfo:
    name: str
    team_id: int | None
    cohort_id: int | None


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
    # The scheduler the Workload was read from (``Workload.scheduler``): how summaries name it.
    scheduler: str = "kueue"

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
        default_factory=lambda: {rule: {} for rule in WINDOW_RULES}
    )
    gaps: dict[str, dict[str, Finding]] = field(
        default_factory=lambda: {rule: {} for rule in WINDOW_RULES}
    )


@dataclass
class Run:
    """A workload through consecutive windows of a chunk (positions ``first`` to ``last - 1``)
    where its candidate rows were the same but for their activities, each GPU on the same side
    of the workload's idle threshold in all of them, none without telemetry
    (``RuleSet.split``): its idle finding is the same in each of these windows (``finding``,
    None when it is not idle) but for each GPU's activity, and so are its idle GPUs."""

    workload_id: int
    first: int
    last: int
    rows: list[UsageFact]  # as in the run's first window
    finding: Finding | None
    idle: float
    # Per GPU key: (idle, its activity in each window of the run).
    gpus: dict[str, tuple[bool, list[float | None]]]


# An identity without a row in a window (``RuleSet.split``).
_ABSENT = float("-inf")


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
        # The current chunk's runs, and per window position the runs through it (``split``).
        self.runs: list[Run] = []
        self.runs_at: list[list[Run]] = []

    def split(self, chunk: Chunk, highest: float) -> None:
        """Sort the chunk's series (``alerts.rows.Chunk``) into ``runs`` (and ``runs_at``,
        per window position): the stretches of windows where a workload's rows were the same
        but for their activities, each GPU on one side of its idle threshold. The rows of the
        other windows go into the windows where their workload is a candidate (a row below
        ``highest``, the highest idle threshold in force, or without telemetry), as the
        database would select them one window at a time."""
        windows = chunk.windows
        count = len(windows)
        position = {window.end: index for index, window in enumerate(windows)}
        groups: dict[int | None, list[WindowSeries]] = defaultdict(list)
        for series in chunk.series:
            groups[series.row.workload_id].append(series)
        self.runs = []
        self.runs_at = [[] for _ in windows]
        # Per series to put into windows: the positions to put it into (None: all).
        loose: list[tuple[WindowSeries, set[int] | None]] = []
        for workload_id, group in groups.items():
            if workload_id is None or workload_id not in self.workloads:
                loose.extend((series, None) for series in group)
                continue
            runs, irregular = self._runs(workload_id, group, count, position, highest)
            for run in runs:
                self.runs.append(run)
                for index in range(run.first, run.last):
                    self.runs_at[index].append(run)
            if irregular:
                loose.extend((series, irregular) for series in group)
        cells: dict[tuple[int, int | None], list[UsageFact]] = defaultdict(list)
        for series, wanted in loose:
            row, node = series.row, series.row.node_name
            for end, activity in zip(series.ends, series.activities, strict=True):
                at = position.get(end)
                if at is None or (wanted is not None and at not in wanted):
                    continue
                cells[(at, row.workload_id)].append(
                    row._replace(
                        activity=activity,
                        node_series=activity is not None or (end, node) in chunk.answered,
                    )
                )
        for (index, workload_id), rows in cells.items():
            if workload_id is None or any(
                row.activity is None or row.activity < highest for row in rows
            ):
                windows[index].rows.extend(rows)

    def _runs(
        self,
        workload_id: int,
        group: list[WindowSeries],
        count: int,
        position: dict[datetime, int],
        highest: float,
    ) -> tuple[list[Run], set[int]]:
        """The workload's runs through the chunk's ``count`` windows, and the positions of the
        windows where it has a row without telemetry (their rows go into the windows). A run
        ends where the workload's rows change: one appears or goes, or a GPU crosses its idle
        threshold. A window where it is no candidate is in neither: it has no rows there."""
        first = group[0].row
        threshold = self.resolver.for_subject(
            first.cluster_queue_id, first.local_queue_id, first.namespace
        ).idle_threshold
        if all(len(s.activities) == count and None not in s.activities for s in group):
            # Every row in every window: the whole chunk is one run when no GPU crosses its
            # threshold and the workload is a candidate throughout (the usual case).
            columns = [cast(list[float], s.activities) for s in group]
            flags = [max(values) < threshold for values in columns]
            if all(
                idle or min(values) >= threshold
                for idle, values in zip(flags, columns, strict=True)
            ) and (
                any(max(values) < highest for values in columns)
                or all(min(column) < highest for column in zip(*columns, strict=True))
            ):
                return [self._run(workload_id, group, columns, 0, count)], set()
        else:
            columns = []
            for series in group:
                values: list[float | None] = [_ABSENT] * count
                for end, activity in zip(series.ends, series.activities, strict=True):
                    index = position.get(end)
                    if index is not None:
                        values[index] = activity
                columns.append(cast(list[float], values))
        runs: list[Run] = []
        irregular: set[int] = set()
        start, current = 0, None
        for index, cells in enumerate(zip(*columns, strict=True)):
            # Which rows the window has, and each one's side of the threshold.
            signature: tuple[bool | None, ...] | None = None
            if None in cells:  # a row without telemetry
                irregular.add(index)
            elif _ABSENT in cells:
                present = [cell for cell in cells if cell != _ABSENT]
                if present and min(present) < highest:
                    signature = tuple(
                        None if cell == _ABSENT else cell < threshold for cell in cells
                    )
            elif min(cells) < highest:
                signature = tuple(cell < threshold for cell in cells)
            if signature != current or signature is None:
                if current is not None:
                    runs.append(self._run(workload_id, group, columns, start, index))
                start, current = index, signature
        if current is not None:
            runs.append(self._run(workload_id, group, columns, start, count))
        return runs, irregular

    def _run(
        self,
        workload_id: int,
        group: list[WindowSeries],
        columns: list[list[float]],
        first: int,
        last: int,
    ) -> Run:
        """The run of the windows at positions ``first`` to ``last - 1``, made of the rows
        the first of them has (each of them has the same)."""
        present = list(zip(group, columns, strict=True))
        if any(values[first] == _ABSENT for values in columns):
            present = [(series, values) for series, values in present if values[first] != _ABSENT]
        rows = [
            series.row._replace(activity=values[first], node_series=True)
            for series, values in present
        ]
        finding, idle, _gap = self._idle_of(workload_id, rows)
        gpus: dict[str, tuple[bool, list[float | None]]] = {}
        if finding is not None:
            for row, (_series, values) in zip(rows, present, strict=True):
                if row.gpu_key:
                    spread: list[float | None] = list(values[first:last])
                    gpus[row.gpu_key] = finding.per_gpu[row.gpu_key][1], spread
        return Run(workload_id, first, last, rows, finding, idle, gpus)

    def detect(self, window: StoredWindow, position: int) -> Findings:
        """What held in the chunk's window at ``position`` but for the runs' idle findings
        (``EpisodeBook.apply`` takes those through their windows)."""
        found = Findings()
        by_workload: dict[int, list[UsageFact]] = defaultdict(list)
        for row in window.rows:
            if row.workload_id is not None:
                by_workload[row.workload_id].append(row)
        idle_by_queue = self._idle(by_workload, found)
        for run in self.runs_at[position]:
            queue_id = run.rows[0].cluster_queue_id
            if run.idle > EPSILON and queue_id is not None:
                idle_by_queue[queue_id][run.workload_id] = run.idle
            by_workload[run.workload_id] = run.rows
        self._ghosts(window, by_workload, found)
        self._borrowing(window.samples, idle_by_queue, found)
        self._telemetry(window.rows, found)
        return found

    # --- idle_workload ---------------------------------------------------------------------

    def _idle(
        self, by_workload: dict[int, list[UsageFact]], found: Findings
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
        self, workload_id: int, rows: list[UsageFact]
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
        self, window: StoredWindow, by_workload: dict[int, list[UsageFact]], found: Findings
    ) -> None:
        """Holders that held quota through the window with fewer pods running than their gang
        (``StoredWindow.short``: the database compared the pods)."""
        for workload_id, (pods, running_gpus) in window.short.items():
            hold = self.holders.get(workload_id)
            workload = self.workloads.get(workload_id)
            if hold is None or workload is None:
                continue
            if hold.pods_expected <= pods or hold.gpus <= EPSILON:
                continue
            if not hold.through(window.start, window.end):
                continue
            rows = by_workload.get(workload_id, [])
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

    def _telemetry(self, rows: list[UsageFact], found: Findings) -> None:
        dark: dict[str, list[UsageFact]] = defaultdict(list)
        for row in rows:
            if row.activity is None:
                dark[row.node_name].append(row)
        for node, missing in dark.items():
            whole_node = bool(node) and not missing[0].node_series
            groups: dict[str, list[UsageFact]] = defaultdict(list)
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
