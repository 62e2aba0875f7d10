"""Who may read ``/metrics`` (README "Metrics").

With no configuration: a client on loopback (a Prometheus or ``curl`` on the same host or in the
same pod) and a signed-in staff user. Elsewhere a scraper sends ``Authorization: Bearer <token>``
with ``GPULEDGER_METRICS_TOKEN``, or scrapes from a network in
``GPULEDGER_METRICS_ALLOWED_NETWORKS``. A wrong token is refused (401) wherever it comes from;
anything else is 403.

The client address is ``REMOTE_ADDR``; behind a proxy that sets ``X-Forwarded-For``, and only
with ``GPULEDGER_TRUST_X_FORWARDED_FOR``, it is that header's last address: the one the proxy
itself appended (addresses left of it are whatever the client wrote). Without that setting, a
proxy on the same host makes every request look local: set it there, or the token.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest

logger = logging.getLogger(__name__)

BEARER = "bearer"


@dataclass(frozen=True)
class Decision:
    """Whether a scrape is answered; ``status`` and ``reason`` say why not."""

    allowed: bool
    status: int = 200
    reason: str = ""
    via: str = ""


def client_address(request: HttpRequest) -> str:
    """The address the request comes from (the module docstring)."""
    if settings.GPULEDGER_TRUST_X_FORWARDED_FOR:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        if hops:
            return hops[-1]
    return str(request.META.get("REMOTE_ADDR", ""))


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return None
    # ::ffff:127.0.0.1 is loopback too, and matches IPv4 networks.
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _in_allowed_network(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    for cidr in settings.GPULEDGER_METRICS_ALLOWED_NETWORKS:
        network = ipaddress.ip_network(cidr, strict=False)
        if ip.version == network.version and ip in network:
            return True
    return False


def _bearer_token(request: HttpRequest) -> str | None:
    """The bearer token the request sends; None when it sends no Authorization header."""
    header = request.META.get("HTTP_AUTHORIZATION")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == BEARER else ""


def decide(request: HttpRequest) -> Decision:
    """Whether ``request`` may read ``/metrics``."""
    sent = _bearer_token(request)
    expected = settings.GPULEDGER_METRICS_TOKEN
    if sent is not None:
        if expected and sent and hmac.compare_digest(sent.encode(), expected.encode()):
            return Decision(True, via="token")
        return Decision(False, 401, "wrong or unexpected bearer token")
    ip = _ip(client_address(request))
    if ip is not None and ip.is_loopback:
        return Decision(True, via="loopback")
    if ip is not None and _in_allowed_network(ip):
        return Decision(True, via="network")
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_active and user.is_staff:
        return Decision(True, via="staff")
    return Decision(
        False,
        403,
        "send Authorization: Bearer with GPULEDGER_METRICS_TOKEN, or scrape from loopback or "
        "a network in GPULEDGER_METRICS_ALLOWED_NETWORKS",
    )
