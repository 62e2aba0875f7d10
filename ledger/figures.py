"""The figure registry: one entry per usage figure, written once (docs/architecture.md "Figures").

Each ``Figure`` says which usage rows it counts (its per-row rule, as a ``Q`` for the ORM, as SQL
for PostgreSQL's fast rollup path and as a Python test for a row already read) and what it sums
over them, with its label, unit, caption and the README anchor that defines it. Everything that
turns ``GpuUsage`` rows into a figure reads the rule from here: the rollups (both paths,
``ledger/rollup/portable.py`` and ``ledger/rollup/postgres.py``), ``ledger/rollup/verify.py``,
the figures "now" (``ledger/now.py``, read by the overview, the busy page and the GPU states).
``tests/ledger/test_figures.py`` checks that the three forms of every rule select the same rows.

The thresholds come from settings, read once per query (``thresholds``):

- idle: SM activity below ``GPULEDGER_IDLE_THRESHOLD``, on allocated rows with telemetry only.
- busy but not working: GPU_UTIL at or above ``GPULEDGER_BUSY_GPU_UTIL`` while **SM_ACTIVE**
  is below ``GPULEDGER_BUSY_SM_ACTIVE``. Only SM_ACTIVE decides it, "now" and over a range
  alike: GR_ENGINE_ACTIVE, like GPU_UTIL, only says a kernel ran, so a row whose activity came
  from GR_ENGINE_ACTIVE is never "busy but not working" (a figure a finance reader can defend:
  it never calls work wasted on a reading that cannot tell).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.conf import settings
from django.db.models import Expression, F, Q, Value

from fleet.choices import ActivitySource

README = "README.md#what-the-numbers-mean"


class Thresholds(NamedTuple):
    """The settings that decide "idle" and "busy but not working", read once per query."""

    idle: float
    busy_gpu_util: float
    busy_sm_active: float


def thresholds() -> Thresholds:
    return Thresholds(
        idle=float(settings.GPULEDGER_IDLE_THRESHOLD),
        busy_gpu_util=float(settings.GPULEDGER_BUSY_GPU_UTIL),
        busy_sm_active=float(settings.GPULEDGER_BUSY_SM_ACTIVE),
    )


Row = Mapping[str, Any]


@dataclass(frozen=True)
class RowRule:
    """Which usage rows count: the same predicate three ways, built from the same thresholds.

    ``sql`` is over the columns of ``ledger_gpuusage`` (or a table with the same names) and
    returns its text with ``%s`` placeholders and their parameters.
    """

    q: Callable[[Thresholds], Q]
    sql: Callable[[Thresholds], tuple[str, list[Any]]]
    test: Callable[[Row, Thresholds], bool]


def _both(*rules: RowRule) -> RowRule:
    def q(limits: Thresholds) -> Q:
        found = Q()
        for rule in rules:
            found &= rule.q(limits)
        return found

    def sql(limits: Thresholds) -> tuple[str, list[Any]]:
        parts = [rule.sql(limits) for rule in rules]
        return " AND ".join(f"({text})" for text, _ in parts), [p for _, ps in parts for p in ps]

    def test(row: Row, limits: Thresholds) -> bool:
        return all(rule.test(row, limits) for rule in rules)

    return RowRule(q, sql, test)


def _fixed(q: Q, sql: str, test: Callable[[Row], bool]) -> RowRule:
    return RowRule(lambda _limits: q, lambda _limits: (sql, []), lambda row, _limits: test(row))


EVERY_ROW = _fixed(Q(), "TRUE", lambda row: True)
ALLOCATED = _fixed(Q(allocated=True), "allocated", lambda row: bool(row["allocated"]))
NOT_ALLOCATED = _fixed(Q(allocated=False), "NOT allocated", lambda row: not row["allocated"])
HAS_ACTIVITY = _fixed(
    Q(activity__isnull=False), "activity IS NOT NULL", lambda row: row["activity"] is not None
)
NO_ACTIVITY = _fixed(
    Q(activity__isnull=True), "activity IS NULL", lambda row: row["activity"] is None
)
TELEMETRY = _both(ALLOCATED, HAS_ACTIVITY)
IDLE = _both(
    ALLOCATED,
    RowRule(
        lambda limits: Q(activity__lt=limits.idle),
        lambda limits: ("activity < %s", [limits.idle]),
        lambda row, limits: row["activity"] is not None and row["activity"] < limits.idle,
    ),
)
SHARED = _both(ALLOCATED, _fixed(Q(shared=True), "shared", lambda row: bool(row["shared"])))
FALLBACK = _both(
    TELEMETRY,
    RowRule(
        lambda _limits: Q(activity_source=ActivitySource.GR_ENGINE_ACTIVE),
        lambda _limits: ("activity_source = %s", [ActivitySource.GR_ENGINE_ACTIVE.value]),
        lambda row, _limits: row["activity_source"] == ActivitySource.GR_ENGINE_ACTIVE,
    ),
)
TENSOR = _both(
    ALLOCATED,
    _fixed(
        Q(pipe_tensor_active__isnull=False),
        "pipe_tensor_active IS NOT NULL",
        lambda row: row["pipe_tensor_active"] is not None,
    ),
)
UTIL = _both(
    ALLOCATED,
    _fixed(
        Q(gpu_util__isnull=False), "gpu_util IS NOT NULL", lambda row: row["gpu_util"] is not None
    ),
)
BUSY_NOT_WORKING = _both(
    ALLOCATED,
    RowRule(
        lambda limits: Q(gpu_util__gte=limits.busy_gpu_util, sm_active__lt=limits.busy_sm_active),
        lambda limits: (
            "gpu_util >= %s AND sm_active < %s",
            [limits.busy_gpu_util, limits.busy_sm_active],
        ),
        lambda row, limits: (
            row["gpu_util"] is not None
            and row["sm_active"] is not None
            and row["gpu_util"] >= limits.busy_gpu_util
            and row["sm_active"] < limits.busy_sm_active
        ),
    ),
)
NO_TELEMETRY_HELD = _both(ALLOCATED, NO_ACTIVITY)
NO_TELEMETRY_FREE = _both(NOT_ALLOCATED, NO_ACTIVITY)


@dataclass(frozen=True)
class Summed:
    """What a figure sums over its rows, per row: the ORM expression, its SQL and its value."""

    expression: Callable[[], Expression | str]
    sql: str
    value: Callable[[Row], float]


GPUS = Summed(lambda: "gpus", "gpus", lambda row: float(row["gpus"]))
CAPACITY = Summed(lambda: "capacity_gpus", "capacity_gpus", lambda row: float(row["capacity_gpus"]))
ACTIVE = Summed(
    lambda: F("activity") * F("gpus"),
    "activity * gpus",
    lambda row: float(row["activity"]) * float(row["gpus"]),
)
TENSOR_ACTIVE = Summed(
    lambda: F("pipe_tensor_active") * F("gpus"),
    "pipe_tensor_active * gpus",
    lambda row: float(row["pipe_tensor_active"]) * float(row["gpus"]),
)
UTIL_SHARE = Summed(
    lambda: F("gpu_util") * F("gpus") / Value(100.0),
    "gpu_util * gpus / 100.0",
    lambda row: float(row["gpu_util"]) * float(row["gpus"]) / 100.0,
)


@dataclass(frozen=True)
class Figure:
    """One usage figure: the rollup field, its per-window column, its rule and its words."""

    name: str
    column: str
    rows: RowRule
    summed: Summed
    label: str
    unit: str
    caption: str
    anchor: str = README


FIGURES: tuple[Figure, ...] = (
    Figure(
        "capacity_gpu_hours",
        "f_capacity",
        EVERY_ROW,
        CAPACITY,
        "Capacity",
        "GPU-h",
        "Physical GPUs × hours; a MIG instance counts slices/7, time-slicing replicas add none.",
    ),
    Figure(
        "allocated_gpu_hours",
        "f_allocated",
        ALLOCATED,
        GPUS,
        "Allocated",
        "GPU-h",
        "GPUs held by running pods × hours.",
    ),
    Figure(
        "telemetry_gpu_hours",
        "f_telemetry",
        TELEMETRY,
        GPUS,
        "With telemetry",
        "GPU-h",
        "Allocated GPU-hours with a DCGM activity sample.",
    ),
    Figure(
        "active_gpu_hours",
        "f_active",
        TELEMETRY,
        ACTIVE,
        "Active",
        "GPU-h",
        "Σ SM activity × GPU-hours over allocated GPU-hours with telemetry.",
    ),
    Figure(
        "idle_gpu_hours",
        "f_idle",
        IDLE,
        GPUS,
        "Idle",
        "GPU-h",
        "Allocated GPU-hours whose SM activity is below the idle threshold; no data is never idle.",
    ),
    Figure(
        "shared_gpu_hours",
        "f_shared",
        SHARED,
        GPUS,
        "Time-sliced",
        "GPU-h",
        "Allocated GPU-hours of time-sliced GPUs (each pod's 1/n share).",
    ),
    Figure(
        "fallback_gpu_hours",
        "f_fallback",
        FALLBACK,
        GPUS,
        "GR_ENGINE fallback",
        "GPU-h",
        "GPU-hours with telemetry whose activity came from GR_ENGINE_ACTIVE.",
    ),
    Figure(
        "tensor_active_gpu_hours",
        "f_tensor",
        TENSOR,
        TENSOR_ACTIVE,
        "Tensor active",
        "GPU-h",
        "Σ PIPE_TENSOR_ACTIVE × GPU-hours over allocated rows that report it.",
    ),
    Figure(
        "tensor_covered_gpu_hours",
        "f_tensor_covered",
        TENSOR,
        GPUS,
        "Tensor covered",
        "GPU-h",
        "Allocated GPU-hours that report PIPE_TENSOR_ACTIVE.",
    ),
    Figure(
        "gpu_util_gpu_hours",
        "f_util",
        UTIL,
        UTIL_SHARE,
        "GPU_UTIL",
        "GPU-h",
        "Σ GPU_UTIL/100 × GPU-hours; ÷ GPU_UTIL-covered GPU-hours is the GPU-hour weighted mean.",
    ),
    Figure(
        "gpu_util_covered_gpu_hours",
        "f_util_covered",
        UTIL,
        GPUS,
        "GPU_UTIL covered",
        "GPU-h",
        "Allocated GPU-hours that report GPU_UTIL.",
    ),
    Figure(
        "busy_not_working_gpu_hours",
        "f_busy",
        BUSY_NOT_WORKING,
        GPUS,
        "Busy, not working",
        "GPU-h",
        "Allocated GPU-hours with GPU_UTIL at or above its threshold while SM_ACTIVE is below its.",
    ),
)
BY_NAME: dict[str, Figure] = {figure.name: figure for figure in FIGURES}


def sum_q(figure: Figure, limits: Thresholds) -> tuple[Expression | str, Q]:
    """``Sum(*sum_q(...))`` arguments: what the figure sums and its row filter, for the ORM."""
    return figure.summed.expression(), figure.rows.q(limits)


def sum_sql(figure: Figure, limits: Thresholds) -> tuple[str, list[Any]]:
    """``SUM(…) FILTER (WHERE …)`` of the figure over usage rows, for PostgreSQL."""
    where, params = figure.rows.sql(limits)
    if figure.rows is EVERY_ROW:
        return f"SUM({figure.summed.sql})", params
    return f"SUM({figure.summed.sql}) FILTER (WHERE {where})", params


def row_value(figure: Figure, row: Row, limits: Thresholds) -> float:
    """What one usage row (a mapping of its columns) adds to the figure, in GPUs."""
    return figure.summed.value(row) if figure.rows.test(row, limits) else 0.0
