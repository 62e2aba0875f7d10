"""The thin clients that carry a notification out: SMTP (Django's mail settings) and HTTP POST.

Each call ends by its deadline (``core.deadlines``): an HTTP exchange is cut however the other
end behaves (connect, a server that never answers, one that drips), an SMTP session is bounded
per socket operation by ``GPULEDGER_NOTIFY_TIMEOUT_SECONDS``. Failures become ``DeliveryError``
with a ``permanent`` flag (docs/conventions.md "Background work"): connection errors, timeouts, 408,
429 and 5xx (SMTP 4xx) are worth another try; any other answer would fail the same way again.
"""

from __future__ import annotations

import json
import logging
import smtplib
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings
from django.core.mail import BadHeaderError, EmailMessage, get_connection

from core.deadlines import Deadline, cut_at
from notifications import outbound

logger = logging.getLogger(__name__)

TRANSIENT_STATUSES = frozenset({408, 425, 429})
USER_AGENT = "GPU-Ledger-Notifier/1"
# What of an answer's reason phrase is kept in the delivery's error (its body never is).
REASON_CHARS = 80


class DeliveryError(Exception):
    """A notification that did not get through. ``permanent``: a retry would fail the same way."""

    def __init__(self, message: str, *, status: int | None = None, permanent: bool = False):
        super().__init__(message)
        self.message = message
        self.status = status
        self.permanent = permanent


@dataclass(frozen=True)
class Sent:
    """A notification that got through: the answer's status (SMTP: 250)."""

    status: int
    detail: str = ""


def call_deadline(run_deadline: Deadline | None) -> Deadline:
    """One call's deadline: ``GPULEDGER_NOTIFY_TIMEOUT_SECONDS``, or the run's when sooner."""
    own = Deadline(
        settings.GPULEDGER_NOTIFY_TIMEOUT_SECONDS,
        "the notification timeout",
        "GPULEDGER_NOTIFY_TIMEOUT_SECONDS",
    )
    return own.sooner(run_deadline)


def _failure(exc: BaseException) -> str:
    """A connection failure in a few words, without the URL (its path may hold a token)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return current.strerror
        for arg in getattr(current, "args", ()):
            if isinstance(arg, BaseException):
                current = arg
                break
        else:
            current = current.__cause__ or current.__context__
    return exc.__class__.__name__


def status_line(response: requests.Response) -> str:
    """``HTTP 503 Service Unavailable``: the answer's status line, never its body."""
    reason = "".join(ch for ch in str(response.reason or "") if ch.isprintable())[:REASON_CHARS]
    return f"HTTP {response.status_code}" + (f" {reason}" if reason else "")


def post_json(
    url: str,
    body: bytes,
    *,
    headers: dict[str, str] | None = None,
    deadline: Deadline | None = None,
) -> Sent:
    """POST ``body`` (JSON bytes) to ``url``: a 2xx is ``Sent``, anything else ``DeliveryError``.

    The URL is checked first (``notifications.outbound``) and the request goes to the address
    that was checked; errors name the URL's origin only, and of an answer only its status line.
    """
    try:
        target = outbound.check_url(url)
    except outbound.RefusedTarget as exc:
        raise DeliveryError(f"refused: {exc}", permanent=True) from exc
    where = f"POST {target.origin}"
    bound = call_deadline(deadline)
    if bound.expired():
        raise DeliveryError(f"{where}: not sent, {bound} had passed")
    all_headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    all_headers.update(headers or {})
    timeout = max(0.1, bound.remaining())
    with outbound.pinned_session(target) as session, cut_at(bound) as cut:
        try:
            with cut.attaching():
                response = session.post(
                    target.url,
                    data=body,
                    headers=all_headers,
                    timeout=(timeout, timeout),
                    allow_redirects=False,
                    stream=True,
                )
                response.close()
        except requests.RequestException as exc:
            if cut.fired:
                raise DeliveryError(f"{where}: no answer within {bound}") from exc
            if isinstance(exc, requests.Timeout):
                raise DeliveryError(f"{where}: timed out ({_failure(exc)})") from exc
            if isinstance(exc, requests.ConnectionError):
                raise DeliveryError(f"{where}: cannot connect ({_failure(exc)})") from exc
            # An invalid URL, a bad scheme: the receiver's settings, not the network.
            raise DeliveryError(f"{where}: {_failure(exc)}", permanent=True) from exc
        except Exception as exc:
            if cut.fired:
                raise DeliveryError(f"{where}: no answer within {bound}") from exc
            raise
    status = response.status_code
    if 200 <= status <= 299:
        return Sent(status)
    line = status_line(response)
    if 300 <= status <= 399:
        line += " (redirects are not followed: give the final URL)"
    permanent = not (status >= 500 or status in TRANSIENT_STATUSES)
    raise DeliveryError(f"{where}: {line}", status=status, permanent=permanent)


def post_alertmanager(
    base_url: str, alerts: list[dict[str, Any]], *, deadline: Deadline | None = None
) -> Sent:
    """``POST /api/v2/alerts`` on one Alertmanager."""
    url = base_url.rstrip("/") + "/api/v2/alerts"
    return post_json(url, json.dumps(alerts).encode(), deadline=deadline)


def send_email(
    subject: str,
    body: str,
    recipients: list[str],
    *,
    deadline: Deadline | None = None,
) -> Sent:
    """One message to ``recipients`` through Django's mail settings (``EMAIL_*``)."""
    if not recipients:
        raise DeliveryError(
            "no recipients: the receiver names no address, and the team has no contacts or "
            "leads with an address and the queue no owners",
            permanent=True,
        )
    bound = call_deadline(deadline)
    if bound.expired():
        raise DeliveryError(f"email: not sent, {bound} had passed")
    message = EmailMessage(
        subject=subject,
        body=body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=recipients,
    )
    try:
        connection = get_connection(timeout=max(0.1, bound.remaining()))
        sent = connection.send_messages([message])
    except BadHeaderError as exc:
        # A subject or address with a line break: the message itself is wrong, every time.
        raise DeliveryError(f"email: a header is malformed ({exc})", permanent=True) from exc
    except smtplib.SMTPRecipientsRefused as exc:
        refused = ", ".join(sorted(exc.recipients))
        raise DeliveryError(f"email: every recipient refused ({refused})", permanent=True) from exc
    except smtplib.SMTPResponseException as exc:
        code = int(exc.smtp_code)
        text = (
            exc.smtp_error.decode("utf-8", "replace")
            if isinstance(exc.smtp_error, bytes)
            else str(exc.smtp_error)
        )
        raise DeliveryError(
            f"email: SMTP {code} {text}", status=code, permanent=500 <= code <= 599
        ) from exc
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryError(f"email: {exc.__class__.__name__}: {exc}") from exc
    if not sent:
        raise DeliveryError("email: the mail backend sent nothing")
    return Sent(250, f"{len(recipients)} recipients")
