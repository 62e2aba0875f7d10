"""Kubernetes resource quantities ("500m", "2Ti", "1.5e3") as exact Decimals."""

from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


def parse_quantity(value: object) -> Decimal:
    """Parse a Kubernetes quantity. Raises ``ValueError`` on anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        result = Decimal(str(value))
        if not result.is_finite():
            raise ValueError(f"not a finite quantity: {value!r}")
        return result
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"not a quantity: {value!r}")
    text = value.strip()
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            return _number(text[: -len(suffix)], value) * factor
    if text[-1] in "numkMGTPE" and not text[-2:-1].lower() == "e":
        return _number(text[:-1], value) * _DECIMAL[text[-1]]
    return _number(text, value)


def _number(text: str, original: str) -> Decimal:
    try:
        result = Decimal(text)
    except InvalidOperation as exc:
        raise ValueError(f"not a quantity: {original!r}") from exc
    if not result.is_finite():
        raise ValueError(f"not a finite quantity: {original!r}")
    return result
