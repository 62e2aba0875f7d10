"""A failed delivery as a sentence for the person who pressed "send test": what could not be
reached and what to check, without exception class names, errno numbers or secret URL paths."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.conf import settings

from fleet.secrets import SecretError
from notifications.choices import DeliveryOutcome, ReceiverKind
from notifications.models import Delivery, Receiver

# "ConnectionRefusedError: ", "[Errno 111] ", "<urlopen error ...>" and the like.
_NOISE = re.compile(r"\b[A-Za-z]+(?:Error|Exception): |\[Errno -?\d+\] |<|>")


def _where(receiver: Receiver) -> str:
    if receiver.kind == ReceiverKind.EMAIL:
        return f"the mail server {settings.EMAIL_HOST}:{settings.EMAIL_PORT}"
    try:
        targets = receiver.urls()
    except SecretError:
        return "the receiver"
    if not targets:
        return "the receiver"
    # Only the host: a Slack or webhook path can be a secret.
    return f"{urlsplit(targets[0]).netloc or 'the receiver'}"


def _reason(error: str, where: str) -> str:
    text = error.lower()
    if "refused" in text and "recipient" not in text or "cannot connect" in text:
        return f"{where} refused the connection: check that it runs and its host and port"
    if "timed out" in text or "no answer within" in text or "had passed" in text:
        return f"{where} did not answer in time"
    if "name or service not known" in text or "nodename nor servname" in text:
        return f"the host name of {where} does not resolve"
    # The status line, as notifications.transports keeps it (never the body).
    match = re.search(r"HTTP (\d{3})(?: [A-Za-z][A-Za-z -]*)?", error)
    if match:
        code = int(match.group(1))
        if code in (401, 403):
            return (
                f"{where} refused the credentials ({match.group(0)}): check the receiver's secret"
            )
        return f"{where} answered {match.group(0).strip()}"
    cleaned = _NOISE.sub("", error).strip().rstrip(".")
    return cleaned or "no reason was given"


def failure_sentence(receiver: Receiver, delivery: Delivery) -> str:
    """One sentence on why ``delivery`` (a test) was not sent, and whether it is retried."""
    reason = _reason(delivery.error or "", _where(receiver))
    if delivery.outcome == DeliveryOutcome.RETRYING:
        return f"{receiver.name}: the test is not sent yet, {reason}; it will be retried."
    return f"{receiver.name}: the test was not sent, {reason}."
