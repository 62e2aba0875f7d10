"""One world per test module, shared by its tests without leaking between them.

A module's world is written once, inside a transaction that is rolled back when the module ends
(``build_once``). Each test runs in its own savepoint (pytest-django's ``db``), rolled back after
it, and takes its own ``copy.deepcopy`` of the world's objects: what a test changes, in the
database or on those objects, no other test sees.

Every test of such a module sees the world's rows, so a test that needs a database without them
lives in another module. Live-server (browser) tests cannot share it at all: their server thread
reads committed rows only, and pytest-django empties every table after each of them, so they
build their own world per test, in their own modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar

import time_machine
from django.db import transaction

T = TypeVar("T")


def build_once(
    django_db_blocker: Any, build: Callable[[], T], at: datetime, *, tick: bool = False
) -> Iterator[T]:
    """Yields ``build()``, run with the clock at ``at``, for a module-scoped fixture to yield
    from; its rows are rolled back when the fixture is torn down."""
    with django_db_blocker.unblock(), transaction.atomic():
        try:
            with time_machine.travel(at, tick=tick):
                built = build()
            yield built
        finally:
            transaction.set_rollback(True)
