"""Bounds every request parameter must respect, in one place (pages, charts and the API).

Instants are between :data:`EARLIEST` and :data:`LATEST`: the years GPU Ledger can hold data for,
with room on both sides for every period arithmetic (a month, a day, an hour, a time zone) to
stay a valid ``datetime``. Text is at most :data:`MAX_TEXT` characters and never contains NUL,
which PostgreSQL refuses in text. Whole numbers fit a 64-bit database integer. A value outside
raises :class:`InvalidParameter` naming the parameter, which the callers answer with a 400.
"""

from __future__ import annotations

from datetime import UTC, datetime

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)
MAX_TEXT = 1000
MAX_INT = 2**63 - 1


class InvalidParameter(ValueError):
    """A request parameter that cannot be honoured; ``name`` names it, ``reason`` says why."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


def check_moment(name: str, moment: datetime) -> datetime:
    """``moment`` in UTC when it lies in [EARLIEST, LATEST)."""
    try:
        moment = moment.astimezone(UTC)
    except (OverflowError, ValueError):
        raise InvalidParameter(name, "is out of range") from None
    if not EARLIEST <= moment < LATEST:
        raise InvalidParameter(
            name, f"must be between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} (UTC)"
        )
    return moment


def check_text(name: str, value: str, max_length: int = MAX_TEXT) -> str:
    if "\x00" in value:
        raise InvalidParameter(name, "must not contain NUL characters")
    if len(value) > max_length:
        raise InvalidParameter(name, f"is longer than {max_length} characters")
    return value


def check_int(name: str, value: int) -> int:
    if not -MAX_INT <= value <= MAX_INT:
        raise InvalidParameter(name, "is out of range")
    return value


def check_all(params: object) -> None:
    """Every value of a QueryDict-like (``lists()``) or of a mapping of path arguments: text
    and whole numbers within their bounds."""
    items = params.lists() if hasattr(params, "lists") else params.items()  # type: ignore[attr-defined]
    for name, values in items:
        check_text("parameter name", str(name))
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str):
                check_text(str(name), value)
            elif isinstance(value, int):
                check_int(str(name), value)
