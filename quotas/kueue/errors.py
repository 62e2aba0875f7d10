"""The errors of ``quotas.kueue``, and how an API server's answers map to them
(docs/conventions.md "Background work").

Connection errors, timeouts, 429 and 5xx are transient; 400, 401, 403, 404 and 422 are
permanent; ``410 Gone`` is ``ResourceExpired``, which means "relist". A LIST that is not the whole
list is ``IncompleteList``, a call cut off at its deadline ``KubeTimeout``: both transient.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException

from core.deadlines import Deadline

PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 405, 406, 409, 415, 422})


class KubeError(Exception):
    """A failed API call. ``permanent`` means a retry would fail the same way."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        permanent: bool = False,
        *,
        reason: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.permanent = permanent
        self.reason = reason
        # The Status body the server answered with, when it sent one (422 causes, 409 details).
        self.status_body: dict[str, Any] = {}


class ResourceExpired(KubeError):
    """410 Gone: the resourceVersion (or continue token) is too old; LIST again."""

    def __init__(self, message: str, *, reason: str = "Expired") -> None:
        super().__init__(message, 410, False, reason=reason)


class IncompleteList(KubeError):
    """A LIST answered with something that is not the whole list: transient, delete nothing."""

    def __init__(self, message: str) -> None:
        super().__init__(message, None, False, reason="IncompleteList")


class KubeTimeout(KubeError):
    """A call cut off at its deadline. ``run_deadline``: the caller's run deadline was the one
    that passed (the run is out of time), not the call's own."""

    def __init__(self, message: str, *, deadline: Deadline, run_deadline: bool) -> None:
        super().__init__(message, None, False, reason="Timeout")
        self.deadline = deadline
        self.run_deadline = run_deadline


def status_message(body: Any, fallback: str) -> tuple[str, str]:
    """(message, reason) from a Kubernetes Status body, else the fallback text."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            doc = json.loads(body)
        except ValueError:
            return body[:500], ""
        if isinstance(doc, dict):
            return str(doc.get("message") or fallback), str(doc.get("reason") or "")
    return fallback, ""


def error_from_status(status: int, message: str, reason: str = "") -> KubeError:
    if status == 410:
        return ResourceExpired(message, reason=reason or "Expired")
    return KubeError(message, status, status in PERMANENT_STATUSES, reason=reason)


def map_api_exception(exc: ApiException, what: str) -> KubeError:
    status = int(exc.status or 0)
    message, reason = status_message(exc.body, str(exc.reason or "error"))
    if status == 0:
        # The client raises status 0 for TLS failures: a configuration problem, not a blip.
        return KubeError(f"{what}: {message}", None, True, reason="TLS")
    error = error_from_status(status, f"{what}: HTTP {status} {message}", reason)
    error.status_body = status_document(exc.body)
    return error


def status_document(body: Any) -> dict[str, Any]:
    """The Status object of an error answer, ``{}`` when the body is not one."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        doc = json.loads(body) if isinstance(body, str) and body else None
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) and doc.get("kind") == "Status" else {}
