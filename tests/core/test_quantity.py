"""Kubernetes quantities: parsing, and the canonical form resource.Quantity's String() prints.

Expected strings are Kubernetes' own answers (apimachinery ``resource/quantity_test.go`` and
``kubectl get -o yaml`` after an apply), written out here, not computed by the code under test.
"""

from decimal import Decimal

import pytest

from core.quantity import (
    BINARY_SI,
    DECIMAL_SI,
    canonical_quantity,
    display_quantity,
    format_quantity,
)


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("0", "0"),
        ("0n", "0"),
        ("0Gi", "0"),
        ("16", "16"),
        ("12000m", "12"),
        ("1000m", "1"),
        ("1500m", "1500m"),
        ("1.5", "1500m"),
        ("0.5", "500m"),
        ("500m", "500m"),
        ("0.001", "1m"),
        ("1.001", "1001m"),
        ("1000", "1k"),
        ("1024", "1024"),
        ("1500000", "1500k"),
        ("1.1M", "1100k"),
        ("1000M", "1G"),
        ("1u", "1u"),
        ("100n", "100n"),
        # Finer than a nano-unit rounds up.
        ("0.1n", "1n"),
        ("64Gi", "64Gi"),
        ("256Gi", "256Gi"),
        ("1024Ki", "1Mi"),
        ("1536Mi", "1536Mi"),
        ("0.5Gi", "512Mi"),
        ("1.5Gi", "1536Mi"),
        ("1.5Ki", "1536"),
        # Binary quantities below 1024 print as decimal.
        ("0.5Ki", "512"),
        ("1e3", "1e3"),
        ("1E3", "1e3"),
        ("1.5e3", "1500"),
        ("1e-3", "1e-3"),
        ("2E", "2E"),
        (" 8 ", "8"),
    ],
)
def test_it_prints_the_canonical_form_kubernetes_prints(given: str, canonical: str) -> None:
    assert canonical_quantity(given) == canonical


def test_numbers_are_decimal_quantities() -> None:
    assert canonical_quantity(16) == "16"
    assert canonical_quantity(0.5) == "500m"


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "12x", "Gi", "1 Gi", None, True, "nan"])
def test_it_rejects_what_is_not_a_quantity(bad: object) -> None:
    with pytest.raises(ValueError):
        canonical_quantity(bad)


def test_stored_decimals_display_as_quantities_in_their_resource_unit() -> None:
    assert display_quantity(Decimal("40.000000"), "nvidia.com/gpu") == "40"
    assert display_quantity(Decimal("0.500000"), "cpu") == "500m"
    assert display_quantity(Decimal(256 * 2**30), "memory") == "256Gi"
    assert display_quantity(Decimal(1000), "memory") == "1k"
    assert display_quantity(None, "cpu") == ""
    assert format_quantity(Decimal(1536 * 2**20), BINARY_SI) == "1536Mi"
    assert format_quantity(Decimal(1536 * 2**20), DECIMAL_SI) == "1610612736"
