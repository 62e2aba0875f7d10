"""The ratios of docs/architecture.md "Figures": no telemetry is never 0 %, and never idle."""

import pytest

from core import ratios


def test_utilization_is_active_over_allocated_with_telemetry():
    assert ratios.utilization(3.0, 4.0) == pytest.approx(0.75)


def test_a_ratio_without_a_denominator_is_unknown_not_zero():
    assert ratios.utilization(0.0, 0.0) is None
    assert ratios.telemetry_coverage(0.0, 0.0) is None
    assert ratios.ratio(None, 4.0) is None
    assert ratios.ratio(1.0, None) is None


def test_telemetry_coverage_is_allocated_with_telemetry_over_allocated():
    assert ratios.telemetry_coverage(6.0, 8.0) == pytest.approx(0.75)


def test_no_telemetry_hours_never_go_negative():
    assert ratios.no_telemetry_gpu_hours(8.0, 6.0) == pytest.approx(2.0)
    # Float sums can leave telemetry a hair above allocated.
    assert ratios.no_telemetry_gpu_hours(8.0, 8.0000001) == 0.0


def test_allocation_rate_and_mean_gpus_are_ratios_of_gpu_hours():
    assert ratios.allocation_rate(19.0, 48.0) == pytest.approx(19 / 48)
    assert ratios.allocation_rate(3.0, 0.0) is None  # no capacity or quota: unknown
    assert ratios.mean_gpus(15.0, 3.0) == pytest.approx(5.0)
