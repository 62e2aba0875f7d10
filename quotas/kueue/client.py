"""``KueueClient``: one cluster's Kubernetes API server, through the official client.

It owns configuration (a kubeconfig context, or the pod's service account), discovery of the
served Kueue versions and of the visibility API, paginated LISTs, WATCH streams, retries and
deadlines (see the package docstring).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import urllib3
import yaml
from django.conf import settings
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION
from urllib3.util.retry import Retry

from core.deadlines import Deadline, cut_at, guard_pool_manager
from quotas.constants import KUEUE_GROUP
from quotas.kueue.errors import (
    IncompleteList,
    KubeError,
    KubeTimeout,
    error_from_status,
    map_api_exception,
    status_message,
)
from quotas.kueue.payloads import (
    KINDS_BY_NAME,
    Kind,
    ListResult,
    WatchEvent,
    event_problem,
    list_items,
    requests_gpus,
    slim,
)

if TYPE_CHECKING:
    from fleet.models import Cluster

logger = logging.getLogger(__name__)

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
# Preferred first. Kueue v0.15+ serves v1beta2; v1beta1 stays served (deprecated) until removal.
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")
# Objects per LIST page. kube-apiserver serves 500 cheaply from its watch cache; bigger pages
# mostly grow the client's peak memory (a page is decoded whole).
PAGE_SIZE = 500
# Pending workloads per visibility request (Kueue's own default limit is 1000).
VISIBILITY_PAGE_SIZE = 1000
CONNECT_TIMEOUT_SECONDS = 10.0
READ_TIMEOUT_SECONDS = 60.0
# One call as a whole (connect, the full answer, urllib3's retries) ends by this. A LIST page of
# 500 objects takes well under a second from a healthy API server.
REQUEST_DEADLINE_SECONDS = 60.0
# Extra time past a watch's timeoutSeconds before the stream counts as stalled and is cut.
WATCH_GRACE_SECONDS = 10.0
# urllib3's retries of a failed connect or read, inside the call's deadline.
RETRIES = Retry(total=2, backoff_factor=0.5, status=0, raise_on_status=False)
# The most pages one LIST may take (continue tokens): 5,000 x PAGE_SIZE objects is 2.5 million.
MAX_PAGES = 5000


@dataclass(frozen=True)
class Discovery:
    """What the API server serves: the Kueue version, its resources, the visibility API."""

    kueue_version: str | None
    kueue_plurals: frozenset[str]
    visibility_version: str | None
    # Every API group served, with its versions (``/apis``): which quota source the cluster
    # runs (quotas/sources) and at which version.
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def serves(self, kind: Kind) -> bool:
        if not kind.group:
            return True
        return self.kueue_version is not None and kind.plural in self.kueue_plurals

    def group_versions(self, group: str) -> tuple[str, ...]:
        """The versions of ``group`` the server serves (preferred first); empty when none."""
        return dict(self.groups).get(group, ())


class KueueClient:
    """Reads Kueue objects, GPU pods and nodes from one API server."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        page_size: int = PAGE_SIZE,
        name: str = "",
        request_seconds: float = REQUEST_DEADLINE_SECONDS,
    ) -> None:
        self.api_client = api_client
        # Every connection of this client can be cut at a call's deadline (core.deadlines).
        guard_pool_manager(api_client.rest_client.pool_manager)
        self.page_size = page_size
        self.request_seconds = request_seconds
        self.name = name or api_client.configuration.host
        self.custom = k8s.CustomObjectsApi(api_client)
        self.core = k8s.CoreV1Api(api_client)
        self.apis = k8s.ApisApi(api_client)
        self._discovery: Discovery | None = None
        self._lock = threading.Lock()
        # Whether a cluster without Kueue is worth a warning (not when another source serves).
        self.expects_kueue = True

    @classmethod
    def for_cluster(
        cls,
        cluster: Cluster,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        page_size: int = PAGE_SIZE,
        request_seconds: float = REQUEST_DEADLINE_SECONDS,
    ) -> KueueClient:
        """A client for the cluster: its service account when in-cluster, else a kubeconfig.

        The context is ``context``, else the cluster's ``kube_context``, else
        ``GPULEDGER_KUBE_CONTEXT``, else the kubeconfig's current context.
        """
        configuration = k8s.Configuration()
        config_file = (
            kubeconfig or settings.KUBECONFIG or os.path.expanduser(KUBE_CONFIG_DEFAULT_LOCATION)
        )
        source = "the in-cluster service account" if cluster.kube_in_cluster else config_file
        try:
            if cluster.kube_in_cluster:
                k8s_config.load_incluster_config(client_configuration=configuration)
            else:
                k8s_config.load_kube_config(
                    config_file=config_file,
                    context=context
                    or cluster.kube_context
                    or settings.GPULEDGER_KUBE_CONTEXT
                    or None,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except yaml.YAMLError as exc:
            # A syntax error: name the file and the place, not a parser traceback.
            where = getattr(exc, "problem_mark", None)
            line = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
            raise KubeError(
                f"cluster {cluster.name}: kubeconfig {config_file} is not valid YAML{line}: "
                f"{getattr(exc, 'problem', None) or exc}",
                None,
                True,
                reason="Config",
            ) from exc
        except (ConfigException, OSError, ValueError, TypeError, AttributeError) as exc:
            raise KubeError(
                f"cluster {cluster.name}: cannot load Kubernetes configuration from {source}: "
                f"{exc}",
                None,
                True,
                reason="Config",
            ) from exc
        configuration.retries = RETRIES
        return cls(
            k8s.ApiClient(configuration),
            page_size=page_size,
            name=cluster.name,
            request_seconds=request_seconds,
        )

    def close(self) -> None:
        self.api_client.close()

    def __enter__(self) -> KueueClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing ----------------------------------------------------------------------------
    def _deadline(self, run_deadline: Deadline | None, seconds: float | None = None) -> Deadline:
        own = Deadline(self.request_seconds if seconds is None else seconds, "the request deadline")
        return own.sooner(run_deadline)

    def _timeout(
        self, what: str, deadline: Deadline, run_deadline: Deadline | None, *, started: bool
    ) -> KubeTimeout:
        if started:
            message = f"{what}: no complete answer within {deadline}"
        else:
            message = f"{what}: not sent, {deadline} had passed"
        return KubeTimeout(message, deadline=deadline, run_deadline=deadline is run_deadline)

    def _call(self, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        """Send one request (inside a ``Cut``'s ``attaching`` block); errors as ``KubeError``."""
        kwargs.setdefault("_request_timeout", (CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS))
        try:
            response = func(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            raise map_api_exception(exc, what) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise KubeError(f"{what}: {exc}", None, False, reason="Connection") from exc
        except OSError as exc:
            raise KubeError(f"{what}: {exc}", None, False, reason="Connection") from exc
        return response

    def _read_json(self, what: str, response: Any) -> Any:
        try:
            data = response.data
        except urllib3.exceptions.HTTPError as exc:
            raise KubeError(f"{what}: {exc}", None, False, reason="Connection") from exc
        finally:
            response.release_conn()
        try:
            return json.loads(data)
        except ValueError as exc:
            # A proxy's HTML error page or a truncated body: worth another try later.
            raise KubeError(f"{what}: answer is not JSON ({exc})", None, False) from exc

    def _fetch_json(
        self, what: str, run_deadline: Deadline | None, func: Any, *args: Any, **kwargs: Any
    ) -> Any:
        """One whole GET (request, answer, retries) by its deadline, decoded from JSON."""
        deadline = self._deadline(run_deadline)
        if deadline.expired():
            raise self._timeout(what, deadline, run_deadline, started=False)
        with cut_at(deadline) as cut:
            try:
                with cut.attaching():
                    response = self._call(what, func, *args, **kwargs)
                return self._read_json(what, response)
            except Exception as exc:
                # Whatever a connection shut down under it raised, the deadline is the cause.
                if cut.fired:
                    raise self._timeout(what, deadline, run_deadline, started=True) from exc
                raise

    def _get_path(
        self,
        what: str,
        path: str,
        query: list[tuple[str, Any]] | None = None,
        *,
        deadline: Deadline | None = None,
    ) -> Any:
        """GET an arbitrary API path (discovery documents, visibility subresources)."""
        method, url, headers, body, post = self.api_client.param_serialize(
            method="GET",
            resource_path=path,
            query_params=query or [],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )

        def get(_preload_content: bool = False, **kwargs: Any) -> Any:
            response = self.api_client.call_api(
                method, url, header_params=headers, body=body, post_params=post, **kwargs
            )
            raw = response.response
            if not 200 <= response.status <= 299:
                raw.read()
                message, reason = status_message(raw.data, str(response.reason))
                raw.release_conn()
                raise error_from_status(
                    response.status, f"{what}: HTTP {response.status} {message}", reason
                )
            return raw

        return self._fetch_json(what, deadline, get)

    # --- discovery ---------------------------------------------------------------------------
    def discover(self, refresh: bool = False, *, deadline: Deadline | None = None) -> Discovery:
        """Served Kueue version (v1beta2, else v1beta1), its resources, and the visibility API."""
        with self._lock:
            if self._discovery is not None and not refresh:
                return self._discovery
        groups_doc = self._fetch_json("discovery /apis", deadline, self.apis.get_api_versions)
        if not isinstance(groups_doc, dict) or groups_doc.get("kind") != "APIGroupList":
            raise KubeError("discovery /apis: answer is not an APIGroupList", None, False)
        served: dict[str, tuple[str, ...]] = {}
        for group in groups_doc.get("groups") or []:
            preferred = (group.get("preferredVersion") or {}).get("version")
            versions = [str(v.get("version") or "") for v in group.get("versions") or []]
            ordered: list[str] = [preferred] if preferred in versions else []
            ordered += [v for v in versions if v and v not in ordered]
            served[group.get("name", "")] = tuple(ordered)
        kueue_version = next((v for v in KUEUE_VERSIONS if v in served.get(KUEUE_GROUP, ())), None)
        plurals: frozenset[str] = frozenset()
        if kueue_version is not None:
            what = f"discovery /apis/{KUEUE_GROUP}/{kueue_version}"
            resources = self._fetch_json(
                what, deadline, self.custom.get_api_resources, KUEUE_GROUP, kueue_version
            )
            if not isinstance(resources, dict) or resources.get("kind") != "APIResourceList":
                raise KubeError(f"{what}: answer is not an APIResourceList", None, False)
            plurals = frozenset(
                r.get("name", "")
                for r in resources.get("resources") or []
                if "/" not in r.get("name", "")
            )
        elif self.expects_kueue:
            logger.warning(
                "cluster %s serves no Kueue version we read (%s); Kueue kinds are skipped",
                self.name,
                ", ".join(KUEUE_VERSIONS),
            )
        visibility = next(
            (v for v in VISIBILITY_VERSIONS if v in served.get(VISIBILITY_GROUP, ())), None
        )
        discovery = Discovery(kueue_version, plurals, visibility, tuple(sorted(served.items())))
        with self._lock:
            self._discovery = discovery
        return discovery

    # --- LIST and WATCH ----------------------------------------------------------------------
    def _list_call(self, kind: Kind, version: str, **params: Any) -> Any:
        if kind.name == "Pod":
            return self.core.list_pod_for_all_namespaces, (), params
        if kind.name == "Node":
            return self.core.list_node, (), params
        if kind.namespaced:
            return (
                self.custom.list_custom_object_for_all_namespaces,
                (kind.group, version, kind.plural),
                params,
            )
        return self.custom.list_cluster_custom_object, (kind.group, version, kind.plural), params

    def list_objects(self, kind_name: str, *, deadline: Deadline | None = None) -> ListResult:
        """Every object of a kind (all namespaces), page by page, plus the list resourceVersion.

        Pods are filtered here to those requesting GPUs, so 100,000 CPU pods never reach ingest.
        Only a complete LIST comes back: a failed call raises ``KubeError``, and a page that is
        not a ``<Kind>List`` with an ``items`` array, or a pagination that does not end, raises
        ``IncompleteList``. A partial LIST must never look complete.
        """
        kind = KINDS_BY_NAME[kind_name]
        discovery = self.discover(deadline=deadline)
        if not discovery.serves(kind):
            raise KubeError(
                f"{kind.name}: not served by this API server",
                404,
                True,
                reason="NotServed",
            )
        return self.list_kind(kind, discovery.kueue_version or "v1", deadline=deadline)

    def list_kind(
        self, kind: Kind, version: str, *, deadline: Deadline | None = None
    ) -> ListResult:
        """``list_objects`` of any kind (a quota source's too, quotas/sources) at ``version``."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        tokens: set[str] = set()
        pages = filtered = 0
        resource_version = ""
        while True:
            params: dict[str, Any] = {"limit": self.page_size}
            if token:
                params["_continue"] = token
            func, args, params = self._list_call(kind, version, **params)
            what = f"LIST {kind.plural} page {pages + 1}"
            doc = self._fetch_json(what, deadline, func, *args, **params)
            pages += 1
            page_items = list_items(what, doc, kind)
            meta = doc.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            list_version = str(doc.get("apiVersion"))
            for item in page_items:
                if kind.name == "Pod" and not requests_gpus(item):
                    filtered += 1
                    continue
                items.append(slim(item, list_version, kind.name))
            del doc, page_items
            resource_version = str(meta.get("resourceVersion") or resource_version)
            token = meta.get("continue") or None
            if not token:
                remaining = meta.get("remainingItemCount")
                if isinstance(remaining, int) and remaining > 0:
                    raise IncompleteList(
                        f"{what}: {remaining} objects left but no continue token to read them"
                    )
                break
            if not isinstance(token, str) or token in tokens or pages >= MAX_PAGES:
                raise IncompleteList(
                    f"{what}: the continue token does not move the LIST on "
                    f"(repeated, or {pages} pages); the list never ends"
                )
            tokens.add(token)
        logger.debug(
            "cluster %s: listed %d %s in %d pages (rv %s)",
            self.name,
            len(items),
            kind.plural,
            pages,
            resource_version,
        )
        return ListResult(kind.name, items, resource_version, pages, filtered)

    def watch(
        self,
        kind_name: str,
        resource_version: str,
        timeout_seconds: int,
        *,
        stop: threading.Event | None = None,
        deadline: Deadline | None = None,
    ) -> Iterator[WatchEvent]:
        """Events after ``resource_version`` until the server ends the stream (timeoutSeconds).

        BOOKMARK events carry only a resourceVersion. Pod events for pods that request no GPU
        are dropped here, like in ``list_objects``. An event whose object is not of this kind or
        has no name is logged and comes out as INVALID, never as the event it claims to be.
        Raises ``ResourceExpired`` on 410 (relist), ``KubeTimeout`` when the stream is still
        open ``WATCH_GRACE_SECONDS`` after ``timeout_seconds`` (or at ``deadline``), and
        ``KubeError`` for other failures and ERROR events.
        """
        kind = KINDS_BY_NAME[kind_name]
        discovery = self.discover(deadline=deadline)
        yield from self.watch_kind(
            kind,
            discovery.kueue_version or "v1",
            resource_version,
            timeout_seconds,
            stop=stop,
            deadline=deadline,
        )

    def watch_kind(
        self,
        kind: Kind,
        version: str,
        resource_version: str,
        timeout_seconds: int,
        *,
        stop: threading.Event | None = None,
        deadline: Deadline | None = None,
    ) -> Iterator[WatchEvent]:
        """``watch`` of any kind (a quota source's too, quotas/sources) at ``version``."""
        func, args, params = self._list_call(
            kind,
            version,
            watch=True,
            resource_version=resource_version,
            timeout_seconds=max(1, int(timeout_seconds)),
            allow_watch_bookmarks=True,
        )
        what = f"WATCH {kind.plural} from {resource_version}"
        bound = self._deadline(deadline, timeout_seconds + WATCH_GRACE_SECONDS)
        if bound.expired():
            raise self._timeout(what, bound, deadline, started=False)
        default_version = f"{kind.group}/{version}" if kind.group else "v1"
        with cut_at(bound) as cut:
            try:
                with cut.attaching():
                    response = self._call(
                        what,
                        func,
                        *args,
                        _request_timeout=(
                            CONNECT_TIMEOUT_SECONDS,
                            timeout_seconds + WATCH_GRACE_SECONDS,
                        ),
                        **params,
                    )
            except Exception as exc:
                if cut.fired:
                    raise self._timeout(what, bound, deadline, started=True) from exc
                raise
            try:
                buffer = b""
                for chunk in response.stream(65536, decode_content=True):
                    if stop is not None and stop.is_set():
                        return
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        event = self._decode_event(what, line, kind, default_version)
                        if event is not None:
                            yield event
                if cut.fired:
                    raise self._timeout(what, bound, deadline, started=True)
                if buffer.strip():
                    event = self._decode_event(what, buffer, kind, default_version)
                    if event is not None:
                        yield event
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if cut.fired:
                    raise self._timeout(what, bound, deadline, started=True) from exc
                if isinstance(exc, ValueError):
                    raise
                raise KubeError(f"{what}: {exc}", None, False, reason="Connection") from exc
            finally:
                response.release_conn()

    def _decode_event(
        self, what: str, line: bytes, kind: Kind, default_version: str
    ) -> WatchEvent | None:
        line = line.strip()
        if not line:
            return None
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise KubeError(f"{what}: event is not JSON ({exc})", None, False) from exc
        if not isinstance(event, dict):
            raise KubeError(f"{what}: event is not an object", None, False)
        event_type = str(event.get("type") or "")
        obj = event.get("object")
        if event_type == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            code = int(status.get("code") or 500)
            raise error_from_status(
                code,
                f"{what}: {status.get('message') or 'watch error'}",
                str(status.get("reason") or ""),
            )
        if event_type not in {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"}:
            logger.warning("%s: ignoring watch event of type %r", what, event_type)
            return None
        problem = event_problem(obj, kind, event_type)
        if problem or not isinstance(obj, dict):
            logger.warning(
                "cluster %s: %s: %s event skipped: %s", self.name, what, event_type, problem
            )
            return WatchEvent("INVALID", {}, "", problem=f"{event_type} {problem}")
        meta = obj.get("metadata")
        rv = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
        if event_type != "BOOKMARK" and kind.name == "Pod" and not requests_gpus(obj):
            # Still a resourceVersion to resume from.
            return WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": rv}}, rv)
        return WatchEvent(event_type, slim(obj, default_version, kind.name), rv)

    # --- single objects and writes (quota write-back) -----------------------------------------
    def _object_call_args(self, kind_name: str) -> tuple[Kind, str]:
        kind = KINDS_BY_NAME[kind_name]
        if kind.namespaced or not kind.group:
            raise ValueError(f"{kind_name}: only cluster-scoped Kueue kinds are written here")
        version = self.discover().kueue_version
        if version is None:
            raise KubeError("Kueue is not served", 404, True, reason="NotServed")
        return kind, version

    def get_object(
        self, kind_name: str, name: str, *, deadline: Deadline | None = None
    ) -> dict[str, Any]:
        """One cluster-scoped Kueue object as the server has it, ``managedFields`` included."""
        kind, version = self._object_call_args(kind_name)
        return self.get_cluster_object(kind, version, name, deadline=deadline)

    def patch_object(
        self,
        kind_name: str,
        name: str,
        body: dict[str, Any],
        *,
        field_manager: str,
        dry_run: bool,
        deadline: Deadline | None = None,
    ) -> dict[str, Any]:
        """One JSON merge-patch of a cluster-scoped Kueue object (``patch_cluster_object``)."""
        kind, version = self._object_call_args(kind_name)
        return self.patch_cluster_object(
            kind,
            version,
            name,
            body,
            field_manager=field_manager,
            dry_run=dry_run,
            deadline=deadline,
        )

    def get_cluster_object(
        self, kind: Kind, version: str, name: str, *, deadline: Deadline | None = None
    ) -> dict[str, Any]:
        """One cluster-scoped custom object (a Kueue kind, a Volcano or KAI Queue) as the server
        has it, ``managedFields`` included."""
        doc = self._fetch_json(
            f"GET {kind.plural}/{name}",
            deadline,
            self.custom.get_cluster_custom_object,
            kind.group,
            version,
            kind.plural,
            name,
        )
        if not isinstance(doc, dict) or doc.get("kind") != kind.name:
            raise KubeError(
                f"GET {kind.plural}/{name}: the answer is not a {kind.name}", None, False
            )
        return doc

    def patch_cluster_object(
        self,
        kind: Kind,
        version: str,
        name: str,
        body: dict[str, Any],
        *,
        field_manager: str,
        dry_run: bool,
        deadline: Deadline | None = None,
    ) -> dict[str, Any]:
        """One JSON merge-patch of a cluster-scoped custom object; ``dryRun=All`` when asked.

        A ``metadata.resourceVersion`` in ``body`` makes the server refuse (409) a write to an
        object that changed since. The answer is the object as written (or as it would be).
        """
        what = f"PATCH {kind.plural}/{name}{' (dry run)' if dry_run else ''}"
        params: dict[str, Any] = {"field_manager": field_manager}
        if dry_run:
            params["dry_run"] = "All"
        doc = self._fetch_json(
            what,
            deadline,
            self.custom.patch_cluster_custom_object,
            kind.group,
            version,
            kind.plural,
            name,
            body,
            _content_type="application/merge-patch+json",
            **params,
        )
        if not isinstance(doc, dict) or doc.get("kind") != kind.name:
            raise KubeError(f"{what}: the answer is not a {kind.name}", None, False)
        return doc

    # --- visibility API ----------------------------------------------------------------------
    def pending_workloads(
        self, cluster_queue: str, *, deadline: Deadline | None = None
    ) -> list[dict[str, Any]]:
        """Kueue's pending workloads of one ClusterQueue in queue order (visibility API).

        Raises ``KubeError`` (permanent, reason ``NotServed``) when the API is not served.
        """
        version = self.discover(deadline=deadline).visibility_version
        if version is None:
            raise KubeError(f"{VISIBILITY_GROUP} is not served", 404, True, reason="NotServed")
        path = (
            f"/apis/{VISIBILITY_GROUP}/{version}/clusterqueues/"
            f"{quote(cluster_queue, safe='')}/pendingworkloads"
        )
        items: list[dict[str, Any]] = []
        offset = 0
        while True:
            doc = self._get_path(
                f"GET pending workloads of {cluster_queue}",
                path,
                [("limit", VISIBILITY_PAGE_SIZE), ("offset", offset)],
                deadline=deadline,
            )
            page = doc.get("items") if isinstance(doc, dict) else None
            if not isinstance(page, list):
                raise KubeError(f"pending workloads of {cluster_queue}: no items list", None, False)
            items.extend(page)
            if len(page) < VISIBILITY_PAGE_SIZE:
                return items
            offset += len(page)
