"""Deadlines for work that waits on upstreams, and HTTP exchanges cut off at one.

A socket timeout bounds one read, not a request: a server that sends a byte every 20 s never trips
a 60 s read timeout, and urllib3 retries a read that did time out on a fresh connection, each
retry with the full timeout again. ``Deadline`` is a point in monotonic time with a name for error
messages. ``cut_at(deadline)`` bounds a whole exchange however the server behaves: connect, TLS,
headers, body and any retries urllib3 makes inside it. At the deadline a timer shuts the
exchange's sockets down, so a blocked read returns at once, and a connection attempted after
that raises ``DeadlineExceeded`` (which urllib3 does not retry). The connections must come from a
pool manager passed through ``guard_pool_manager`` (the kubernetes client's, a requests adapter's).
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import urllib3

_local = threading.local()


class Deadline:
    """A moment (monotonic clock) by which something must be over.

    ``what`` and ``detail`` name it in messages: "the sync deadline of 120 s
    (GPULEDGER_SYNC_DEADLINE_SECONDS)".
    """

    __slots__ = ("at", "detail", "seconds", "what")

    def __init__(self, seconds: float, what: str, detail: str = "") -> None:
        self.seconds = float(seconds)
        self.at = time.monotonic() + self.seconds
        self.what = what
        self.detail = detail

    @classmethod
    def never(cls) -> Deadline:
        return cls(math.inf, "no deadline")

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def sooner(self, other: Deadline | None) -> Deadline:
        """Whichever of the two comes first (this one on a tie)."""
        return other if other is not None and other.at < self.at else self

    def __str__(self) -> str:
        return f"{self.what} of {self.seconds:g} s" + (f" ({self.detail})" if self.detail else "")


class DeadlineExceeded(Exception):
    """A connection was attempted for an exchange whose deadline has passed.

    Deliberately not an ``OSError``: urllib3 retries those, and a retry is what must not happen.
    """

    def __init__(self, deadline: Deadline) -> None:
        super().__init__(f"{deadline} passed")
        self.deadline = deadline


class Cut:
    """One bounded exchange: the connections it used, and whether its deadline cut them."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.fired = False
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        self._open = True
        self._timer: threading.Timer | None = None

    def _start(self) -> None:
        if self.deadline.expired():
            self.fired = True
        elif math.isfinite(self.deadline.at):
            self._timer = threading.Timer(self.deadline.remaining(), self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _stop(self) -> None:
        with self._lock:
            self._open = False
        if self._timer is not None:
            self._timer.cancel()

    def _fire(self) -> None:
        with self._lock:
            if not self._open:
                return
            self.fired = True
            for connection in self._connections:
                sock = getattr(connection, "sock", None)
                if sock is None:
                    continue
                try:
                    # socket.socket's own shutdown, also for an SSLSocket: its override drops the
                    # SSL object under a reader in another thread, which then fails with a
                    # ValueError instead of the connection error urllib3 expects.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed

    def attach(self, connection: Any) -> None:
        """Called by a guarded connection as it connects or sends a request."""
        with self._lock:
            if self.fired:
                raise DeadlineExceeded(self.deadline)
            if connection not in self._connections:
                self._connections.append(connection)

    @contextmanager
    def attaching(self) -> Iterator[None]:
        """Connections this thread opens or reuses inside the block belong to this exchange."""
        previous = getattr(_local, "cut", None)
        _local.cut = self
        try:
            yield
        finally:
            _local.cut = previous


@contextmanager
def cut_at(deadline: Deadline) -> Iterator[Cut]:
    """Bound one HTTP exchange: its connections are shut down when ``deadline`` passes.

    Send the request inside ``cut.attaching()``; read the body anywhere inside this block. After
    the block ``cut.fired`` tells whether a failure came from the deadline.
    """
    cut = Cut(deadline)
    cut._start()
    try:
        yield cut
    finally:
        cut._stop()


class _GuardedConnection:
    """Mixed into urllib3 connection classes: joins the thread's current ``Cut``, if any."""

    def connect(self) -> None:
        _attach(self)
        super().connect()  # type: ignore[misc]

    def request(self, *args: Any, **kwargs: Any) -> None:
        _attach(self)
        super().request(*args, **kwargs)  # type: ignore[misc]


def _attach(connection: Any) -> None:
    cut = getattr(_local, "cut", None)
    if cut is not None:
        cut.attach(connection)


_GUARDED_POOLS: dict[type, type] = {}
_GUARDED_POOLS_LOCK = threading.Lock()


def _guarded_pool(pool_class: type) -> type:
    with _GUARDED_POOLS_LOCK:
        if pool_class not in _GUARDED_POOLS:
            base = pool_class.ConnectionCls  # type: ignore[attr-defined]
            connection_class = type(f"Guarded{base.__name__}", (_GuardedConnection, base), {})
            _GUARDED_POOLS[pool_class] = type(
                f"Guarded{pool_class.__name__}", (pool_class,), {"ConnectionCls": connection_class}
            )
        return _GUARDED_POOLS[pool_class]


def guard_pool_manager(manager: urllib3.PoolManager) -> urllib3.PoolManager:
    """Make the manager's connections honour ``cut_at`` (idempotent; works for proxy managers)."""
    if getattr(manager, "_cut_at_deadlines", False):
        return manager
    manager.pool_classes_by_scheme = {
        scheme: _guarded_pool(pool_class)
        for scheme, pool_class in manager.pool_classes_by_scheme.items()
    }
    manager.clear()  # pools made earlier would keep the plain connection class
    manager._cut_at_deadlines = True  # type: ignore[attr-defined]
    return manager
