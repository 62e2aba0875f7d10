"""The ratios of DESIGN "Figures", defined once for the pages, the API and the rollups.

Every ratio is ``None`` when its denominator is zero or unknown: "no telemetry" is never 0 %.
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
