"""PostgreSQL planner and memory settings for one transaction: the one way the code sets them.

``local_settings(alias, {"jit": "off", "work_mem": "64MB"})`` applies every setting in one
statement (``set_config(name, value, true)``, which is ``SET LOCAL``): they last until the
transaction ends, and a released savepoint does not undo them, so the helper opens a transaction
when none is open and never a savepoint. ``restore=True`` puts the previous values back when the
block ends, for a block inside a longer transaction (the rollup's fast path). On other databases
it does nothing.

Callers: the read layer's big scans (``ledger.models``: JIT off, and the chargeback's hash
aggregate), the rollup's fast path (``ledger.rollup.postgres``) and the alert evaluation
(``alerts.evaluate``: JIT off).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from django.db import connections, transaction


def _set_sql(count: int) -> str:
    return "SELECT " + ", ".join(["set_config(%s, %s, true)"] * count)


@contextmanager
def local_settings(
    alias: str, settings: Mapping[str, str], *, restore: bool = False
) -> Iterator[None]:
    """``settings`` (name → value) for the rest of the transaction, in one statement."""
    connection = connections[alias]
    if not settings or connection.vendor != "postgresql":
        yield
        return
    names = list(settings)
    with transaction.atomic(using=alias, savepoint=False):
        with connection.cursor() as cursor:
            previous = None
            if restore:
                current = "SELECT " + ", ".join(["current_setting(%s)"] * len(names))
                cursor.execute(current, names)
                previous = cursor.fetchone()
            cursor.execute(_set_sql(len(names)), [v for n in names for v in (n, settings[n])])
        yield
        if previous is not None:
            with connection.cursor() as cursor:
                pairs = zip(names, previous, strict=True)
                cursor.execute(_set_sql(len(names)), [v for pair in pairs for v in pair])
