"""The one parser of a typed quota (``core.quantity.quota_quantity``): Kubernetes' grammar in
ASCII digits, a plausibility ceiling per resource, and nothing but ``QuantityError`` whatever it
is given (Hypothesis). Expected strings are written out by hand from Kubernetes' rules."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.quantity import (
    QuantityError,
    canonical_quantity,
    format_quantity,
    parse_quantity,
    quota_quantity,
    resource_kind,
)

GPU = "nvidia.com/gpu"
EXAMPLES = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- F1: huge quantities were a decimal.InvalidOperation (a 500) --------------------------------
@pytest.mark.parametrize(
    ("given", "printed"),
    [
        ("1e19", "10e18"),
        ("1e30", "1e30"),
        ("10Ei", "10Ei"),
        ("1234567890123456789012345678", "1234567890123456789012345678"),
        ("12345678901234567890123456789012", "12345678901234567890123456789012"),
    ],
)
def test_huge_quantities_print_instead_of_raising(given: str, printed: str) -> None:
    assert canonical_quantity(given) == printed


def test_format_quantity_keeps_every_digit_of_a_long_number() -> None:
    # 30 significant digits: the default 28-digit context rounded or raised here.
    assert format_quantity(Decimal("123456789012345678901234567891")) == (
        "123456789012345678901234567891"
    )
    assert format_quantity(Decimal("1e-30")) == "1n"


@pytest.mark.parametrize(
    ("given", "resource"),
    [
        ("1e19", GPU),
        ("1e30", GPU),
        ("10Ei", GPU),
        ("1234567890123456789012345678", GPU),
        ("1e30", "memory"),
        ("1e30", "cpu"),
        ("1e30", "pods"),
        ("10Pi", GPU),
        ("100001", GPU),
        ("100001", "nvidia.com/mig-1g.10gb"),
        ("10000001", "cpu"),
        ("65Pi", "memory"),
        ("2E", "pods"),
    ],
)
def test_above_the_ceiling_is_refused_naming_the_setting(given: str, resource: str) -> None:
    with pytest.raises(QuantityError, match="GPULEDGER_QUOTA_MAX_"):
        quota_quantity(given, resource)


def test_at_the_ceiling_is_accepted() -> None:
    assert quota_quantity("100000", GPU) == "100k"
    assert quota_quantity("100k", "nvidia.com/mig-1g.10gb") == "100k"
    assert quota_quantity("10M", "cpu") == "10M"
    assert quota_quantity("64Pi", "memory") == "64Pi"
    assert quota_quantity("1E", "pods") == "1E"
    assert quota_quantity("0", GPU) == "0"
    assert quota_quantity("12000m", GPU) == "12"


@override_settings(GPULEDGER_QUOTA_MAX_GPUS=64, GPULEDGER_QUOTA_MAX_MEMORY=2**40)
def test_the_ceilings_are_settings() -> None:
    assert quota_quantity("64", GPU) == "64"
    with pytest.raises(QuantityError, match="at most 64 GPUs"):
        quota_quantity("65", GPU)
    assert quota_quantity("1Ti", "memory") == "1Ti"
    with pytest.raises(QuantityError, match=r"at most 1Ti \(GPULEDGER_QUOTA_MAX_MEMORY\)"):
        quota_quantity("1025Gi", "memory")


@pytest.mark.parametrize(
    ("resource", "kind"),
    [
        (GPU, "gpu"),
        ("amd.com/gpu", "gpu"),
        ("nvidia.com/mig-3g.40gb", "gpu"),
        ("cpu", "cpu"),
        ("memory", "memory"),
        ("hugepages-2Mi", "memory"),
        ("pods", "other"),
        ("ephemeral-storage", "other"),
    ],
)
def test_each_resource_falls_under_one_ceiling(resource: str, kind: str) -> None:
    assert resource_kind(resource) == kind


# --- F9: Unicode digits were read as numbers ----------------------------------------------------
@pytest.mark.parametrize(
    "given",
    [
        "١٢",
        "１２",
        "۱۲",
        "১২",
        "1２",
        "12\u200b",
        "1_000",
        "-1",
        "+-1",
        "Infinity",
        "NaN",
        "1e",
        "",
    ],
)
def test_only_ascii_kubernetes_quantities_are_accepted(given: str) -> None:
    with pytest.raises(QuantityError):
        quota_quantity(given, GPU)


@pytest.mark.parametrize("given", ["١٢", "１２", "1_000"])
def test_kubernetes_quantities_are_ascii_everywhere(given: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(given)
    with pytest.raises(ValueError):
        canonical_quantity(given)


def test_negative_and_non_text_values_are_refused() -> None:
    with pytest.raises(QuantityError, match="negative"):
        quota_quantity("-1", GPU)
    for value in (None, True, 1.5, [], {"a": 1}, b"12"):
        with pytest.raises(QuantityError):
            quota_quantity(value, GPU)
    assert quota_quantity(16, GPU) == "16"


# --- Properties ---------------------------------------------------------------------------------
QUANTITY_TEXT = st.from_regex(
    r"\A[+-]?(?:[0-9]{1,40}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})"
    r"(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,12})?\Z"
)
RESOURCES = st.sampled_from([GPU, "cpu", "memory", "pods", "hugepages-1Gi", "example.com/foo"])
ANYTHING = st.one_of(
    st.text(max_size=80),
    QUANTITY_TEXT,
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.binary(max_size=10),
)


@EXAMPLES
@given(value=ANYTHING, resource=RESOURCES)
def test_it_never_raises_anything_but_a_quantity_error(value: object, resource: str) -> None:
    try:
        result = quota_quantity(value, resource)
    except QuantityError:
        return
    # What it accepts is canonical, within the ceiling and not negative, and parses back.
    amount = parse_quantity(result)
    assert Decimal(0) <= amount
    assert quota_quantity(result, resource) == result


@EXAMPLES
@given(value=QUANTITY_TEXT, resource=RESOURCES)
def test_grammatical_quantities_are_refused_only_for_sign_or_size(
    value: str, resource: str
) -> None:
    try:
        quota_quantity(value, resource)
    except QuantityError as exc:
        message = str(exc)
        assert any(why in message for why in ("negative", "GPULEDGER_QUOTA_MAX_", "characters")), (
            message
        )


@EXAMPLES
@given(value=st.one_of(st.text(max_size=80), QUANTITY_TEXT))
def test_the_kubernetes_parsers_raise_only_value_errors(value: str) -> None:
    for parse in (parse_quantity, canonical_quantity):
        try:
            parse(value)
        except ValueError:
            pass
