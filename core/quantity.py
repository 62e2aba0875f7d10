"""Kubernetes resource quantities ("500m", "2Ti", "1.5e3") as exact Decimals."""

import re
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


# --- canonical form (what resource.Quantity's String() prints) ---------------------------------
DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"
_SI_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_NANO = Decimal("1e-9")
# The grammar of resource.ParseQuantity: a signed decimal number, then one suffix or exponent.
_STRICT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?")


def quantity_format(value: str) -> str:
    """The format Kubernetes keeps for a quantity string: binary suffix, exponent or decimal."""
    text = value.strip()
    if any(text.endswith(suffix) for suffix in _BINARY):
        return BINARY_SI
    body = text.lstrip("+-")
    if "e" in body.lower() and not (body.endswith("E") and body[:-1].replace(".", "").isdigit()):
        return DECIMAL_EXPONENT
    return DECIMAL_SI


def format_quantity(amount: Decimal, fmt: str = DECIMAL_SI) -> str:
    """``amount`` as ``resource.Quantity.String()`` prints it in format ``fmt``.

    Kubernetes rounds anything finer than a nano-unit up (away from zero), then picks the largest
    exponent that keeps the mantissa an integer: a multiple of 3 for the decimal formats (``12000m``
    is ``12``, ``1500000`` is ``1500k``), a power of 1024 for BinarySI (``1536Mi`` stays,
    ``0.5Gi`` is ``512Mi``). BinarySI values below 1024 or with a fraction print as DecimalSI.
    """
    if not amount.is_finite():
        raise ValueError(f"not a finite quantity: {amount}")
    amount = amount.quantize(_NANO, rounding="ROUND_UP") if amount % _NANO else amount
    if amount == 0:
        return "0"
    if fmt == BINARY_SI:
        if abs(amount) < 1024 or amount != amount.to_integral_value():
            fmt = DECIMAL_SI
        else:
            whole = int(amount)
            power = 0
            while power < len(_BINARY_SUFFIXES) - 1 and whole % 1024 == 0:
                whole //= 1024
                power += 1
            return f"{whole}{_BINARY_SUFFIXES[power]}"
    sign, digits, raw_exponent = amount.normalize().as_tuple()
    assert isinstance(raw_exponent, int)
    exponent = raw_exponent
    mantissa = int("".join(map(str, digits)))
    shift = exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    number = f"{'-' if sign else ''}{mantissa}"
    if fmt == DECIMAL_SI and exponent in _SI_SUFFIXES:
        return number + _SI_SUFFIXES[exponent]
    return number if exponent == 0 else f"{number}e{exponent}"


def canonical_quantity(value: object) -> str:
    """A quantity string (or number) in Kubernetes' canonical form; ``ValueError`` if invalid.

    The format follows the input, as in Kubernetes: ``64Gi`` stays binary, ``1e3`` an exponent.
    """
    if isinstance(value, str) and not _STRICT.fullmatch(value.strip()):
        raise ValueError(f"not a quantity: {value!r}")
    amount = parse_quantity(value)
    fmt = quantity_format(value) if isinstance(value, str) else DECIMAL_SI
    return format_quantity(amount, fmt)


def is_binary_resource(resource: str) -> bool:
    """Resources counted in bytes, shown with binary suffixes when they divide evenly."""
    return resource in ("memory", "ephemeral-storage") or resource.endswith(
        ("/memory", "hugepages")
    )


def display_quantity(amount: Decimal | None, resource: str) -> str:
    """A stored quota as a Kubernetes quantity (``64Gi``, ``16``, ``500m``); "" when unset."""
    if amount is None:
        return ""
    fmt = BINARY_SI if is_binary_resource(resource) else DECIMAL_SI
    return format_quantity(Decimal(amount), fmt)
