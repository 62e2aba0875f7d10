"""What each scheduler calls the product's concepts, so a page or an alert speaks its source's
language.

The product reads every quota source into Kueue's concepts (docs/architecture.md "Quota
sources"); a page about one object names it as the cluster's own tools do: a Volcano queue is a
"Queue" whose nominal quota is its ``deserved``, its gang a "PodGroup". Pages listing several
clusters name each row's kind beside it. ``words_for`` never fails: an unknown scheduler reads
as Kueue's words.
"""

from __future__ import annotations

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
