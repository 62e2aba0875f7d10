"""What each scheduler calls the product's concepts, so a page or an alert speaks its source's
language.

The product reads every quota source into Kueue's concepts (docs/architecture.md "Quota
sources"); a page about one object names it as the cluster's own tools do: a Volcano queue is a
"Queue" whose nominal quota is its ``deserved``, its gang a "PodGroup". Pages listing several
clusters name each row's kind beside it. ``words_for`` never fails: an unknown scheduler reads
as Kueue's words.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Words:
    scheduler: str  # the scheduler's name
    queue: str  # what the product calls a ClusterQueue
    cohort: str  # what the product calls a Cohort ("" where the source has none)
    workload: str  # what the product calls a Workload
    nominal: str  # the quota field that is the nominal quota
    ceiling: str  # the field that caps quota plus borrowing ("" where it is a separate limit)
    no_ceiling: str  # what an unset ceiling reads as

    @property
    def queue_kind(self) -> str:
        """A row's kind on a page of several clusters: "Kueue ClusterQueue", "Volcano Queue",
        "namespace ResourceQuota"."""
        if self.queue == self.scheduler:
            return f"namespace {self.queue}"
        return f"{self.scheduler} {self.queue}"

    @property
    def cohort_title(self) -> str:
        """The cohort word heading a page or chart: "Cohort", "Parent queue"."""
        return self.cohort[:1].upper() + self.cohort[1:]

    @property
    def cohort_kind(self) -> str:
        return f"{self.scheduler} {self.cohort}" if self.cohort else ""

    @property
    def workload_kind(self) -> str:
        return f"{self.scheduler} {self.workload}"


KUEUE = Words("Kueue", "ClusterQueue", "Cohort", "Workload", "nominal", "", "unlimited")
WORDS: dict[str, Words] = {
    "kueue": KUEUE,
    "volcano": Words(
        "Volcano", "Queue", "parent queue", "PodGroup", "deserved", "capability", "no capability"
    ),
    "kai": Words("KAI", "Queue", "parent queue", "PodGroup", "quota", "limit", "no limit"),
    # A namespace's GPU ResourceQuota(s) is its queue; its workloads are its pods' owners.
    "resourcequota": Words("ResourceQuota", "ResourceQuota", "", "Workload", "hard", "", ""),
}


def words_for(scheduler: str | None) -> Words:
    """The words of ``scheduler`` (a ``scheduler`` column's value); Kueue's when unknown."""
    return WORDS.get(scheduler or "", KUEUE)


def quota_text(words: Words, label: str, nominal: str, borrowing_limit: str, ceiling: str) -> str:
    """One quota as its scheduler writes it: Kueue's ``h100 8 / 16`` (flavor, nominal /
    borrowing limit); Volcano's ``deserved 40 · capability 56``, KAI's ``quota 16 · limit 24``
    (their quota names no flavor, and their cap is quota plus borrowing); a ResourceQuota's
    ``hard 8``. ``ceiling`` is nominal plus borrowing limit, "" when unset."""
    if words is KUEUE:
        return f"{label} {nominal} / {borrowing_limit}"
    if not words.ceiling:
        return f"{words.nominal} {nominal}"
    return f"{words.nominal} {nominal} · " + (
        f"{words.ceiling} {ceiling}" if ceiling else words.no_ceiling
    )


@dataclass(frozen=True)
class ListWords:
    """The words of a page listing the queues or cohorts of one or several schedulers.

    One scheduler on the page: its own words ("ClusterQueue", "Queue", "ResourceQuota"). Several:
    the neutral "queue" and "cohort / parent queue" in headings, each row naming its kind
    (``mixed``). An empty page reads as Kueue's. The one rule for every list page, so a Volcano-only
    fleet's queue list never says "ClusterQueue".
    """

    schedulers: tuple[str, ...]  # the schedulers present, sorted, unknown ones read as "kueue"

    @property
    def mixed(self) -> bool:
        return len(self.schedulers) > 1

    @property
    def words(self) -> Words:
        """The one scheduler's words; Kueue's on an empty page or a mixed one."""
        return words_for(self.schedulers[0]) if len(self.schedulers) == 1 else KUEUE

    @property
    def kueue_only(self) -> bool:
        """Kueue's quota columns (flavors, borrowing limits) apply to every row."""
        return not self.mixed and self.words is KUEUE

    @property
    def queue(self) -> str:
        """The queue word in a heading or a count: "ClusterQueue", "Queue", "queue"."""
        return "queue" if self.mixed else self.words.queue

    @property
    def queues_title(self) -> str:
        """The page title of a queue list: "ClusterQueues", "Queues", "ResourceQuotas"."""
        return f"{self.queue[:1].upper()}{self.queue[1:]}s"

    @property
    def cohort_heading(self) -> str:
        """The cohort column's heading: "Cohort", "Parent queue", "Cohort / parent queue"."""
        if self.mixed:
            return "Cohort / parent queue"
        return self.words.cohort_title or KUEUE.cohort

    @property
    def admitted(self) -> str:
        """What an "Admitted (quota)" column counts: "Kueue quota admitted to workloads",
        "Volcano quota admitted to PodGroups"; neutral on a mixed page."""
        if self.mixed:
            return "quota admitted to workloads"
        words = self.words
        owner = words.scheduler if words.queue == words.scheduler else f"{words.scheduler} quota"
        held_by = "workloads" if words.workload == KUEUE.workload else f"{words.workload}s"
        return f"{owner} admitted to {held_by}"

    @property
    def nominal(self) -> str:
        """What a summed nominal quota is: "Kueue nominal", "Volcano deserved", "KAI quota";
        neutral "nominal" on a mixed page."""
        if self.mixed:
            return "nominal"
        return f"{self.words.scheduler} {self.words.nominal}"

    def _kinds(self, kind: str) -> str:
        names = sorted({getattr(words_for(s), kind) for s in self.schedulers} - {""})
        names = [f"{name}s" for name in names] or [f"{getattr(KUEUE, kind)}s"]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

    @property
    def queue_kinds(self) -> str:
        """The kinds listed, plural: "Kueue ClusterQueues and Volcano Queues"."""
        return self._kinds("queue_kind")

    @property
    def cohort_kinds(self) -> str:
        """The cohort kinds listed, plural: "KAI parent queues and Kueue Cohorts" (sources with
        no cohorts left out)."""
        return self._kinds("cohort_kind")


def list_words(schedulers: Iterable[str | None]) -> ListWords:
    """The words of a page whose rows come from ``schedulers`` (``scheduler`` column values)."""
    return ListWords(tuple(sorted({s if s and s in WORDS else "kueue" for s in schedulers})))
