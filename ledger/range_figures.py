"""The read layer's value type: the figures of one group over a range, and their ratios.

``Figures`` holds the rollup figures (docs/architecture.md "Figures") summed over the hours a
range covers; ``FIGURES`` is the one tuple of their names, which are also the ``HourlyRollup``
columns (``HourlyRollup.FIGURES``). ``HourlyRollupQuerySet.figures`` / ``total`` / ``hourly`` /
``series`` fill it; the pages, charts, chargeback, OpenCost and the API read it. Ratios are
properties computed with the formulas of ``core.ratios`` from the summed hours, never summed
themselves, so a ratio of a total is the ratio of the total's hours.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from core import ratios as formulas

F = TypeVar("F", bound="Figures")

# The one rollup figure that is not summed over hours: the largest of the rows' peaks.
PEAK_FIGURES = frozenset({"peak_allocated_gpus"})


@dataclass
class Figures:
    """Summed GPU-hours of one group over a range. Figures not read stay 0."""

    # What add() combines: every figure (set below the class); a subclass that only ever
    # reads some (the chargeback's Charge) narrows them, as add() runs once per group.
    SUMMED: ClassVar[tuple[str, ...]] = ()
    PEAKS: ClassVar[tuple[str, ...]] = ()

    capacity_gpu_hours: float = 0.0
    allocated_gpu_hours: float = 0.0
    telemetry_gpu_hours: float = 0.0
    active_gpu_hours: float = 0.0
    idle_gpu_hours: float = 0.0
    shared_gpu_hours: float = 0.0
    fallback_gpu_hours: float = 0.0
    tensor_active_gpu_hours: float = 0.0
    tensor_covered_gpu_hours: float = 0.0
    gpu_util_gpu_hours: float = 0.0
    gpu_util_covered_gpu_hours: float = 0.0
    busy_not_working_gpu_hours: float = 0.0
    nominal_gpu_hours: float = 0.0
    borrowed_gpu_hours: float = 0.0
    lent_gpu_hours: float = 0.0
    pending_gpu_hours: float = 0.0
    # The largest allocated GPUs of any row in one window: per (flavor, GPU model) split, so of
    # a group spanning several splits it is a lower bound of the group's peak.
    peak_allocated_gpus: float = 0.0

    @classmethod
    def from_values(
        cls: type[F], values: Mapping[str, Any], prefix: str = "", names: Iterable[str] = ()
    ) -> F:
        """Figures from ``{prefix + name: value}`` (an aggregate row) for ``names`` (default:
        all); the others, and nulls, are 0."""
        return cls(**{name: values[prefix + name] or 0.0 for name in names or FIGURES})

    @classmethod
    def of(cls, row: Any) -> Figures:
        """The figures of one object with the figure attributes (an ``HourlyRollup`` row)."""
        return cls(**{name: float(getattr(row, name) or 0.0) for name in FIGURES})

    def add(self, other: Figures) -> None:
        """Add another group's or period's figures to these (peaks: the larger one)."""
        # On the instance dicts: this runs per group and period of a chargeback (25,000 times
        # for a year by workload), where getattr/setattr cost twice as much.
        mine, theirs = vars(self), vars(other)
        for name in self.SUMMED:
            mine[name] += theirs[name]
        for name in self.PEAKS:
            mine[name] = max(mine[name], theirs[name])

    @classmethod
    def sum(cls, parts: Iterable[Figures]) -> Figures:
        total = cls()
        for part in parts:
            total.add(part)
        return total

    # --- Ratios (core.ratios) -------------------------------------------------------------

    @property
    def no_telemetry_gpu_hours(self) -> float:
        return formulas.no_telemetry_gpu_hours(self.allocated_gpu_hours, self.telemetry_gpu_hours)

    @property
    def utilization(self) -> float | None:
        return formulas.utilization(self.active_gpu_hours, self.telemetry_gpu_hours)

    @property
    def telemetry_coverage(self) -> float | None:
        return formulas.telemetry_coverage(self.telemetry_gpu_hours, self.allocated_gpu_hours)

    @property
    def idle_share(self) -> float | None:
        return formulas.idle_share(self.idle_gpu_hours, self.allocated_gpu_hours)

    @property
    def tensor_activity(self) -> float | None:
        return formulas.tensor_activity(self.tensor_active_gpu_hours, self.tensor_covered_gpu_hours)

    @property
    def mean_gpu_util(self) -> float | None:
        return formulas.mean_gpu_util(self.gpu_util_gpu_hours, self.gpu_util_covered_gpu_hours)

    @property
    def busy_share(self) -> float | None:
        return formulas.busy_share(self.busy_not_working_gpu_hours, self.allocated_gpu_hours)

    @property
    def allocation_rate(self) -> float | None:
        """allocated / capacity (fleet, node and flavor rows carry capacity)."""
        return formulas.allocation_rate(self.allocated_gpu_hours, self.capacity_gpu_hours)

    @property
    def quota_allocation_rate(self) -> float | None:
        """allocated / nominal quota (queue, team, cohort rows; above 1 = borrowing)."""
        return formulas.allocation_rate(self.allocated_gpu_hours, self.nominal_gpu_hours)

    def mean_gpus(self, name: str, hours: float) -> float | None:
        """A GPU-hour figure as the mean GPUs over ``hours`` (``HourSpan.count``)."""
        return formulas.mean_gpus(getattr(self, name), hours)


FIGURES: tuple[str, ...] = tuple(field.name for field in fields(Figures))
Figures.SUMMED = tuple(name for name in FIGURES if name not in PEAK_FIGURES)
Figures.PEAKS = tuple(name for name in FIGURES if name in PEAK_FIGURES)
