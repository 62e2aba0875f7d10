"""Reads from a PostgreSQL read replica (docs/architecture.md "Scale-out").

With ``DATABASE_REPLICA_URL`` set, settings add the ``replica`` database and
``ReplicaReadsMiddleware`` decides per request whether its reads may go there:

- only GET, HEAD and OPTIONS requests (pages, chart JSON, the read-only API);
- never the admin, nor a view marked ``@primary_reads`` (forms that edit what they show, like
  the quota change form);
- never for a client pinned to the primary: a request that wrote (an INSERT, UPDATE, DELETE or
  ``SELECT ... FOR UPDATE`` reached the primary) pins its client for
  ``GPULEDGER_REPLICA_PIN_SECONDS``, by a cookie for browsers and by its Authorization header
  (in the cache) for API clients, so it reads its own writes while the replica catches up;
- and within a request, once it has written, or inside a transaction, every read is on the
  primary.

``ReplicaRouter`` reads that decision. Accounts, sessions, permissions, tokens and login
lockouts are always read on the primary (a sign-in or a revoked token counts at once); every
write goes to the primary, and migrations run only there. Outside a request (Celery tasks,
management commands) everything is on the primary. Without a replica the router has no
opinion (Django's default database for everything) and the middleware does nothing.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpRequest, HttpResponse

REPLICA = "replica"
PIN_COOKIE = "gpuledger_primary_until"
PIN_CACHE_PREFIX = "gpuledger:primary-pin:"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Read on the primary whatever the request: who is signed in, with which rights and tokens.
PRIMARY_APPS = frozenset({"auth", "sessions", "admin", "contenttypes", "axes", "authtoken"})
PRIMARY_MODELS = frozenset({"quotas.apitoken"})
WRITE_STATEMENTS = ("INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE", "COPY")
WRITE_IN_CTE = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE)\b")


@dataclass
class Reads:
    """One request's read decision; ``wrote`` turns true at its first write."""

    replica: bool
    wrote: bool = False


_reads: ContextVar[Reads | None] = ContextVar("gpuledger_reads", default=None)


@contextmanager
def request_reads(replica: bool) -> Iterator[Reads]:
    """Within this, reads follow ``replica`` (until something is written): what the middleware
    sets around a request."""
    reads = Reads(replica=replica)
    token = _reads.set(reads)
    try:
        yield reads
    finally:
        _reads.reset(token)


def replica_configured() -> bool:
    return REPLICA in settings.DATABASES


def primary_reads(view: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a view whose GET must read the primary (it shows what its POST edits)."""
    view.primary_reads = True  # type: ignore[attr-defined]
    return view


class ReplicaRouter:
    """Django database router; see the module docstring."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        if not replica_configured():
            return None
        reads = _reads.get()
        if reads is None or not reads.replica or reads.wrote:
            return DEFAULT_DB_ALIAS
        if model._meta.app_label in PRIMARY_APPS or model._meta.label_lower in PRIMARY_MODELS:
            return DEFAULT_DB_ALIAS
        if connections[DEFAULT_DB_ALIAS].in_atomic_block:
            return DEFAULT_DB_ALIAS
        return REPLICA

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return DEFAULT_DB_ALIAS if replica_configured() else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        # The replica holds the primary's rows: an object read there is the primary's object.
        return True if replica_configured() else None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return db == DEFAULT_DB_ALIAS


def is_write(sql: str) -> bool:
    """Whether a statement changes rows (or locks them to change them)."""
    head = sql.lstrip().upper()
    locks = " FOR UPDATE" in head or " FOR NO KEY UPDATE" in head
    # A common table expression can write: WITH moved AS (DELETE ... RETURNING ...) INSERT ...
    writes_in_cte = head.startswith("WITH") and WRITE_IN_CTE.search(head) is not None
    return head.startswith(WRITE_STATEMENTS) or locks or writes_in_cte


def _pin_key(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    if not header:
        return None
    return PIN_CACHE_PREFIX + hashlib.sha256(header.encode()).hexdigest()


def pinned(request: HttpRequest, now: float | None = None) -> bool:
    """Whether this client wrote within ``GPULEDGER_REPLICA_PIN_SECONDS``."""
    now = time.time() if now is None else now
    try:
        until = float(request.COOKIES.get(PIN_COOKIE, "0"))
    except ValueError:
        until = 0.0
    if until > now:
        return True
    key = _pin_key(request)
    return key is not None and cache.get(key) is not None


class ReplicaReadsMiddleware:
    """Sets the request's read decision and pins a client that wrote; see the module docstring."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not replica_configured():
            return self.get_response(request)
        replica = request.method in SAFE_METHODS and not pinned(request)
        with request_reads(replica) as reads:

            def watch(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
                if not reads.wrote and is_write(sql):
                    reads.wrote = True
                return execute(sql, params, many, context)

            with connections[DEFAULT_DB_ALIAS].execute_wrapper(watch):
                response = self.get_response(request)
        if reads.wrote:
            self._pin(request, response)
        return response

    def process_view(
        self, request: HttpRequest, view: Callable[..., Any], args: Any, kwargs: Any
    ) -> None:
        reads = _reads.get()
        if reads is None or not reads.replica:
            return
        match = request.resolver_match
        if getattr(view, "primary_reads", False) or (match and "admin" in match.namespaces):
            reads.replica = False

    @staticmethod
    def _pin(request: HttpRequest, response: HttpResponse) -> None:
        seconds = settings.GPULEDGER_REPLICA_PIN_SECONDS
        if seconds <= 0:
            return
        response.set_cookie(
            PIN_COOKIE,
            f"{time.time() + seconds:.3f}",
            max_age=seconds,
            secure=settings.SESSION_COOKIE_SECURE,
            httponly=True,
            samesite="Lax",
        )
        key = _pin_key(request)
        if key is not None:
            cache.set(key, 1, timeout=seconds)
