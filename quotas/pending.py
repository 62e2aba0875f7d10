"""Why a workload is pending, said once for every page and the quota-change preview.

Kueue's own answer is its pending message: "couldn't assign flavors to pod set main:
insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed", one clause per
flavor it tried. The pages say "needs 16 nvidia.com/gpu on h100: 8 available (4 free in quota,
the cohort can lend 4), 8 short". ``N more needed`` is Kueue's shortfall against what the queue
can use (its free quota plus what its cohort can lend); the free quota is the flavor's nominal
minus its usage in the queue's newest samples (``quotas.now``), the rest is what the cohort
lends.

The flavors Kueue names are the ones it tried; the others its node selector or affinity ruled
out, or Kueue did not reach. So a workload Kueue says is short is short now, whatever our own
model of the quota says, and a quota change admits it when it gives the queue at least the
shortfall more room on one of those flavors (``PendingReason.fits_with``). A message that
names no shortfall says quota is not what holds the workload back (backoff, admission checks,
an inactive queue): the pages show Kueue's message, and the preview says quota allows it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from quotas.models import Workload
from quotas.now import QueueNow

SHORTFALL = re.compile(
    r"insufficient (?:unused )?quota for (?P<resource>[\w./-]+) in flavor (?P<flavor>[\w./-]+),"
    r" (?P<more>\d+(?:\.\d+)?) more needed"
)
_EPSILON = 1e-9


def amount(value: float) -> str:
    """A number of GPUs in a sentence: whole numbers plain, others to one decimal."""
    if abs(value - round(value)) < _EPSILON:
        return f"{round(value):,}"
    return f"{value:,.1f}"


@dataclass(frozen=True)
class Shortfall:
    resource: str
    flavor: str
    more: float


def shortfalls(message: str) -> list[Shortfall]:
    """Every "insufficient quota … N more needed" clause of a Kueue pending message."""
    return [
        Shortfall(match["resource"], match["flavor"], float(match["more"]))
        for match in SHORTFALL.finditer(message or "")
    ]


@dataclass(frozen=True)
class FlavorShort:
    """One flavor Kueue tried: what the workload needs there and how much it lacks."""

    resource: str
    flavor: str
    needs: float
    short: float
    # The queue's free quota of the flavor now; None when its samples do not say.
    free: float | None = None

    @property
    def available(self) -> float:
        return max(self.needs - self.short, 0.0)

    def sentence(self) -> str:
        text = f"needs {amount(self.needs)} {self.resource} on {self.flavor}: "
        if self.free is None:
            text += f"{amount(self.available)} available"
        else:
            free = min(self.free, self.available)
            lend = max(self.available - free, 0.0)
            text += (
                f"{amount(self.available)} available ({amount(free)} free in quota, "
                f"the cohort can lend {amount(lend)})"
            )
        return f"{text}, {amount(self.short)} short"


@dataclass(frozen=True)
class PendingReason:
    """Why a pending workload waits: Kueue's shortfalls, one per flavor it tried."""

    shorts: tuple[FlavorShort, ...] = ()

    @property
    def text(self) -> str:
        """The sentence every page shows ("" when quota is not what holds it back)."""
        return "; ".join(short.sentence() for short in self.shorts)

    @property
    def quota_bound(self) -> bool:
        return bool(self.shorts)

    def __str__(self) -> str:
        return self.text

    def fits_with(self, more_room: Mapping[str, float]) -> str | None:
        """The first flavor Kueue tried on which ``more_room`` (flavor → GPUs of room a quota
        change adds) covers the shortfall; None when none does."""
        for short in self.shorts:
            if more_room.get(short.flavor, 0.0) >= short.short - _EPSILON:
                return short.flavor
        return None

    def still_short(self, more_room: Mapping[str, float]) -> float:
        """The smallest shortfall left on a flavor Kueue tried, after ``more_room``."""
        return min(
            (max(short.short - more_room.get(short.flavor, 0.0), 0.0) for short in self.shorts),
            default=0.0,
        )


def explain(message: str, requested: float, free: Mapping[str, float]) -> PendingReason:
    """Why a workload requesting ``requested`` GPUs waits, from Kueue's ``message``.

    ``free`` is flavor → the queue's nominal minus its usage now (``free_in_quota``); a flavor
    it does not name says nothing about the split between quota and cohort.
    """
    return PendingReason(
        tuple(
            FlavorShort(short.resource, short.flavor, requested, short.more, free.get(short.flavor))
            for short in shortfalls(message)
        )
    )


def free_in_quota(found: QueueNow | None) -> dict[str, float]:
    """Flavor → the queue's nominal minus its usage in its newest samples (never below 0)."""
    if found is None:
        return {}
    return {
        flavor: max(values["nominal"] - values["total"], 0.0)
        for flavor, values in found.flavors.items()
    }


def pending_reason(workload: Workload, free: Mapping[str, float]) -> PendingReason:
    """``explain`` for a pending workload (its Kueue message and requested GPUs)."""
    return explain(workload.state_message, float(workload.requested_gpus or 0), free)


def short_reason(message: str, requested: float, free: Mapping[str, float]) -> str:
    """The sentence of ``explain`` ("" when the message names no shortfall)."""
    return explain(message, requested, free).text


def workload_reason(workload: Workload, free: Mapping[str, float]) -> str:
    """The sentence of ``pending_reason``: what My teams, the team, queue and workload pages and
    the quota-change preview show ("" when the message names no shortfall)."""
    return pending_reason(workload, free).text
