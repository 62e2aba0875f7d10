"""What of an internal error message may be shown to users who do not run the installation.

Collection and sync errors name internal hosts, ports, URLs and file paths (``HTTPConnectionPool(
host='10.0.3.7', port=9090)``, ``/etc/gpuledger/kubeconfig``). Staff see them in full; everyone
else sees :func:`public_summary`: the first line with those details replaced.
"""

from __future__ import annotations

import re

_REDACTIONS = (
    # URLs first, so their host and path are not matched again below.
    (re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE), "<url>"),
    (re.compile(r"\bhost=(['\"]).*?\1", re.IGNORECASE), "host=<host>"),
    (re.compile(r"\bport=\d+", re.IGNORECASE), "port=<port>"),
    (re.compile(r"\[[0-9a-f:]+\](?::\d+)?", re.IGNORECASE), "<address>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<address>"),
    (re.compile(r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)+:\d{2,5}\b", re.IGNORECASE), "<host>"),
    (re.compile(r"(?<![\w<])(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?"), "<path>"),
)
MAX_SUMMARY = 200


def public_summary(error: str) -> str:
    """The first line of ``error`` without hosts, ports, addresses, URLs or file paths."""
    first = error.strip().splitlines()[0] if error.strip() else ""
    for pattern, replacement in _REDACTIONS:
        first = pattern.sub(replacement, first)
    if len(first) > MAX_SUMMARY:
        first = first[: MAX_SUMMARY - 1] + "…"
    return first
