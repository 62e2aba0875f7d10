"""The ratios of docs/architecture.md "Figures": the one place their formulas are written.

The pages, the API and the exports get them through the read layer's value type
(``ledger.range_figures.Figures``), which applies them to summed GPU-hours. Every ratio is ``None``
when its denominator is zero or unknown: "no telemetry" is never 0 %.
"""

from __future__ import annotations


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def utilization(active_gpu_hours: float, telemetry_gpu_hours: float) -> float | None:
    """active / allocated-with-telemetry."""
    return ratio(active_gpu_hours, telemetry_gpu_hours)


def telemetry_coverage(telemetry_gpu_hours: float, allocated_gpu_hours: float) -> float | None:
    """allocated-with-telemetry / allocated."""
    return ratio(telemetry_gpu_hours, allocated_gpu_hours)


def no_telemetry_gpu_hours(allocated_gpu_hours: float, telemetry_gpu_hours: float) -> float:
    """Allocated GPU-hours without a DCGM sample (never counted as idle)."""
    return max(allocated_gpu_hours - telemetry_gpu_hours, 0.0)


def idle_share(idle_gpu_hours: float, allocated_gpu_hours: float) -> float | None:
    """idle / allocated: the share of held GPU-hours spent below the idle threshold."""
    return ratio(idle_gpu_hours, allocated_gpu_hours)


def tensor_activity(tensor_active_gpu_hours: float, covered_gpu_hours: float) -> float | None:
    """Σ PIPE_TENSOR_ACTIVE × GPU-hours / GPU-hours that report it."""
    return ratio(tensor_active_gpu_hours, covered_gpu_hours)


def mean_gpu_util(gpu_util_gpu_hours: float, covered_gpu_hours: float) -> float | None:
    """Σ GPU_UTIL/100 × GPU-hours / GPU-hours that report it, 0-1."""
    return ratio(gpu_util_gpu_hours, covered_gpu_hours)


def busy_share(busy_not_working_gpu_hours: float, allocated_gpu_hours: float) -> float | None:
    """ "Busy but not working" GPU-hours / allocated."""
    return ratio(busy_not_working_gpu_hours, allocated_gpu_hours)


def allocation_rate(allocated_gpu_hours: float, available_gpu_hours: float) -> float | None:
    """allocated / capacity for the fleet, a node or a flavor; allocated / nominal quota for a
    queue or a team (above 1 = borrowing)."""
    return ratio(allocated_gpu_hours, available_gpu_hours)


def mean_gpus(gpu_hours: float, hours: float) -> float | None:
    """GPU-hours over a span as the mean number of GPUs during it."""
    return ratio(gpu_hours, hours)
