"""A small Kubernetes API server for tests and benchmarks.

It speaks enough of the protocol for the official ``kubernetes`` client: discovery (``/api``,
``/apis``, group and version resource lists), LIST with ``limit`` / ``continue`` and a list
``resourceVersion`` (consistent snapshots across pages), WATCH streams of newline-delimited JSON
events that honour ``timeoutSeconds`` (``410 Gone`` for compacted resource versions), single GETs,
PATCH (merge and apply, ``dryRun``, resourceVersion conflicts, 422 causes:
``tests.kube_api_writes``), ``Status`` bodies for errors, bearer-token auth, and Kueue's
visibility API. Every request is counted in ``requests`` and kept whole in ``recorded``;
writes are also kept (content type, body) in ``write_log``.

Tests change the served state with ``add`` / ``modify`` / ``delete`` (each bumps the resource
version and queues a watch event) and inject failures with ``fail`` (an error status or a dropped
connection) and ``misbehave`` (the upstream lies and hangs seen in the field: a 200 whose body is
not the list, a response cut half-way, a server that never answers, one that drips its answer a
byte at a time). Objects are kept as encoded JSON too, so a 50,000-object LIST is assembled from
pre-serialized bytes and the server never dominates a benchmark. It binds to 127.0.0.1 on a free
port; ``tests.kube_api_http`` holds its request handler, ``tests.kube_api_discovery`` its
discovery documents, ``tests.kueue_fixtures`` the recorded fleet it usually serves.

By default it serves Kueue's group and core Pods and Nodes, nothing else. Built with
``volcano_versions`` (``scheduling.volcano.sh`` Queue, PodGroup), ``kai_versions``
(``scheduling.run.ai`` Queue at v2, PodGroup at v2alpha2) or ``serve_resource_quotas`` (core
ResourceQuota) it serves those too, with the same LIST / WATCH / PATCH protocol;
``tests.scheduler_fixtures`` holds their recorded fleets. Volcano and KAI kinds are named
``"Queue.scheduling.volcano.sh"`` etc. in ``load`` / ``add`` / ``modify`` / ``delete``.
"""

from __future__ import annotations

import base64
import copy
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from tests.http_serving import serving_thread

# The recorded fleet lives in its own module; its helpers stay importable from here, where the
# benchmarks and older tests look for them.
from tests.kueue_fixtures import FIXTURES as FIXTURES
from tests.kueue_fixtures import KUEUE_GROUP
from tests.kueue_fixtures import fixture_items as fixture_items
from tests.kueue_fixtures import load_fixtures as load_fixtures
from tests.scheduler_fixtures import KAI_GROUP, VOLCANO_GROUP

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True)
class Resource:
    kind: str
    plural: str
    group: str  # "" for the core group
    namespaced: bool
    # The versions of its group this kind is served at; empty: every version the group serves.
    versions: tuple[str, ...] = ()

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def key(self) -> str:
        """Its name in ``RESOURCES``: the plural, qualified by the group outside core and Kueue
        (Volcano and KAI both have ``queues`` and ``podgroups``)."""
        return resource_key(self.group, self.plural)


def resource_key(group: str, plural: str) -> str:
    return plural if group in ("", KUEUE_GROUP) else f"{plural}.{group}"


RESOURCES = {
    r.key: r
    for r in (
        Resource("ResourceFlavor", "resourceflavors", KUEUE_GROUP, False),
        Resource("Cohort", "cohorts", KUEUE_GROUP, False),
        Resource("ClusterQueue", "clusterqueues", KUEUE_GROUP, False),
        Resource("LocalQueue", "localqueues", KUEUE_GROUP, True),
        Resource("Workload", "workloads", KUEUE_GROUP, True),
        Resource("WorkloadPriorityClass", "workloadpriorityclasses", KUEUE_GROUP, False),
        Resource("Pod", "pods", "", True),
        Resource("Node", "nodes", "", False),
        Resource("ResourceQuota", "resourcequotas", "", True),
        Resource("Queue", "queues", VOLCANO_GROUP, False),
        Resource("PodGroup", "podgroups", VOLCANO_GROUP, True),
        Resource("Queue", "queues", KAI_GROUP, False, ("v2",)),
        Resource("PodGroup", "podgroups", KAI_GROUP, True, ("v2alpha2",)),
    )
}
# Kinds as tests name them: plain for core and Kueue, "Kind.group" for Volcano and KAI.
KIND_TO_PLURAL = {
    (r.kind if r.key == r.plural else f"{r.kind}.{r.group}"): r.key for r in RESOURCES.values()
}
# Served only when the server is built to serve them, so the default API stays Kueue's.
OPT_IN = {"resourcequotas"} | {k for k, r in RESOURCES.items() if r.key != r.plural}
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


def status_body(code: int, message: str, reason: str | None = None) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class Failure:
    """An injected failure: the ``times`` matching requests after ``after`` matching ones fail.

    By default the request is answered with ``status`` and a ``Status`` body (0 drops the
    connection). ``body`` answers ``status`` with that document instead; ``hang`` sends nothing
    until the client gives up; ``drip_seconds`` sends the real answer one byte every that many
    seconds; ``truncate`` sends the real answer's headers and half its body, then hangs up.
    """

    match: Callable[[str, str, dict[str, str]], bool]
    status: int  # 0 = drop the connection without an answer
    times: int = 1
    after: int = 0
    message: str = ""
    reason: str | None = None
    body: Any = None
    hang: bool = False
    drip_seconds: float = 0.0
    truncate: bool = False
    seen: int = 0
    fired: int = 0


@dataclass(frozen=True)
class RecordedWrite:
    """A request that is not a GET, as the server received it (for asserting writes exactly)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class _Store:
    resource: Resource
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    encoded: dict[tuple[str, str], bytes] = field(default_factory=dict)
    # (resourceVersion, event type, encoded object), oldest first.
    events: list[tuple[int, str, bytes]] = field(default_factory=list)
    # Watches from below this resourceVersion get 410 Gone (etcd compaction).
    compacted_rv: int = 0


class FakeKubeAPI:
    """A threaded loopback HTTP server holding Kubernetes objects in memory."""

    def __init__(
        self,
        *,
        kueue_versions: Iterable[str] = ("v1beta2",),
        visibility_versions: Iterable[str] = (),
        volcano_versions: Iterable[str] = (),
        kai_versions: Iterable[str] = (),
        serve_resource_quotas: bool = False,
        served_kinds: Iterable[str] | None = None,
        token: str = "test-token",  # noqa: S107
        start_resource_version: int = 5_000_000,
    ) -> None:
        self.kueue_versions = tuple(kueue_versions)
        self.visibility_versions = tuple(visibility_versions)
        # The CRD groups served, each with its versions (the preferred one first).
        self.group_versions = {
            group: versions
            for group, versions in (
                (KUEUE_GROUP, self.kueue_versions),
                (VOLCANO_GROUP, tuple(volcano_versions)),
                (KAI_GROUP, tuple(kai_versions)),
            )
            if versions
        }
        if served_kinds is not None:
            self.served_plurals = {KIND_TO_PLURAL[k] for k in served_kinds}
        else:
            self.served_plurals = {
                key
                for key, res in RESOURCES.items()
                if key not in OPT_IN
                or (key == "resourcequotas" and serve_resource_quotas)
                or res.group in self.group_versions
            }
        self.token = token
        self._rv = start_resource_version
        self._lock = threading.Condition()
        self._stores = {key: _Store(res) for key, res in RESOURCES.items()}
        self._snapshots: dict[str, tuple[int, list[bytes]]] = {}
        self._snapshot_seq = 0
        self._failures: list[Failure] = []
        self.pending_override: dict[str, list[dict[str, Any]]] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        # Every request in full (headers, body): tests.kube_api_writes.RecordedRequest.
        self.recorded: list[Any] = []
        # Extra admission rules for writes: (resource, object) -> Status causes.
        self.validators: list[Callable[[Resource, dict[str, Any]], list[dict[str, str]]]] = []
        self.write_log: list[RecordedWrite] = []
        # What SubjectAccessReviews allow: (subject, namespace, verb, resource) with subject
        # "user:NAME" or "group:NAME" (``allow``); everything else is denied.
        self.access_rules: set[tuple[str, str, str, str]] = set()
        self._closing = False
        self._watch_generation = 0
        self._httpd: Any = None
        self._thread: threading.Thread | None = None
        self.kubeconfig: Path | None = None  # the last kubeconfig written for this server

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeKubeAPI:
        from tests.kube_api_http import Handler, Server  # it reads this module's helpers

        handler = type("Handler", (Handler,), {"api": self})
        self._httpd = Server(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = serving_thread(self._httpd)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> FakeKubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: Path, context: str = "fake", token: str | None = None) -> Path:
        """A kubeconfig with one cluster, user and context for this server."""
        self.kubeconfig = write_kubeconfig(path, self.url, token or self.token, context)
        return self.kubeconfig

    # --- state -------------------------------------------------------------------------------
    @staticmethod
    def _key(obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    @property
    def resource_version(self) -> int:
        return self._rv

    def load(self, kind: str, objects: Iterable[dict[str, Any]]) -> None:
        """Put objects in place without watch events (the state before any client looks)."""
        store = self._stores[KIND_TO_PLURAL[kind]]
        with self._lock:
            for obj in objects:
                meta = obj.setdefault("metadata", {}) if isinstance(obj, dict) else {}
                if not isinstance(meta, dict):
                    meta = {}
                if not meta.get("resourceVersion"):
                    meta["resourceVersion"] = str(self._next_rv())
                key = self._key(obj)
                if key in store.objects:
                    # Malformed fixtures may lack a name; keep every one of them servable.
                    key = (key[0], f"{key[1]}#{len(store.objects)}")
                store.objects[key] = obj
                store.encoded[key] = json.dumps(obj, separators=(",", ":")).encode()
            self._rv = max(self._rv, self._max_rv(store))

    @staticmethod
    def _max_rv(store: _Store) -> int:
        best = 0
        for obj in store.objects.values():
            try:
                best = max(best, int(obj["metadata"]["resourceVersion"]))
            except (KeyError, TypeError, ValueError):
                continue
        return best

    def _record(self, store: _Store, event: str, obj: dict[str, Any], key: tuple[str, str]) -> None:
        rv = self._next_rv()
        obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
        encoded = json.dumps(obj, separators=(",", ":")).encode()
        if event == "DELETED":
            store.objects.pop(key, None)
            store.encoded.pop(key, None)
        else:
            store.objects[key] = obj
            store.encoded[key] = encoded
        store.events.append((rv, event, encoded))
        self._lock.notify_all()

    def add(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        store = self._stores[KIND_TO_PLURAL[kind]]
        with self._lock:
            obj = copy.deepcopy(obj)
            self._record(store, "ADDED", obj, self._key(obj))
            return obj

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._stores[KIND_TO_PLURAL[kind]].objects[(namespace, name)])

    def objects(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(o) for o in self._stores[KIND_TO_PLURAL[kind]].objects.values()]

    def modify(
        self,
        kind: str,
        name: str,
        change: Callable[[dict[str, Any]], None],
        namespace: str = "",
        *,
        silent: bool = False,
    ) -> dict[str, Any]:
        """Apply ``change`` to a copy of the object, store it and queue a MODIFIED event.

        ``silent`` stores it without an event, as if the event had been compacted away.
        """
        store = self._stores[KIND_TO_PLURAL[kind]]
        with self._lock:
            obj = copy.deepcopy(store.objects[(namespace, name)])
            change(obj)
            self._record(store, "MODIFIED", obj, (namespace, name))
            if silent:
                store.events.pop()
            return obj

    def close_watches(self) -> None:
        """End every open watch stream now (as an API server restart would)."""
        with self._lock:
            self._watch_generation += 1
            self._lock.notify_all()

    def watch_count(self, kind: str) -> int:
        """How many WATCH requests of a kind the server has answered so far."""
        resource = RESOURCES[KIND_TO_PLURAL[kind]]
        with self._lock:
            return sum(
                1
                for method, path, query in self.requests
                if method == "GET" and _lists(resource, path) and query.get("watch") == "true"
            )

    def list_count(self, kind: str) -> int:
        """How many LIST requests (pages) of a kind the server has answered so far."""
        resource = RESOURCES[KIND_TO_PLURAL[kind]]
        with self._lock:
            return sum(
                1
                for method, path, query in self.requests
                if method == "GET" and _lists(resource, path) and query.get("watch") != "true"
            )

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        store = self._stores[KIND_TO_PLURAL[kind]]
        with self._lock:
            obj = copy.deepcopy(store.objects[(namespace, name)])
            self._record(store, "DELETED", obj, (namespace, name))

    def send_event(self, kind: str, event_type: str, obj: Any) -> None:
        """Send a raw event on ``kind``'s watch streams without changing what is stored: what a
        confused proxy or aggregation layer might pass on (another kind, no metadata...)."""
        store = self._stores[KIND_TO_PLURAL[kind]]
        with self._lock:
            store.events.append((self._next_rv(), event_type, dumps(obj)))
            self._lock.notify_all()

    def compact(self, kind: str | None = None) -> None:
        """Forget watch history: watches from any resourceVersion before now get 410 Gone."""
        with self._lock:
            plurals = [KIND_TO_PLURAL[kind]] if kind else list(self._stores)
            for plural in plurals:
                store = self._stores[plural]
                store.compacted_rv = self._rv
                store.events.clear()
            self._lock.notify_all()

    def fail(
        self,
        match: str | Callable[[str, str, dict[str, str]], bool],
        status: int,
        *,
        times: int = 1,
        after: int = 0,
        message: str = "",
        reason: str | None = None,
        method: str | None = None,
    ) -> Failure:
        """Fail matching requests: ``match`` is a path substring or ``(method, path, query)``."""
        if isinstance(match, str):
            needle = match

            def predicate(m: str, p: str, q: dict[str, str]) -> bool:
                return needle in p and (method is None or m == method)

        else:
            predicate = match
        failure = Failure(predicate, status, times, after, message, reason)
        with self._lock:
            self._failures.append(failure)
        return failure

    def misbehave(
        self,
        match: str | Callable[[str, str, dict[str, str]], bool],
        *,
        body: Any = None,
        status: int = 200,
        hang: bool = False,
        drip_seconds: float = 0.0,
        truncate: bool = False,
        times: int = 1,
        after: int = 0,
        method: str | None = None,
    ) -> Failure:
        """Answer matching requests wrongly: ``body`` with ``status`` (a lie), or not at all
        (``hang``), or slowly (``drip_seconds`` per byte), or half (``truncate``)."""
        failure = self.fail(match, status, times=times, after=after, method=method)
        failure.body, failure.hang = body, hang
        failure.drip_seconds, failure.truncate = drip_seconds, truncate
        return failure

    def clear_failures(self) -> None:
        with self._lock:
            self._failures.clear()

    def _take_failure(self, method: str, path: str, query: dict[str, str]) -> Failure | None:
        with self._lock:
            for failure in self._failures:
                if failure.fired >= failure.times or not failure.match(method, path, query):
                    continue
                failure.seen += 1
                if failure.seen <= failure.after:
                    continue
                failure.fired += 1
                return failure
        return None

    # --- request handling --------------------------------------------------------------------
    def discovery(self, path: str) -> dict[str, Any] | None:
        """The discovery document at ``path`` (``/api``, ``/apis``, a group or group version)."""
        from tests.kube_api_discovery import discovery

        return discovery(self, path)

    def route(self, path: str) -> tuple[Resource, str, str, str, str] | None:
        """(resource, apiVersion, namespace, name, subresource) for an object or list path."""
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "v1"]:
            group, api_version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis" and parts[1] in self.group_versions:
            group, version = parts[1], parts[2]
            if version not in self.group_versions[group]:
                return None
            api_version, rest = f"{group}/{version}", parts[3:]
        else:
            return None
        namespace = ""
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            return None
        key = resource_key(group, rest[0])
        if key not in RESOURCES or key not in self.served_plurals:
            return None
        resource = RESOURCES[key]
        if resource.group != group:
            return None
        if resource.versions and api_version.rsplit("/", 1)[-1] not in resource.versions:
            return None
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        return resource, api_version, namespace, name, sub

    def list_page(
        self,
        resource: Resource,
        api_version: str,
        namespace: str,
        query: dict[str, str],
    ) -> tuple[int, bytes]:
        limit = int(query.get("limit") or 0)
        token = query.get("continue") or ""
        with self._lock:
            if token:
                try:
                    decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                    snapshot_id, offset = decoded["s"], int(decoded["o"])
                    list_rv, items = self._snapshots[snapshot_id]
                except (ValueError, KeyError, TypeError):
                    return 410, dumps(
                        status_body(410, "The provided continue parameter is too old", "Expired")
                    )
            else:
                store = self._stores[resource.key]
                keys = sorted(k for k in store.encoded if not namespace or k[0] == namespace)
                items = [store.encoded[k] for k in keys]
                list_rv, offset = self._rv, 0
                self._snapshot_seq += 1
                snapshot_id = str(self._snapshot_seq)
                if limit and len(items) > limit:
                    self._snapshots[snapshot_id] = (list_rv, items)
                    for old in sorted(self._snapshots, key=int)[:-16]:
                        del self._snapshots[old]
        page = items[offset : offset + limit] if limit else items[offset:]
        next_offset = offset + len(page)
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if limit and next_offset < len(items):
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"s": snapshot_id, "o": next_offset}).encode()
            ).decode()
            meta["remainingItemCount"] = len(items) - next_offset
        head = {
            "apiVersion": api_version,
            "kind": f"{resource.kind}List",
            "metadata": meta,
        }
        prefix = dumps(head)[:-1] + b',"items":['
        return 200, prefix + b",".join(page) + b"]}"

    def watch_events(
        self,
        resource: Resource,
        namespace: str,
        since: str,
        deadline: float,
    ) -> Iterable[bytes | None]:
        """Encoded watch events after ``since`` until ``deadline``; ERROR 410 when compacted.

        Yields None last when ``close_watches`` cut the stream short.
        """
        store = self._stores[resource.key]
        with self._lock:
            generation = self._watch_generation
            if since in ("", "0"):
                cursor = self._rv
                initial = [
                    b'{"type":"ADDED","object":' + enc + b"}"
                    for k, enc in sorted(store.encoded.items())
                    if not namespace or k[0] == namespace
                ]
            else:
                try:
                    cursor = int(since)
                except ValueError:
                    cursor = -1
                initial = []
                if cursor < store.compacted_rv:
                    message = f"too old resource version: {since} ({store.compacted_rv})"
                    error = status_body(410, message, "Expired")
                    yield dumps({"type": "ERROR", "object": error})
                    return
        yield from initial
        while True:
            with self._lock:
                fresh = [e for e in store.events if e[0] > cursor]
                if not fresh:
                    remaining = deadline - time.monotonic()
                    if generation != self._watch_generation:
                        yield None  # dropped: no closing bookmark
                        return
                    if remaining <= 0 or self._closing:
                        return
                    self._lock.wait(min(remaining, 0.5))
                    continue
            for rv, event, encoded in fresh:
                cursor = rv
                if namespace and f'"namespace":"{namespace}"'.encode() not in encoded:
                    continue
                yield b'{"type":"' + event.encode() + b'","object":' + encoded + b"}"

    def pending_workloads(self, cluster_queue: str, query: dict[str, str]) -> dict[str, Any]:
        """Kueue's PendingWorkloadsSummary of a ClusterQueue: highest priority first, then FIFO."""
        if cluster_queue in self.pending_override:
            items = self.pending_override[cluster_queue]
        else:
            with self._lock:
                local_queues = {
                    key: (obj.get("spec") or {}).get("clusterQueue")
                    for key, obj in self._stores["localqueues"].objects.items()
                }
                pending = []
                for (ns, name), wl in self._stores["workloads"].objects.items():
                    spec, status = wl.get("spec") or {}, wl.get("status") or {}
                    if local_queues.get((ns, spec.get("queueName"))) != cluster_queue:
                        continue
                    true_conditions = {
                        c.get("type")
                        for c in status.get("conditions") or []
                        if c.get("status") == "True"
                    }
                    if true_conditions & {"QuotaReserved", "Finished"}:
                        continue
                    if spec.get("active") is False:
                        continue
                    created = (wl.get("metadata") or {}).get("creationTimestamp", "")
                    pending.append((-(spec.get("priority") or 0), created, ns, name, spec))
            pending.sort()
            items, per_lq = [], {}
            for position, (neg_priority, _created, ns, name, spec) in enumerate(pending):
                lq = spec.get("queueName", "")
                lq_position = per_lq.get((ns, lq), 0)
                per_lq[(ns, lq)] = lq_position + 1
                items.append(
                    {
                        "metadata": {"name": name, "namespace": ns, "creationTimestamp": _created},
                        "priority": -neg_priority,
                        "localQueueName": lq,
                        "positionInClusterQueue": position,
                        "positionInLocalQueue": lq_position,
                    }
                )
        offset = int(query.get("offset") or 0)
        limit = int(query.get("limit") or 1000)
        return {
            "kind": "PendingWorkloadsSummary",
            "apiVersion": f"{VISIBILITY_GROUP}/{self.visibility_versions[0]}",
            "metadata": {"creationTimestamp": None},
            "items": items[offset : offset + limit],
        }

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: bytes,
        content_type: str = "application/merge-patch+json",
        query: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """A PATCH (merge or apply, dryRun, resourceVersion, validation): tests.kube_api_writes."""
        from tests.kube_api_writes import patch

        code, answer = patch(self, resource, namespace, name, body, content_type, query or {})
        return code, answer if isinstance(answer, bytes) else dumps(answer)

    def allow(
        self, subject: str, namespace: str, verb: str = "list", resource: str = "pods"
    ) -> None:
        """Let ``subject`` ("user:NAME" or "group:NAME") ``verb`` core ``resource`` in
        ``namespace``, as SubjectAccessReviews will answer."""
        with self._lock:
            self.access_rules.add((subject, namespace, verb, resource))

    def subject_access_review(self, body: Any) -> tuple[int, dict[str, Any]]:
        """The answer to a POSTed SubjectAccessReview: the review with ``status.allowed``."""
        spec = body.get("spec") if isinstance(body, dict) else None
        attributes = spec.get("resourceAttributes") if isinstance(spec, dict) else None
        if (
            not isinstance(spec, dict)
            or not isinstance(attributes, dict)
            or body.get("kind") != "SubjectAccessReview"
        ):
            return 400, status_body(
                400, "not a SubjectAccessReview with resourceAttributes", "BadRequest"
            )
        subjects = {f"user:{spec.get('user', '')}"} | {
            f"group:{group}" for group in spec.get("groups") or []
        }
        wanted = (
            attributes.get("namespace", ""),
            attributes.get("verb", ""),
            attributes.get("resource", ""),
        )
        with self._lock:
            allowed = attributes.get("group", "") == "" and any(
                (subject, *wanted) in self.access_rules for subject in subjects
            )
        status: dict[str, Any] = {"allowed": allowed}
        if allowed:
            status["reason"] = "allowed by the test server's rules"
        return 201, {**body, "status": status}

    def access_reviews(self) -> list[Any]:
        """The bodies of every SubjectAccessReview received, in order."""
        with self._lock:
            return [
                request.json
                for request in self.recorded
                if request.method == "POST" and request.path == SUBJECT_ACCESS_REVIEWS
            ]

    def writes(self, plural: str = "") -> list[Any]:
        """The PATCH requests received (``RecordedRequest``), of one resource when named."""
        from tests.kube_api_writes import writes

        return writes(self, plural)


def _lists(resource: Resource, path: str) -> bool:
    """Whether ``path`` is the collection of ``resource`` (in one namespace or all)."""
    prefix = "/api/v1/" if not resource.group else f"/apis/{resource.group}/"
    return path.endswith(f"/{resource.plural}") and path.startswith(prefix)


def write_kubeconfig(path: Path, url: str, token: str, context: str = "fake") -> Path:
    """A kubeconfig (JSON is valid YAML) with one cluster, token user and context."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": url}}],
        "users": [{"name": f"{context}-user", "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": f"{context}-user"}}],
        "current-context": context,
    }
    path.write_text(json.dumps(config))
    return path


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()
