"""Thin client for a Prometheus-API-compatible server (Prometheus, Thanos, Mimir), per cluster.

It owns the URL, authentication, TLS, extra headers and timeouts, and maps every failure to
``PrometheusError`` with a ``permanent`` flag (docs/conventions.md "Background work"): connection
errors, timeouts, 5xx and 429 are transient and worth a retry; a bad query (400, 422), refused
credentials (401, 403), a wrong URL (404) or an answer that is not a Prometheus answer are
permanent.

prometheus-api-client's ``PrometheusConnect`` sets up the session (headers, auth, TLS); the query
calls go through that same session directly, because the library's ``custom_query`` hides the
HTTP status code we need to tell transient from permanent failures, and retries on its own.

``timeout`` bounds each call as a whole, not each socket read: a Prometheus (or a proxy) that
drips its answer a byte at a time is cut off at it (``core.deadlines``). ``deadline``, when a
caller sets it (the collector: its run's deadline), ends every call by then too.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson
import requests
from prometheus_api_client import PrometheusConnect

from core.deadlines import Deadline, cut_at
from core.http import CutAdapter, no_retries
from core.timewindows import ensure_aware
from fleet import secrets
from fleet.choices import PrometheusAuth
from fleet.ingest import IngestError, parse_query_response
from fleet.ingest.answers import gc_paused

if TYPE_CHECKING:
    from fleet.models import Cluster

logger = logging.getLogger(__name__)

# HTTP statuses worth retrying: overload and server-side failures. Prometheus answers 503 for a
# query that timed out or was cancelled, 422 for one that cannot run (too many samples,
# many-to-many matching), 400 for one that does not parse.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Metric names in a PromQL expression: a name right before its label matchers or range.
SELECTOR = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?=\s*[{\[])")


class PrometheusError(Exception):
    """A failed Prometheus call. ``permanent`` means a retry will fail the same way."""

    def __init__(self, message: str, *, permanent: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.status = status


def read_secret(env_name: str) -> str:
    """The named ``GPULEDGER_SECRET_…`` secret (fleet.secrets), as a permanent error if missing."""
    try:
        return secrets.read_secret(env_name)
    except secrets.SecretError as exc:
        raise PrometheusError(str(exc), permanent=True) from exc


class PrometheusClient:
    """Instant and range queries against one Prometheus HTTP API.

    ``query`` and ``query_range`` return the ``data.result`` list of a successful answer, checked
    by ``fleet.ingest.parse_query_response``: vector items ``{"metric", "value"}`` or matrix items
    ``{"metric", "values"}`` exactly as Prometheus sends them.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        bearer_token: str = "",
        basic_auth: tuple[str, str] | None = None,
        verify: bool | str = True,
        timeout: float = 30.0,
    ) -> None:
        if not url:
            raise PrometheusError("no Prometheus URL configured", permanent=True)
        self.url = url.rstrip("/")
        self.timeout = timeout
        # Set by a caller whose whole run must end on time: no call outlasts it.
        self.deadline: Deadline | None = None
        all_headers = {"Accept": "application/json"}
        all_headers.update(headers or {})
        if bearer_token:
            all_headers["Authorization"] = f"Bearer {bearer_token}"
        session = requests.Session()
        session.verify = verify
        # Retries belong to the caller (Celery backoff, the collection cursor); none in here.
        self._connect = PrometheusConnect(
            url=self.url,
            headers=all_headers,
            auth=basic_auth,
            session=session,
            timeout=timeout,
            retry=no_retries(),
            method="POST",
        )
        # In place of the adapter PrometheusConnect mounts for the URL (same: no retries).
        for prefix in ("http://", "https://", self.url):
            session.mount(prefix, CutAdapter())
        self._session = session
        self._headers = all_headers
        self._auth = basic_auth

    @classmethod
    def for_cluster(cls, cluster: Cluster) -> PrometheusClient:
        bearer = ""
        basic: tuple[str, str] | None = None
        if cluster.prometheus_auth == PrometheusAuth.BEARER:
            bearer = read_secret(cluster.prometheus_secret_env)
        elif cluster.prometheus_auth == PrometheusAuth.BASIC:
            basic = (cluster.prometheus_username, read_secret(cluster.prometheus_secret_env))
        verify: bool | str = cluster.prometheus_verify_tls
        if verify and cluster.prometheus_ca_bundle:
            verify = cluster.prometheus_ca_bundle
        return cls(
            cluster.prometheus_url,
            headers={str(k): str(v) for k, v in (cluster.prometheus_headers or {}).items()},
            bearer_token=bearer,
            basic_auth=basic,
            verify=verify,
            timeout=cluster.prometheus_timeout_seconds,
        )

    def close(self) -> None:
        self._connect.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def query(self, promql: str, at: datetime) -> list[dict[str, Any]]:
        """An instant query evaluated at ``at`` (always explicit: never "now" on the server)."""
        params = {"query": promql, "time": _timestamp(at)}
        return self._call("/api/v1/query", params, expect="vector")

    def query_range(
        self, promql: str, start: datetime, end: datetime, step_seconds: int
    ) -> list[dict[str, Any]]:
        """A range query; Prometheus answers at most 11,000 points per series, callers chunk."""
        params = {
            "query": promql,
            "start": _timestamp(start),
            "end": _timestamp(end),
            "step": str(int(step_seconds)),
        }
        return self._call("/api/v1/query_range", params, expect="matrix")

    def query_samples(self, promql: str, at: datetime) -> list[dict[str, Any]]:
        """An instant query of a range selector evaluated at ``at``: the stored samples, matrix
        items ``{"metric", "values"}``."""
        params = {"query": promql, "time": _timestamp(at)}
        return self._call("/api/v1/query", params, expect="matrix")

    def remote_read(self, request: bytes) -> tuple[bytes, str]:
        """The remote read API (``/api/v1/read``): ``request`` is a compressed ``ReadRequest``;
        the answer's body and its ``Content-Type`` (a compressed ``ReadResponse``, or frames of
        streamed chunks when the request accepts them and the server streams)."""
        headers = {
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Read-Version": "0.1.0",
        }
        response = self._post("/api/v1/read", {}, body=request, headers=headers)
        return response.content, response.headers.get("Content-Type", "")

    def fetch_raw(self, path: str, params: dict[str, str]) -> bytes:
        """The undecoded body of a successful call (the benchmark times Prometheus alone)."""
        return self._post(path, params).content

    def _call(self, path: str, params: dict[str, str], expect: str) -> list[dict[str, Any]]:
        """The answer's result, decoded by orjson: a range answer of 1,000 ClusterQueues' Kueue
        gauges over an hour took a tenth of a deep-backfilled hour's CPU in ``json``."""
        response = self._post(path, params)
        try:
            # No cycles in decoded JSON: a collection pass over millions of fresh containers
            # would find nothing.
            with gc_paused():
                payload = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            # A 200 that is not JSON is a proxy or a login page in front of the URL.
            raise PrometheusError(
                f"{path}: answer is not JSON ({response.headers.get('Content-Type', '?')})",
                permanent=True,
                status=response.status_code,
            ) from exc
        try:
            return parse_query_response(payload, expect=expect)
        except IngestError as exc:
            raise PrometheusError(
                f"{path}: malformed answer: {exc}", permanent=True, status=response.status_code
            ) from exc

    def _post(
        self,
        path: str,
        params: dict[str, str],
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> requests.Response:
        what = f"{path} ({_query_names(params.get('query', ''))})"
        deadline = Deadline(
            self.timeout, "the request timeout", "the cluster's Prometheus timeout"
        ).sooner(self.deadline)
        if deadline.expired():
            raise PrometheusError(f"{what}: not sent, {deadline} had passed", permanent=False)
        with cut_at(deadline) as cut:
            try:
                with cut.attaching():
                    return self._send(path, params, body, headers)
            except Exception as exc:
                if cut.fired:
                    raise PrometheusError(
                        f"{what}: timed out, no complete answer within {deadline}",
                        permanent=False,
                    ) from exc
                raise

    def _send(
        self,
        path: str,
        params: dict[str, str],
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> requests.Response:
        # POST form-encodes the query: long PromQL never meets a URL length limit. The answer is
        # read whole (no stream) inside the caller's cut, so a dripping server is cut off too.
        try:
            response = self._session.post(
                f"{self.url}{path}",
                data=params if body is None else body,
                headers=self._headers | (headers or {}),
                auth=self._auth,
                timeout=self.timeout,
            )
        except requests.Timeout as exc:
            raise PrometheusError(
                f"{path}: timed out after {self.timeout}s", permanent=False
            ) from exc
        except requests.exceptions.SSLError as exc:
            raise PrometheusError(f"{path}: TLS error: {exc}", permanent=True) from exc
        except requests.ConnectionError as exc:
            raise PrometheusError(f"{path}: cannot connect: {exc}", permanent=False) from exc
        except requests.RequestException as exc:
            raise PrometheusError(f"{path}: request failed: {exc}", permanent=False) from exc
        if response.status_code != 200:
            raise _status_error(path, response)
        return response


def _status_error(path: str, response: requests.Response) -> PrometheusError:
    status = response.status_code
    detail = ""
    try:
        body = response.json()
        detail = f"{body.get('errorType', '')}: {body.get('error', '')}"
    except ValueError:
        detail = response.text[:200]
    permanent = status not in TRANSIENT_STATUSES and not 500 <= status < 600
    return PrometheusError(
        f"{path}: HTTP {status} {detail}".strip(), permanent=permanent, status=status
    )


def _query_names(promql: str) -> str:
    """The metrics a query reads, for messages (the PromQL itself runs to hundreds of bytes)."""
    names = list(dict.fromkeys(SELECTOR.findall(promql)))
    if names:
        return ", ".join(names)
    return promql if len(promql) <= 80 else promql[:77] + "..."


def _timestamp(moment: datetime) -> str:
    return f"{ensure_aware(moment).timestamp():.3f}"
