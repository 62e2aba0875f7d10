"""Episodes moved on window by window (``EpisodeBook``), then written in bulk.

Per rule and subject, each window is one of:

* seen: an episode already covers it (``started_at`` ≤ window start, ``evaluated_until`` ≥
  window end): skipped, which makes re-evaluation idempotent;
* a hit: the active (unresolved) episode is extended, or a new one starts at the window's start;
  it fires once it has held for the rule's duration, and the idle rule escalates in place;
* a gap (idle rule, no telemetry): the active episode only notes the window;
* neither: the active episode resolves at the window's start, or is dropped if it never fired.

A backfill that reaches an episode written earlier (a live one that began at install time)
with its own episode of the same subject still open joins the two: the later one takes the
earlier start, hours and evidence, as a collection gap neither starts nor ends an episode.

Subjects are independent of each other, so ``apply`` takes each one through a chunk's windows
in turn. Consecutive hits that differ only in the GPUs' activities (a workload's run,
``alerts.rules.Run``, or a stretch of equal findings) extend the active episode in one step
(``_extend_run``) when no episode of the subject reaches into them: the same additions, in the
same order, as window by window.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from django.db.models import Q

from alerts.choices import WINDOW_RULES, Rule, Severity
from alerts.ended import NEWEST_HOUR, join_newest_hours, tally_newest_hour
from alerts.exemptions import ExemptionMatcher, Subject
from alerts.models import Episode, Silence
from alerts.pricing import Prices
from alerts.rules import Finding, Findings, Run, WorkloadInfo, uuid_of
from alerts.store import update_episodes
from alerts.summary import describe
from core.bulk import fetch_instances
from core.timewindows import hour_floor
from fleet.models import Cluster, Node

if TYPE_CHECKING:
    from alerts.rows import StoredWindow

COST_PLACES = Decimal("0.0001")  # Episode.cost's decimal places
# Longer than any collection window: a resolved episode's ``evaluated_until`` is at most this
# after its ``resolved_at`` (the end of the window it resolved in).
RESOLVED_WINDOW_SLACK = timedelta(days=1)
# Evidence keeps at most this many GPUs per episode (a 64-GPU gang fits).
EVIDENCE_GPUS = 64

# The threshold that says how long each rule's condition holds before the episode fires.
FIRE_AFTER: dict[str, str] = {
    Rule.IDLE_WORKLOAD: "idle_warning_minutes",
    Rule.GHOST_RESERVATION: "ghost_minutes",
    Rule.BORROWING_WHILE_IDLE: "borrowing_minutes",
    Rule.TELEMETRY_MISSING: "telemetry_minutes",
}

EPISODE_UPDATE_FIELDS = [
    "severity",
    "team",
    "cluster_queue",
    "local_queue",
    "namespace",
    "workload",
    "node",
    "gpu_uuids",
    "gpus",
    "started_at",
    "fired_at",
    "escalated_at",
    "resolved_at",
    "held_seconds",
    "last_held_at",
    "evaluated_until",
    "idle_gpu_hours",
    "held_gpu_hours",
    "cost",
    "evidence",
    "summary",
    "exempt",
    "exempt_reason",
    "silenced_until",
    "updated_at",
]


class EpisodeBook:
    """The cluster's episodes a range can touch; see the module docstring."""

    def __init__(self, cluster: Cluster, start: datetime, *, live: bool) -> None:
        self.cluster = cluster
        self.live = live
        self.prices = Prices()
        self.by_key: dict[tuple[str, str], list[Episode]] = defaultdict(list)
        self.unresolved: dict[str, set[str]] = {rule: set() for rule in WINDOW_RULES}
        self.touched: dict[int, Episode] = {}
        # Episodes to create, by ``id()``: a pending one that ends unfired is dropped from it
        # in constant time (a list's ``remove`` compared model instances one by one, quadratic
        # in a backfill's episodes).
        self.new: dict[int, Episode] = {}
        self.dropped: list[int] = []
        self._nodes: dict[str, int] | None = None
        # What an episode carries between windows besides its fields, by ``id(episode)``.
        self._running: dict[int, _Running] = {}
        # A resolved episode was evaluated up to the end of the window it resolved in.
        recent = Q(resolved_at__gt=start - RESOLVED_WINDOW_SLACK, evaluated_until__gt=start)
        for episode in fetch_instances(
            Episode.objects.filter(cluster=cluster, rule__in=WINDOW_RULES).filter(
                Q(resolved_at__isnull=True) | recent
            )
        ):
            self.by_key[(episode.rule, episode.subject_key)].append(episode)
            if episode.resolved_at is None:
                self.unresolved[episode.rule].add(episode.subject_key)
        for episodes in self.by_key.values():
            episodes.sort(key=lambda episode: episode.started_at)

    # --- one window ----------------------------------------------------------------------

    def apply(self, windows: list[StoredWindow], findings: list[Findings], runs: list[Run]) -> None:
        """Move every subject on through consecutive ``windows`` (oldest first), each with
        its ``findings``, and the workloads' ``runs`` (``alerts.rules.Run``) through theirs.
        Subjects are independent of each other, so each one goes through all the windows in
        turn; a run, or a stretch of windows whose findings differ only in the GPUs'
        activities, moves it on in one step (``_run_through``)."""
        runs_of: dict[str, dict[str, list[Run]]] = {
            rule: defaultdict(list) for rule in WINDOW_RULES
        }
        for run in runs:
            if run.finding is not None:
                runs_of[run.finding.rule][run.finding.key].append(run)
        for rule in WINDOW_RULES:
            # Per subject, its findings by window position.
            hits: dict[str, dict[int, Finding]] = defaultdict(dict)
            gaps: dict[str, dict[int, Finding]] = defaultdict(dict)
            for position, found in enumerate(findings):
                for key, finding in found.hits[rule].items():
                    hits[key][position] = finding
                for key, finding in found.gaps[rule].items():
                    gaps[key][position] = finding
            keys = set(self.unresolved[rule]).union(hits, gaps, runs_of[rule])
            whole = len(windows)
            for key in keys:
                key_runs = runs_of[rule].get(key)
                key_hits, key_gaps = hits.get(key), gaps.get(key)
                if (
                    key_runs is not None
                    and len(key_runs) == 1
                    and key_runs[0].first == 0
                    and key_runs[0].last == whole
                ):
                    # One run through every window (a steady workload; every one, live).
                    run = key_runs[0]
                    self._run_through(cast(Finding, run.finding), windows, run.gpus)
                    continue
                self._subject(rule, key, windows, key_hits or {}, key_gaps or {}, key_runs)

    def _subject(
        self,
        rule: str,
        key: str,
        windows: list[StoredWindow],
        hits: dict[int, Finding],
        gaps: dict[int, Finding],
        runs: list[Run] | None,
    ) -> None:
        """One subject through the windows, as ``_step`` window after window would."""
        starts = {run.first: run for run in runs} if runs else {}
        later_runs_from = max(starts, default=-1)  # no run starts after this position
        position, count = 0, len(windows)
        while position < count:
            run = starts.get(position)
            if run is not None:
                finding = cast(Finding, run.finding)
                self._run_through(finding, windows[run.first : run.last], run.gpus)
                position = run.last
                continue
            hit = hits.get(position)
            gap = gaps.get(position)
            if hit is not None:
                shape = _shape(hit)
                last = position + 1
                while (
                    last < count
                    and last not in starts
                    and (other := hits.get(last)) is not None
                    and _shape(other) == shape
                ):
                    last += 1
                if last - position > 1:
                    stretch = [hits[index] for index in range(position, last)]
                    gpus = {
                        gpu: (idle, [h.per_gpu[gpu][0] for h in stretch])
                        for gpu, (_activity, idle) in hit.per_gpu.items()
                    }
                    self._run_through(hit, windows[position:last], gpus)
                    position = last
                    continue
            elif gap is None and key not in self.unresolved[rule]:
                if not hits and not gaps and position > later_runs_from:
                    return  # nothing else happens to it in these windows
                position += 1  # nothing held and nothing open: the window changes nothing
                continue
            self._step(rule, key, windows[position], hit, gap)
            position += 1

    def _step(
        self,
        rule: str,
        key: str,
        window: StoredWindow,
        finding: Finding | None,
        gap: Finding | None,
    ) -> None:
        """One subject through one window: ``finding`` when its condition held, ``gap`` when
        the window says nothing about it."""
        start, end, seconds = window.start, window.end, window.seconds
        episodes = self.by_key.get((rule, key), [])
        cover = next(
            (e for e in episodes if e.started_at <= start and e.evaluated_until >= end),
            None,
        )
        active = self._active(episodes, start, end)
        if cover is not None:
            if active is not None and active is not cover:
                self._join(active, cover)
            return
        if finding is not None:
            if active is None:
                active = self._start(finding, start)
            gpus = {gpu: (idle, [activity]) for gpu, (activity, idle) in finding.per_gpu.items()}
            self._extend_run(active, finding, [window], gpus)
        elif gap is not None:
            if active is not None:
                self._gap(active, gap, end, seconds)
        elif active is not None:
            self._resolve(active, start, end)

    @staticmethod
    def _active(episodes: list[Episode], start: datetime, end: datetime) -> Episode | None:
        return next(
            (
                e
                for e in episodes
                if e.resolved_at is None and e.started_at <= start and e.evaluated_until < end
            ),
            None,
        )

    def _run_through(
        self,
        finding: Finding,
        windows: list[StoredWindow],
        gpus: dict[str, tuple[bool, list[float | None]]],
    ) -> None:
        """The subject's condition held in each of ``windows`` as ``finding`` says, but for
        its GPUs' activities (``gpus``: per GPU key, idle and the activity in each window).
        One step when no episode of the subject reaches into the windows (the usual case),
        else ``_step`` window by window."""
        rule, key = finding.rule, finding.key
        episodes = self.by_key.get((rule, key), [])
        first = windows[0]
        if any(e.started_at > first.start or e.evaluated_until >= first.end for e in episodes):
            for position, window in enumerate(windows):
                per_gpu = {gpu: (series[position], idle) for gpu, (idle, series) in gpus.items()}
                self._step(rule, key, window, replace(finding, per_gpu=per_gpu), None)
            return
        active = self._active(episodes, first.start, first.end)
        if active is None:
            active = self._start(finding, first.start)
        self._extend_run(active, finding, windows, gpus)

    def _start(self, finding: Finding, start: datetime) -> Episode:
        episode = Episode(
            rule=finding.rule,
            severity=Severity.WARNING,
            cluster=self.cluster,
            subject_key=finding.key,
            started_at=start,
            evaluated_until=start,
            detected_live=self.live,
            evidence={},
        )
        self.new[id(episode)] = episode
        episodes = self.by_key[(finding.rule, finding.key)]
        episodes.append(episode)
        episodes.sort(key=lambda item: item.started_at)
        self.unresolved[finding.rule].add(finding.key)
        return episode

    def _extend_run(
        self,
        episode: Episode,
        finding: Finding,
        windows: list[StoredWindow],
        gpus: dict[str, tuple[bool, list[float | None]]],
    ) -> None:
        """Extend the episode through each of ``windows``, where ``finding`` held, with its
        GPUs' activities window by window (``gpus``: per GPU key, idle and the activity in
        each window; None: no telemetry): the same sums in the same order for one window at a
        time and for many at once."""
        running = self._running_of(episode)
        self._identify(episode, finding, running)
        limits = finding.thresholds
        fire_minutes = getattr(limits, FIRE_AFTER[finding.rule])
        fire_after = fire_minutes * 60
        critical = limits.idle_critical_minutes * 60 if finding.rule == Rule.IDLE_WORKLOAD else None
        priced = finding.priced if finding.rule != Rule.TELEMETRY_MISSING else []
        evidence = episode.evidence
        entries = evidence.setdefault("gpus", {})
        tracked: list[tuple[dict[str, Any], bool, list[float | None]]] = []
        for key, (idle, series) in gpus.items():
            entry = entries.get(key)
            if entry is None:
                if len(entries) >= EVIDENCE_GPUS:
                    continue
                entry = entries[key] = _new_gpu_entry(key)
            tracked.append((entry, idle, series))
        exact = running.cost_exact
        costs: dict[tuple[datetime, int], list[Decimal]] = {}
        seconds = 0
        for position, window in enumerate(windows):
            seconds, hours = window.seconds, window.hours
            episode.held_seconds += seconds
            episode.idle_gpu_hours += finding.idle_gpus * hours
            episode.held_gpu_hours += finding.held_gpus * hours
            cost = Decimal(0)
            if priced:
                # The same terms as ``_extend``'s, computed once per hour and window length.
                terms = costs.get((window.hour, seconds))
                if terms is None:
                    terms = costs[(window.hour, seconds)] = [
                        self.prices.price(flavor, gpu_model, window.hour)
                        * _gpu_hours(share * hours)
                        for flavor, gpu_model, share in priced
                    ]
                for term in terms:
                    cost += term
                exact += cost
            tally_newest_hour(
                evidence, window.hour, finding.idle_gpus * hours, finding.held_gpus * hours, cost
            )
            minutes = seconds / 60
            for entry, idle, series in tracked:
                activity = series[position]
                entry["minutes"] += minutes
                if activity is not None:
                    entry["telemetry_minutes"] += minutes
                    entry["sum"] += activity * minutes
                    entry["max"] = activity if entry["max"] is None else max(entry["max"], activity)
                if idle:
                    entry["idle_minutes"] += minutes
            if episode.fired_at is None and episode.held_seconds >= fire_after:
                episode.fired_at = window.end
            if (
                critical is not None
                and episode.escalated_at is None
                and episode.held_seconds >= critical
            ):
                episode.severity = Severity.CRITICAL
                episode.escalated_at = window.end
                if episode.fired_at is None:
                    episode.fired_at = window.end
        for entry, _idle, _series in tracked:
            if entry["telemetry_minutes"]:
                entry["mean"] = entry["sum"] / entry["telemetry_minutes"]
        if priced:
            running.cost_exact = exact
            running.priced = True
            episode.cost = exact.quantize(COST_PLACES)
        last = windows[-1].end
        episode.last_held_at = last
        episode.evaluated_until = last
        evidence["window_seconds"] = seconds
        evidence["held_minutes"] = episode.held_seconds // 60
        evidence.update(finding.facts)
        evidence["idle_threshold"] = limits.idle_threshold
        evidence["fire_after_minutes"] = fire_minutes
        if critical is not None:
            evidence["critical_after_minutes"] = limits.idle_critical_minutes
        self._touch(episode)

    def _identify(self, episode: Episode, finding: Finding, running: _Running) -> None:
        """The episode's subject as the newest window names it; nothing to do when it names
        what the previous window named (a backfill names the same subject window after window,
        and a foreign key's assignment goes through its descriptor)."""
        subject = finding.subject()
        if running.subject == subject:
            return
        episode.gpus = finding.gpus
        episode.team_id = finding.team_id
        episode.cluster_queue_id = finding.cluster_queue_id
        episode.local_queue_id = finding.local_queue_id
        episode.namespace = finding.namespace
        episode.workload_id = finding.workload_id
        episode.node_id = self._node_id(finding.node_name) if finding.node_name else None
        # Merging the same keys again would change nothing (the lowest EVIDENCE_GPUS UUIDs).
        uuids = set(episode.gpu_uuids) | {uuid_of(key) for key in finding.gpu_keys}
        episode.gpu_uuids = sorted(uuids)[:EVIDENCE_GPUS]
        running.subject = subject

    def _running_of(self, episode: Episode) -> _Running:
        running = self._running.get(id(episode))
        if running is None or running.episode is not episode:
            stored = episode.evidence.get("cost_exact")
            running = _Running(episode, Decimal(stored or "0"), priced=stored is not None)
            self._running[id(episode)] = running
        return running

    def _gap(self, episode: Episode, finding: Finding, end: datetime, seconds: int) -> None:
        episode.evaluated_until = end
        episode.held_gpu_hours += finding.held_gpus * seconds / 3600
        gap_hour = hour_floor(end - timedelta(seconds=seconds))
        tally_newest_hour(
            episode.evidence, gap_hour, 0.0, finding.held_gpus * seconds / 3600, Decimal(0)
        )
        episode.evidence["gap_minutes"] = episode.evidence.get("gap_minutes", 0) + seconds // 60
        self._touch(episode)

    def _resolve(self, episode: Episode, start: datetime, end: datetime) -> None:
        self._forget_unresolved(episode)
        if episode.fired_at is None:
            self._drop(episode)  # pending only: never an alert
            return
        episode.resolved_at = start
        episode.evaluated_until = end
        self._touch(episode)
        # Windows only move forward from here on, so it can neither cover one nor be joined
        # again: out of its subject's list, which stays short through a week of episodes.
        self._unlist(episode)

    def _join(self, earlier: Episode, later: Episode) -> None:
        """The later episode takes over the earlier one that ran into it."""
        moved = earlier.held_seconds
        own_start = later.started_at
        later.started_at = earlier.started_at
        later.held_seconds += moved
        later.idle_gpu_hours += earlier.idle_gpu_hours
        later.held_gpu_hours += earlier.held_gpu_hours
        own, taken = self._running_of(later), self._running_of(earlier)
        own.cost_exact += taken.cost_exact
        own.priced = True  # a joined episode always says its exact cost
        later.cost = own.cost_exact.quantize(COST_PLACES)
        later.gpu_uuids = sorted(set(later.gpu_uuids) | set(earlier.gpu_uuids))[:EVIDENCE_GPUS]
        # When the joined episode crossed each duration: in the earlier part if it did there,
        # else that many held seconds into the later part (which held without a break).
        for name, duration in (
            ("fired_at", "fire_after_minutes"),
            ("escalated_at", "critical_after_minutes"),
        ):
            minutes = later.evidence.get(duration) or earlier.evidence.get(duration)
            if getattr(earlier, name) is not None:
                setattr(later, name, getattr(earlier, name))
            elif minutes and later.held_seconds >= minutes * 60:
                crossing = own_start + timedelta(seconds=max(minutes * 60 - moved, 0))
                setattr(later, name, max(crossing, own_start))
        if later.escalated_at is not None:
            later.severity = Severity.CRITICAL
        # ``detected_live`` stays the later one's: it was first written when it was written.
        gpus = later.evidence.setdefault("gpus", {})
        for key, entry in (earlier.evidence.get("gpus") or {}).items():
            mine = gpus.get(key)
            if mine is None:
                if len(gpus) < EVIDENCE_GPUS:
                    gpus[key] = dict(entry)
                continue
            for name in ("minutes", "telemetry_minutes", "idle_minutes", "sum"):
                mine[name] = mine.get(name, 0.0) + entry.get(name, 0.0)
            highs = [value for value in (mine.get("max"), entry.get("max")) if value is not None]
            mine["max"] = max(highs) if highs else None
            if mine["telemetry_minutes"]:
                mine["mean"] = mine["sum"] / mine["telemetry_minutes"]
        later.evidence["held_minutes"] = later.held_seconds // 60
        join_newest_hours(later.evidence, earlier.evidence.get(NEWEST_HOUR))
        self._forget_unresolved(earlier)
        if later.resolved_at is None:
            self.unresolved[later.rule].add(later.subject_key)
        self._drop(earlier)
        self._touch(later)

    def _drop(self, episode: Episode) -> None:
        self._unlist(episode)
        if episode.pk is not None:
            self.dropped.append(episode.pk)
            self.touched.pop(episode.pk, None)
        else:
            del self.new[id(episode)]

    def _unlist(self, episode: Episode) -> None:
        """Out of its subject's list (by identity: model equality compares primary keys)."""
        episodes = self.by_key[(episode.rule, episode.subject_key)]
        del episodes[next(i for i, item in enumerate(episodes) if item is episode)]

    def _forget_unresolved(self, episode: Episode) -> None:
        others = [
            item
            for item in self.by_key.get((episode.rule, episode.subject_key), [])
            if item is not episode and item.resolved_at is None
        ]
        if not others:
            self.unresolved[episode.rule].discard(episode.subject_key)

    def _touch(self, episode: Episode) -> None:
        if episode.pk is not None:
            self.touched[episode.pk] = episode

    def _node_id(self, name: str) -> int | None:
        if self._nodes is None:
            self._nodes = dict(Node.objects.filter(cluster=self.cluster).values_list("name", "pk"))
        return self._nodes.get(name)

    # --- writing -----------------------------------------------------------------------------

    def finish(self) -> None:
        """Join an episode still open before a later one of its subject (a backfill that ended
        before the live history began: the hours between were not collected)."""
        for episodes in list(self.by_key.values()):
            position = 0
            while position < len(episodes) - 1:
                if episodes[position].resolved_at is None:
                    self._join(episodes[position], episodes[position + 1])  # drops the first
                    continue
                position += 1

    def workload_ids(self) -> set[int]:
        """The workloads of the episodes ``save`` writes (their exemptions and summaries)."""
        return {
            episode.workload_id
            for episode in [*self.new.values(), *self.touched.values()]
            if episode.workload_id is not None
        }

    def save(self, now: datetime, workloads: dict[int, WorkloadInfo]) -> tuple[int, int, int]:
        """Write what changed (after ``finish``); (created, updated, deleted)."""
        exemptions = ExemptionMatcher(self.cluster.pk, now)
        silences = list(Silence.objects.filter(ends_at__gt=now))
        for running in self._running.values():
            if running.priced:
                running.episode.evidence["cost_exact"] = str(running.cost_exact)
        for episode in [*self.new.values(), *self.touched.values()]:
            workload = workloads.get(episode.workload_id or 0)
            subject = (
                workload.subject()
                if workload is not None
                else Subject(
                    cluster_queue_id=episode.cluster_queue_id,
                    local_queue_id=episode.local_queue_id,
                    namespace=episode.namespace,
                )
            )
            episode.exempt_reason = exemptions.reason(subject)[:300]
            episode.exempt = bool(episode.exempt_reason)
            ends = [silence.ends_at for silence in silences if silence.matches(episode)]
            if episode.silenced_until is not None:
                ends.append(episode.silenced_until)
            episode.silenced_until = max(ends) if ends else None
            episode.summary = describe(episode, workload)[:500]
            episode.updated_at = now
        deleted = 0
        if self.dropped:
            deleted = Episode.objects.filter(pk__in=self.dropped).delete()[0]
        if self.touched:
            # Resolutions first, so a subject's new episode never meets its old one still open.
            ordered = sorted(self.touched.values(), key=lambda e: e.resolved_at is None)
            update_episodes(ordered, EPISODE_UPDATE_FIELDS)
        if self.new:
            Episode.objects.bulk_create(list(self.new.values()), batch_size=1000)
        return len(self.new), len(self.touched), deleted


def _shape(finding: Finding) -> tuple[object, ...]:
    """What a window's finding says but for its GPUs' activities: two windows of one subject
    with the same shape move its episode on the same way (``EpisodeBook._run_through``)."""
    return (
        finding.subject(),
        finding.idle_gpus,
        finding.held_gpus,
        finding.priced,
        finding.thresholds,
        [(gpu, idle) for gpu, (_activity, idle) in finding.per_gpu.items()],
        finding.facts,
    )


def _new_gpu_entry(key: str) -> dict[str, object]:
    return {
        "uuid": uuid_of(key),
        "minutes": 0.0,
        "telemetry_minutes": 0.0,
        "idle_minutes": 0.0,
        "sum": 0.0,
        "max": None,
    }


@dataclass
class _Running:
    """An episode's exact cost (written into its evidence by ``save``) and the subject its last
    window named."""

    episode: Episode
    cost_exact: Decimal
    priced: bool = False  # a priced window was added (the evidence keeps ``cost_exact``)
    subject: tuple[object, ...] | None = None  # what the last window named (``_identify``)


@lru_cache(maxsize=4096)
def _gpu_hours(value: float) -> Decimal:
    """GPU-hours as the exact decimal of their float rounded to 9 places (the cost's terms)."""
    return Decimal(repr(round(value, 9)))
