"""Kubernetes resource quantities ("500m", "2Ti", "1.5e3") as exact Decimals.

``parse_quantity`` reads what Kubernetes sends; ``quota_quantity`` is the one parser of a quota
a person types (the REST API, the team's and the admin's quota forms): ASCII digits in
Kubernetes' grammar, not negative, and at most the resource's plausibility ceiling
(``GPULEDGER_QUOTA_MAX_*``, docs/architecture.md "Quota write-back"). Whatever it is given, it
returns the canonical string or raises ``QuantityError``; nothing else escapes.
"""

import re
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import MAX_EMAX, MIN_EMIN, Decimal, DecimalException, localcontext

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


# The grammar of resource.ParseQuantity: a signed decimal number, then one suffix or exponent.
# ASCII digits only: ``str.isdigit`` and ``Decimal`` would take "١٢" or full-width "１２".
_STRICT = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?", re.ASCII
)


@contextmanager
def _exact(digits: int) -> Iterator[None]:
    """Decimal arithmetic with ``digits`` of precision and no exponent limit: no silent
    rounding, and no ``InvalidOperation`` or ``Overflow`` on 28-digit or ``1e30`` quantities."""
    with localcontext() as context:
        context.prec = max(28, digits)
        context.Emax = MAX_EMAX
        context.Emin = MIN_EMIN
        yield


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
    if not _STRICT.fullmatch(text):
        raise ValueError(f"not a quantity: {value!r}")
    try:
        with _exact(len(text) + 40):
            for suffix, factor in _BINARY.items():
                if text.endswith(suffix):
                    return _number(text[: -len(suffix)], value) * factor
            if text[-1] in "numkMGTPE" and not text[-2:-1].lower() == "e":
                return _number(text[:-1], value) * _DECIMAL[text[-1]]
            return _number(text, value)
    except DecimalException as exc:
        raise ValueError(f"not a quantity: {value!r}") from exc


def _number(text: str, original: str) -> Decimal:
    try:
        result = Decimal(text)
    except DecimalException as exc:
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
    _, digits, exponent = amount.as_tuple()
    assert isinstance(exponent, int)
    try:
        # Rounding to nano-units and dropping trailing zeros need no more digits than it has.
        with _exact(len(digits) + 12):
            return _format(amount, fmt, exponent)
    except DecimalException as exc:
        raise ValueError(f"not a quantity: {amount}") from exc


def _format(amount: Decimal, fmt: str, exponent: int) -> str:
    if exponent < -9:
        amount = amount.quantize(_NANO, rounding="ROUND_UP")
    if amount == 0:
        return "0"
    if fmt == BINARY_SI:
        # Beyond 1e30 (far above any quota) the power-of-1024 search would build a huge int.
        if abs(amount) < 1024 or amount.adjusted() > 30 or amount != amount.to_integral_value():
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


# --- quotas a person types ---------------------------------------------------------------------
# The longest quota text accepted (the forms' and the API's max_length).
MAX_QUANTITY_LENGTH = 64
# Per kind of resource: the setting holding its plausibility ceiling, and the unit it counts.
CEILINGS = {
    "gpu": ("GPULEDGER_QUOTA_MAX_GPUS", "GPUs"),
    "cpu": ("GPULEDGER_QUOTA_MAX_CPUS", "cores"),
    "memory": ("GPULEDGER_QUOTA_MAX_MEMORY", "bytes"),
    "other": ("GPULEDGER_QUOTA_MAX_OTHER", "units"),
}


class QuantityError(ValueError):
    """A typed quota that cannot be written; the message says why, for the field it names."""


def resource_kind(resource: str) -> str:
    """Which ceiling a resource falls under: ``gpu``, ``cpu``, ``memory`` or ``other``."""
    name = resource.strip().lower()
    if name in ("memory", "hugepages") or name.endswith("/memory") or "hugepages-" in name:
        return "memory"
    if name == "cpu" or name.endswith("/cpu"):
        return "cpu"
    if "gpu" in name or "/mig-" in name:
        return "gpu"
    return "other"


def quota_ceiling(resource: str) -> Decimal:
    """The largest quota of ``resource`` a person may type (settings ``GPULEDGER_QUOTA_MAX_*``)."""
    from django.conf import settings

    setting, _ = CEILINGS[resource_kind(resource)]
    return Decimal(getattr(settings, setting))


def quota_quantity(value: object, resource: str) -> str:
    """A typed quota of ``resource`` in canonical form; ``QuantityError`` for anything else.

    Accepts a string (or an int) in Kubernetes' grammar with ASCII digits, at most
    ``MAX_QUANTITY_LENGTH`` long, not negative and at most ``quota_ceiling(resource)``.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise QuantityError("Give a Kubernetes quantity as text (e.g. 16, 500m, 64Gi).")
    text = str(value).strip()
    shown = text if len(text) <= 24 else f"{text[:20]}…"
    if len(text) > MAX_QUANTITY_LENGTH:
        raise QuantityError(f"At most {MAX_QUANTITY_LENGTH} characters.")
    if not text.isascii() or not _STRICT.fullmatch(text):
        raise QuantityError(
            f"{shown!r} is not a Kubernetes quantity: ASCII digits with an optional suffix "
            "(e.g. 16, 500m, 64Gi)."
        )
    try:
        amount = parse_quantity(text)
        if amount < 0:
            raise QuantityError("Must not be negative.")
        ceiling = quota_ceiling(resource)
        if amount > ceiling:
            setting, unit = CEILINGS[resource_kind(resource)]
            most = (
                f"{int(ceiling):,} {unit}"
                if unit in ("GPUs", "cores")
                else format_quantity(ceiling, BINARY_SI if unit == "bytes" else DECIMAL_SI)
            )
            raise QuantityError(
                f"{shown!r} is more than any {resource} quota can plausibly be: at most {most} "
                f"({setting})."
            )
        return format_quantity(amount, quantity_format(text))
    except QuantityError:
        raise
    except ValueError as exc:
        raise QuantityError(
            f"{shown!r} is not a Kubernetes quantity (e.g. 16, 500m, 64Gi)."
        ) from exc
