"""Why a workload waits, said short: the flavor, how much it needs and how much there is.

Kueue's pending message reads "couldn't assign flavors to pod set main: insufficient unused
quota for nvidia.com/gpu in flavor h100, 8 more needed"; the page says "needs 16 nvidia.com/gpu
on h100: 8 available (4 free in quota, the cohort can lend 4), 8 short". ``N more needed`` is
Kueue's shortfall against what the queue can use (its free quota plus what its cohort can
lend); the free quota is the flavor's nominal minus its usage in the queue's newest sample, the
rest is what the cohort lends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dashboard.templatetags.formatting import figure
from quotas.models import Workload
from quotas.now import QueueNow

SHORTFALL = re.compile(
    r"insufficient (?:unused )?quota for (?P<resource>[\w./-]+) in flavor (?P<flavor>[\w./-]+),"
    r" (?P<more>\d+(?:\.\d+)?) more needed"
)


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


def short_reason(message: str, requested: float, free_in_quota: dict[str, float]) -> str:
    """One clause per flavor Kueue tried; "" when the message names no shortfall.

    ``free_in_quota`` is flavor → nominal minus usage now (unknown flavors say nothing about
    the split between quota and cohort).
    """
    parts = []
    for short in shortfalls(message):
        available = max(requested - short.more, 0.0)
        clause = f"needs {figure(requested)} {short.resource} on {short.flavor}: "
        free = free_in_quota.get(short.flavor)
        if free is None:
            clause += f"{figure(available)} available"
        else:
            free = min(free, available)
            lend = max(available - free, 0.0)
            clause += (
                f"{figure(available)} available ({figure(free)} free in quota, "
                f"the cohort can lend {figure(lend)})"
            )
        parts.append(f"{clause}, {figure(short.more)} short")
    return "; ".join(parts)


def free_in_quota(found: QueueNow | None) -> dict[str, float]:
    """Flavor → the queue's nominal minus its usage in its newest samples (never below 0)."""
    if found is None:
        return {}
    return {
        flavor: max(values["nominal"] - values["total"], 0.0)
        for flavor, values in found.flavors.items()
    }


def workload_reason(workload: Workload, free: dict[str, float]) -> str:
    """``short_reason`` of a pending workload's Kueue message ("" when it names no shortfall)."""
    return short_reason(workload.state_message, float(workload.requested_gpus or 0), free)
