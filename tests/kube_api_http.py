"""The HTTP side of ``tests.kube_api_server.FakeKubeAPI``: one request handler speaking the
Kubernetes protocol (discovery, LIST, WATCH streams, GET, merge-PATCH, the visibility API), and
the misbehaviours ``FakeKubeAPI.fail`` and ``misbehave`` inject (dropped connections, lies,
answers cut half-way, hangs, answers dripped a byte at a time).
"""

from __future__ import annotations

import json
import select
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.kube_api_server import (
    KUEUE_GROUP,
    SUBJECT_ACCESS_REVIEWS,
    VISIBILITY_GROUP,
    RecordedWrite,
    Resource,
    dumps,
    status_body,
)
from tests.kube_api_writes import RecordedRequest

if TYPE_CHECKING:
    from tests.kube_api_server import FakeKubeAPI


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-stream (a watch it stopped reading) is normal here.
        return


class DripWriter:
    """Writes what it is given one byte every ``seconds`` (the whole response: status line,
    headers and body), until the client goes away or the server stops."""

    def __init__(self, raw: Any, seconds: float, api: FakeKubeAPI) -> None:
        self.raw = raw
        self.seconds = seconds
        self.api = api

    def write(self, data: bytes) -> int:
        for index in range(len(data)):
            self.raw.write(data[index : index + 1])
            self.raw.flush()
            until = time.monotonic() + self.seconds
            with self.api._lock:
                while not self.api._closing and time.monotonic() < until:
                    self.api._lock.wait(until - time.monotonic())
                if self.api._closing:
                    raise BrokenPipeError("server stopping")
        return len(data)

    def flush(self) -> None:
        self.raw.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


class Handler(BaseHTTPRequestHandler):
    api: FakeKubeAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self._truncate:
            # Headers promise the whole body; half of it comes, then the connection goes.
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)

    _truncate = False

    def _client_gone(self) -> bool:
        """Whether the client closed its end (a readable socket with nothing left to read)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _hang(self) -> None:
        """Send nothing until the client gives up or the server stops."""
        api = self.api
        while not self._client_gone():
            with api._lock:
                if api._closing:
                    break
                api._lock.wait(0.05)
        self.close_connection = True

    def _status(self, code: int, message: str, reason: str | None = None) -> None:
        self._send(code, dumps(status_body(code, message, reason)))

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        api = self.api
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        body = b""
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            body = self.rfile.read(length)
        with api._lock:
            api.requests.append((method, path, query))
            try:
                decoded = json.loads(body) if body else None
            except ValueError:
                decoded = None
            api.recorded.append(
                RecordedRequest(method, path, query, dict(self.headers.items()), body, decoded)
            )
            if method != "GET":
                api.write_log.append(
                    RecordedWrite(method, path, query, self.headers.get("Content-Type") or "", body)
                )

        if self.headers.get("Authorization") != f"Bearer {api.token}":
            self._status(401, "Unauthorized", "Unauthorized")
            return
        failure = api._take_failure(method, path, query)
        if failure is not None and failure.hang:
            self._hang()
            return
        if failure is not None and failure.drip_seconds:
            self.wfile = DripWriter(self.wfile, failure.drip_seconds, api)  # type: ignore[assignment]
            self.close_connection = True  # the next request on it would drip too
            failure = None
        if failure is not None and failure.truncate:
            self._truncate = True
            failure = None
        if failure is not None and failure.body is not None:
            body = failure.body if isinstance(failure.body, bytes) else dumps(failure.body)
            self._send(failure.status, body)
            return
        if failure is not None:
            if failure.status == 0:
                # A dropped connection: the client sees no answer at all.
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)
                return
            self._status(failure.status, failure.message or "injected failure", failure.reason)
            return

        if method == "GET":
            doc = api.discovery(path)
            if doc is not None:
                self._send(200, dumps(doc))
                return
            if path == "/version":
                self._send(200, dumps({"major": "1", "minor": "34", "gitVersion": "v1.34.0"}))
                return
            if self._visibility(path, query):
                return
        if method == "POST" and path == SUBJECT_ACCESS_REVIEWS:
            code, review = api.subject_access_review(decoded)
            self._send(code, dumps(review))
            return
        routed = api.route(path)
        if routed is None:
            self._status(404, "the server could not find the requested resource", "NotFound")
            return
        resource, api_version, namespace, name, sub = routed
        if method == "GET" and not name:
            if query.get("watch") in ("true", "1"):
                self._watch(resource, api_version, namespace, query)
                return
            code, payload = api.list_page(resource, api_version, namespace, query)
            self._send(code, payload)
            return
        if method == "GET" and name and not sub:
            with api._lock:
                encoded = api._stores[resource.key].encoded.get((namespace, name))
            if encoded is None:
                self._status(404, f'{resource.plural} "{name}" not found', "NotFound")
            else:
                self._send(200, encoded)
            return
        if method == "PATCH" and name and not sub:
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            code, payload = api.patch(resource, namespace, name, body, content_type, query)
            self._send(code, payload)
            return
        self._status(405, f"{method} is not supported here", "MethodNotAllowed")

    def _visibility(self, path: str, query: dict[str, str]) -> bool:
        parts = path.strip("/").split("/")
        if len(parts) != 6 or parts[:2] != ["apis", VISIBILITY_GROUP]:
            return False
        if parts[2] not in self.api.visibility_versions:
            return False
        if parts[3] != "clusterqueues" or parts[5] != "pendingworkloads":
            return False
        self._send(200, dumps(self.api.pending_workloads(unquote(parts[4]), query)))
        return True

    def _watch(
        self, resource: Resource, api_version: str, namespace: str, query: dict[str, str]
    ) -> None:
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            dropped = False
            for event in self.api.watch_events(
                resource, namespace, query.get("resourceVersion", ""), deadline
            ):
                if event is None:
                    dropped = True
                    break
                self._chunk(event + b"\n")
            if not dropped and query.get("allowWatchBookmarks") in ("true", "1"):
                bookmark = {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": resource.kind,
                        "apiVersion": api_version
                        if resource.group != KUEUE_GROUP
                        else f"{KUEUE_GROUP}/{self.api.kueue_versions[0]}",
                        "metadata": {"resourceVersion": str(self.api.resource_version)},
                    },
                }
                self._chunk(dumps(bookmark) + b"\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
