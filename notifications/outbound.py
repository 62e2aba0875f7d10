"""Where notifications may go: receiver URLs checked at save time and at every send.

A receiver URL is refused when it carries a user name or password, or when its host resolves
to an address that is not on the public internet: loopback, link-local, private, shared (CGNAT),
multicast, reserved or unspecified, IPv4 written any way (``2852039166`` is 169.254.169.254)
or mapped into IPv6. The cloud metadata services (``metadata.google.internal``,
169.254.169.254, fd00:ec2::254, 100.100.100.200) are refused always. Every address a name
resolves to must pass, and the request then connects to the address that was checked
(:func:`pinned_session`): a name that answers differently a moment later (DNS rebinding) changes
nothing. ``GPULEDGER_NOTIFY_ALLOWED_NETWORKS`` (CIDRs) lets an in-house chat server or
Alertmanager on an internal network be reached. Redirects are never followed; see
docs/architecture.md "Notifications and remediation".
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings

from core.http import CutAdapter

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)


class RefusedTarget(ValueError):
    """A receiver URL notifications may not be sent to; the message says why."""


@dataclass(frozen=True)
class Target:
    """A checked URL: where it points (``origin``, safe to show) and the address to connect to."""

    url: str
    host: str
    port: int
    address: str

    @property
    def origin(self) -> str:
        return origin(self.url)


def origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL: what messages show of it (paths may hold tokens)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = parts.port
    except ValueError:
        return "(an unreadable URL)"
    shown = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown}" + (f":{port}" if port else "")


def allowed_networks() -> list[IPNetwork]:
    """``GPULEDGER_NOTIFY_ALLOWED_NETWORKS`` as networks (the setting is checked at start)."""
    return [
        ipaddress.ip_network(cidr, strict=False)
        for cidr in settings.GPULEDGER_NOTIFY_ALLOWED_NETWORKS
    ]


def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the system resolver; a literal is its own answer)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def refusal(address: IPAddress, allowed: list[IPNetwork]) -> str:
    """Why ``address`` may not be connected to, or "" when it may."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if any(address in network for network in allowed if network.version == address.version):
        return ""
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_private:
        return "a private address"
    if address.is_reserved or not address.is_global:
        return "a reserved address"
    return ""


def check_url(url: str) -> Target:
    """The URL's host resolved and checked; raises ``RefusedTarget``."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise RefusedTarget(f"{origin(url)} is not a valid URL ({exc})") from exc
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise RefusedTarget(f"{origin(url)} is not an http(s) URL")
    if "@" in parts.netloc:
        raise RefusedTarget(
            f"{origin(url)}: a user name or password in the URL is refused; "
            "put a token in a GPULEDGER_SECRET_ variable"
        )
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise RefusedTarget(f"{url!r} names no host")
    port = port or (443 if scheme == "https" else 80)
    shown = origin(url)
    if host in METADATA_HOSTS:
        raise RefusedTarget(f"{shown} is a cloud metadata service")
    try:
        answers = resolve_host(host, port)
    except (OSError, UnicodeError) as exc:
        raise RefusedTarget(f"{shown}: {host} does not resolve ({exc})") from exc
    if not answers:
        raise RefusedTarget(f"{shown}: {host} does not resolve")
    allowed = allowed_networks()
    for answer in answers:
        address = ipaddress.ip_address(answer.split("%", 1)[0])
        why = refusal(address, allowed)
        if why:
            raise RefusedTarget(
                f"{shown} resolves to {address}, {why}: notifications are not sent there "
                "(GPULEDGER_NOTIFY_ALLOWED_NETWORKS allows an internal network)"
            )
    return Target(url=url.strip(), host=host, port=port, address=answers[0])


class PinnedAdapter(CutAdapter):
    """A ``CutAdapter`` whose connections go to the checked address, whatever DNS says by then.

    The URL keeps its host name, so the Host header, TLS SNI and certificate check are the name's.
    """

    def __init__(self, target: Target, *args: Any, **kwargs: Any) -> None:
        self.target = target
        super().__init__(*args, **kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        address = self.target.address

        def pin(pool_class: type) -> type:
            base = pool_class.ConnectionCls  # type: ignore[attr-defined]

            def _new_conn(conn: Any) -> Any:
                # The socket goes to the checked address; the Host header, SNI and the
                # certificate check, made outside this call, keep the name.
                name = conn._dns_host
                conn._dns_host = address
                try:
                    return base._new_conn(conn)
                finally:
                    conn._dns_host = name

            connection_class = type(f"Pinned{base.__name__}", (base,), {"_new_conn": _new_conn})
            return type(
                f"Pinned{pool_class.__name__}", (pool_class,), {"ConnectionCls": connection_class}
            )

        manager = self.poolmanager
        manager.pool_classes_by_scheme = {
            scheme: pin(pool_class) for scheme, pool_class in manager.pool_classes_by_scheme.items()
        }
        manager.clear()


def pinned_session(target: Target) -> requests.Session:
    """A session that reaches only ``target``'s checked address, directly: no environment proxy
    (it would resolve the name itself) and no ``.netrc``; a CA bundle named by
    ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE`` is still used, as requests would."""
    session = requests.Session()
    session.trust_env = False
    session.verify = (
        os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
    )
    adapter = PinnedAdapter(target)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
