"""An episode's figures over the hours that have ended, the cut every page uses.

An episode adds each window as it is evaluated, so its stored totals include the hour in
progress. The pages count only hours that have ended (README "Which hours a range counts"), so
an open episode would say more wasted GPU-hours and cost than its workload's page for the same
hours. The episode therefore keeps, in its evidence, what its newest hour added
(``tally_newest_hour``); ``through_ended_hours`` takes that out while the hour is in progress
and states the cut ("through 09:00"). The cost is the rate card's price of each window's
GPU-hours (``alerts.pricing``, the precedence of ``ledger.chargeback.pricing``), as the
chargeback and the workload page price their hours (docs/architecture.md "Hoarding alerts").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from core.timewindows import hour_floor

# The evidence key of the newest hour's share: {"hour", "idle_gpu_hours", "held_gpu_hours",
# "cost_exact"}.
NEWEST_HOUR = "newest_hour"
COST_PLACES = Decimal("0.0001")  # Episode.cost's decimal places


def tally_newest_hour(
    evidence: dict[str, Any], hour: datetime, idle: float, held: float, cost: Decimal
) -> None:
    """Add one window of ``hour`` to the newest hour's share (a later hour starts it anew)."""
    stamp = hour.isoformat()
    newest = evidence.get(NEWEST_HOUR)
    if not isinstance(newest, dict) or newest.get("hour") != stamp:
        if isinstance(newest, dict) and str(newest.get("hour", "")) > stamp:
            return  # an older window re-evaluated: the newest hour's share stays as it is
        newest = evidence[NEWEST_HOUR] = {
            "hour": stamp,
            "idle_gpu_hours": 0.0,
            "held_gpu_hours": 0.0,
            "cost_exact": "0",
        }
    newest["idle_gpu_hours"] += idle
    newest["held_gpu_hours"] += held
    newest["cost_exact"] = str(Decimal(newest["cost_exact"]) + cost)


def join_newest_hours(later: dict[str, Any], earlier: object) -> None:
    """When an episode takes over an earlier one: their newest hours' shares, added when they
    are the same hour, else the later one's (the earlier one's is then an older hour)."""
    if not isinstance(earlier, dict):
        return
    own = later.get(NEWEST_HOUR)
    if not isinstance(own, dict):
        later[NEWEST_HOUR] = dict(earlier)
    elif own.get("hour") == earlier.get("hour"):
        own["idle_gpu_hours"] += float(earlier.get("idle_gpu_hours") or 0.0)
        own["held_gpu_hours"] += float(earlier.get("held_gpu_hours") or 0.0)
        own["cost_exact"] = str(
            Decimal(own["cost_exact"]) + Decimal(str(earlier.get("cost_exact") or "0"))
        )


@dataclass(frozen=True)
class Ended:
    """An episode's wasted and held GPU-hours and cost through ``through``."""

    through: datetime
    idle_gpu_hours: float
    held_gpu_hours: float
    cost: Decimal
    # The figures leave out the hour in progress (they grow once it ends).
    cut: bool


def through_ended_hours(episode: Any, now: datetime) -> Ended:
    """The episode's figures over the hours that ended by ``now`` (see the module docstring)."""
    end = episode.resolved_at or episode.evaluated_until
    newest = (episode.evidence or {}).get(NEWEST_HOUR)
    cut_at = hour_floor(now)
    if isinstance(newest, dict) and datetime.fromisoformat(newest["hour"]) >= cut_at:
        stored = (episode.evidence or {}).get("cost_exact")
        total = Decimal(stored) if stored is not None else Decimal(episode.cost)
        cost = total - Decimal(newest["cost_exact"])
        return Ended(
            through=min(datetime.fromisoformat(newest["hour"]), end),
            idle_gpu_hours=max(0.0, episode.idle_gpu_hours - newest["idle_gpu_hours"]),
            held_gpu_hours=max(0.0, episode.held_gpu_hours - newest["held_gpu_hours"]),
            cost=max(Decimal(0), cost).quantize(COST_PLACES),
            cut=True,
        )
    return Ended(
        through=end,
        idle_gpu_hours=episode.idle_gpu_hours,
        held_gpu_hours=episode.held_gpu_hours,
        cost=Decimal(episode.cost),
        cut=False,
    )
