"""Chargeback basics: parameters, windows and periods, money rounding, the ``Charge`` figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import ClassVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.range_figures import Figures

GROUP_SCOPES: dict[str, str] = {
    "team": RollupScope.TEAM,
    "cluster_queue": RollupScope.CLUSTER_QUEUE,
    "local_queue": RollupScope.LOCAL_QUEUE,
    "cohort": RollupScope.COHORT,
    "namespace": RollupScope.NAMESPACE,
    "workload": RollupScope.WORKLOAD,
    "flavor": RollupScope.FLAVOR,
    "node": RollupScope.NODE,
    "cluster": RollupScope.FLEET,
}
CAPACITY_GROUPS = frozenset({"cluster", "node", "flavor"})
# Groupings a team lead sees in full: fleet-level aggregates (quotas/access.py).
AGGREGATE_GROUPS = frozenset({"cohort", "cluster", "node", "flavor"})
STEPS = ("none", "hour", "day", "month")
MODELS = ("usage", "quota")
UNATTRIBUTED = "(unattributed)"
CENT = Decimal("0.01")
HOURS_DIGITS = 6
# Zero rows for groups without rollups are padded per period; past this many the request is
# refused (a 1,000-queue fleet by hour over a year would be ~9 million rows).
MAX_PADDED_ROWS = 500_000

# The figures the chargeback reads: those its covering index carries, so a year by team stays
# an index-only scan on PostgreSQL (bench/chargeback.py).
CHARGEBACK_INDEX = "fleet_rollup_chargeback"
CHARGEBACK_FIGURES = HourlyRollup.figures_in_index(CHARGEBACK_INDEX)
HOUR_COLUMNS = (
    "allocated_gpu_hours",
    "active_gpu_hours",
    "idle_gpu_hours",
    "no_telemetry_gpu_hours",
    "utilization",
    "telemetry_coverage",
    "borrowed_gpu_hours",
    "lent_gpu_hours",
    "nominal_gpu_hours",
    "pending_gpu_hours",
)
COST_COLUMNS = ("allocated", "borrowing", "lending_credit", "total")


class ChargebackError(ValueError):
    """A request that cannot be answered; ``parameter`` names the culprit."""

    def __init__(self, parameter: str, reason: str) -> None:
        super().__init__(f"{parameter}: {reason}")
        self.parameter = parameter
        self.reason = reason


def chargeback_model() -> str:
    model = settings.GPULEDGER_CHARGEBACK_MODEL
    if model not in MODELS:
        raise ImproperlyConfigured(
            f"GPULEDGER_CHARGEBACK_MODEL={model!r} must be one of {', '.join(MODELS)}"
        )
    return model


def utc_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_decimal(hours: float) -> Decimal:
    return Decimal(repr(float(hours)))


def cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def ceil_hour(moment: datetime) -> datetime:
    floored = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return floored if floored == moment else floored + timedelta(hours=1)


def is_whole_hour(moment: datetime) -> bool:
    return moment.minute == 0 and moment.second == 0 and moment.microsecond == 0


def period_floor(moment: datetime, step: str) -> datetime:
    moment = moment.astimezone(UTC)
    if step == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    if step == "day":
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if step == "month":
        return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    raise ValueError(step)


def next_period(moment: datetime, step: str) -> datetime:
    if step == "hour":
        return moment + timedelta(hours=1)
    if step == "day":
        return moment + timedelta(days=1)
    if moment.month == 12:
        return moment.replace(year=moment.year + 1, month=1)
    return moment.replace(month=moment.month + 1)


def period_starts(start: datetime, end: datetime, step: str) -> list[datetime]:
    """The UTC boundaries of the periods that overlap ``[start, end)``."""
    starts = []
    cursor = period_floor(start, step)
    while cursor < end:
        starts.append(cursor)
        cursor = next_period(cursor, step)
    return starts


@dataclass
class Charge(Figures):
    """The read layer's figures of one group (and period), plus their unrounded money."""

    SUMMED: ClassVar[tuple[str, ...]] = CHARGEBACK_FIGURES

    cost_allocated: Decimal = field(default_factory=Decimal)
    cost_borrowing: Decimal = field(default_factory=Decimal)
    cost_lending_credit: Decimal = field(default_factory=Decimal)
    # Charged GPU-hours that no rate card priced (counted at 0.00): a row is ``priced`` only
    # when this stays 0 (and a card exists at all).
    unpriced_gpu_hours: float = 0.0

    def add(self, other: Figures) -> None:
        super().add(other)
        if isinstance(other, Charge):
            self.cost_allocated += other.cost_allocated
            self.cost_borrowing += other.cost_borrowing
            self.cost_lending_credit += other.cost_lending_credit
            self.unpriced_gpu_hours += other.unpriced_gpu_hours

    def add_rounded_costs(self, other: Charge) -> None:
        """Sum hours, and money as printed (rounded per component), for totals."""
        Figures.add(self, other)
        self.unpriced_gpu_hours += other.unpriced_gpu_hours
        self.cost_allocated += cents(other.cost_allocated)
        self.cost_borrowing += cents(other.cost_borrowing)
        self.cost_lending_credit += cents(other.cost_lending_credit)

    def hours(self, with_capacity: bool) -> dict[str, float | None]:
        values: dict[str, float | None] = {}
        if with_capacity:
            values["capacity_gpu_hours"] = round(self.capacity_gpu_hours, HOURS_DIGITS)
        for name in HOUR_COLUMNS:
            value = getattr(self, name)
            values[name] = None if value is None else round(value, HOURS_DIGITS)
        return values

    def money(self) -> dict[str, Decimal]:
        allocated = cents(self.cost_allocated)
        borrowing = cents(self.cost_borrowing)
        lending = cents(self.cost_lending_credit)
        return {
            "allocated": allocated,
            "borrowing": borrowing,
            "lending_credit": lending,
            "total": allocated + borrowing - lending,
        }
