"""Thin client for one cluster's Kubernetes API server: Kueue objects, GPU pods and nodes.

It owns configuration (a kubeconfig context, or the pod's service account), discovery of the served
Kueue versions (v1beta2 preferred, v1beta1 fallback) and of the visibility API, paginated LISTs,
WATCH streams and timeouts, and maps every failure to ``KubeError`` with a ``permanent`` flag
(STYLE rules 10 and 12): connection errors, timeouts, 429 and 5xx are transient; 400, 401, 403,
404 and 422 are permanent; ``410 Gone`` is ``ResourceExpired``, which means "relist".

Each cluster gets its own ``ApiClient`` and ``Configuration``; the package-wide default
configuration is never touched, so one worker can talk to several clusters. Responses are read with
``_preload_content=False`` and decoded with ``json`` directly: the generated models would cost
seconds and gigabytes at 50,000 objects. Objects come back as plain dicts in the API's shape,
minus ``metadata.managedFields`` and the ``last-applied-configuration`` annotation, which nobody
here reads and which can double an object's size.
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

from core.mig import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from quotas.constants import KUEUE_GROUP

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
# Extra read time past a watch's timeoutSeconds before the stream counts as stalled.
WATCH_GRACE_SECONDS = 10.0

# What _slim keeps of pod specs (and Workload pod templates), pod statuses and node statuses.
CONTAINER_FIELDS = ("name", "resources", "restartPolicy")
POD_SPEC_FIELDS = (
    "containers",
    "initContainers",
    "overhead",
    "nodeName",
    "nodeSelector",
    "priority",
    "priorityClassName",
    "schedulerName",
)
POD_STATUS_FIELDS = ("phase", "startTime", "containerStatuses", "reason")
CONTAINER_STATUS_FIELDS = ("name", "state", "restartCount")
NODE_STATUS_FIELDS = ("capacity", "allocatable", "conditions")

PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 405, 406, 409, 415, 422})
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


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


class ResourceExpired(KubeError):
    """410 Gone: the resourceVersion (or continue token) is too old; LIST again."""

    def __init__(self, message: str, *, reason: str = "Expired") -> None:
        super().__init__(message, 410, False, reason=reason)


@dataclass(frozen=True)
class Kind:
    """One resource type the sync reads."""

    name: str  # Kubernetes kind, as in quotas.ingest.KueueSnapshot.complete
    plural: str
    group: str  # "" for the core group
    namespaced: bool


KINDS: tuple[Kind, ...] = (
    Kind("ResourceFlavor", "resourceflavors", KUEUE_GROUP, False),
    Kind("Cohort", "cohorts", KUEUE_GROUP, False),
    Kind("ClusterQueue", "clusterqueues", KUEUE_GROUP, False),
    Kind("LocalQueue", "localqueues", KUEUE_GROUP, True),
    Kind("Workload", "workloads", KUEUE_GROUP, True),
    Kind("WorkloadPriorityClass", "workloadpriorityclasses", KUEUE_GROUP, False),
    Kind("Pod", "pods", "", True),
    Kind("Node", "nodes", "", False),
)
KINDS_BY_NAME = {kind.name: kind for kind in KINDS}


@dataclass(frozen=True)
class Discovery:
    """What the API server serves: the Kueue version, its resources, the visibility API."""

    kueue_version: str | None
    kueue_plurals: frozenset[str]
    visibility_version: str | None

    def serves(self, kind: Kind) -> bool:
        if not kind.group:
            return True
        return self.kueue_version is not None and kind.plural in self.kueue_plurals


@dataclass
class ListResult:
    kind: str
    items: list[dict[str, Any]]
    resource_version: str
    pages: int
    # Objects the server sent that were dropped here (pods that request no GPU).
    filtered: int = 0


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict[str, Any]
    resource_version: str


def requests_gpus(pod: Any) -> bool:
    """Whether any container of the pod requests (or limits) whole GPUs or MIG slices."""
    if not isinstance(pod, dict):
        return True  # let ingest see it, count it and log it
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return True
    for group in ("containers", "initContainers"):
        containers = spec.get(group) or []
        if not isinstance(containers, list):
            return True
        for container in containers:
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            for section in ("requests", "limits"):
                values = resources.get(section)
                if not isinstance(values, dict):
                    continue
                for name in values:
                    if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX):
                        return True
    return False


def _slim_containers(containers: Any) -> Any:
    if not isinstance(containers, list):
        return containers
    return [
        {k: c[k] for k in CONTAINER_FIELDS if k in c} if isinstance(c, dict) else c
        for c in containers
    ]


def _slim_pod_spec(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    slim = {k: spec[k] for k in POD_SPEC_FIELDS if k in spec}
    for group in ("containers", "initContainers"):
        if group in slim:
            slim[group] = _slim_containers(slim[group])
    return slim


def _slim(item: Any, api_version: str, kind: str) -> Any:
    """Drop what no reader here uses, as soon as a page is decoded (peak memory at 50,000).

    Kept: all metadata but managedFields and the last-applied annotation; for Pods the spec
    fields that decide GPU requests and placement and the status phase and times; for Nodes
    capacity, allocatable and conditions; for Workloads the pod templates' resource fields.
    Everything ``quotas.ingest`` reads is in these sets.
    """
    if not isinstance(item, dict):
        return item
    # Items of core-group lists carry no apiVersion/kind; the list itself does.
    item.setdefault("apiVersion", api_version)
    item.setdefault("kind", kind)
    meta = item.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(LAST_APPLIED, None)
    spec, status = item.get("spec"), item.get("status")
    if kind == "Pod":
        item["spec"] = _slim_pod_spec(spec)
        if isinstance(status, dict):
            slim = {k: status[k] for k in POD_STATUS_FIELDS if k in status}
            if isinstance(slim.get("containerStatuses"), list):
                slim["containerStatuses"] = [
                    {k: c[k] for k in CONTAINER_STATUS_FIELDS if k in c}
                    if isinstance(c, dict)
                    else c
                    for c in slim["containerStatuses"]
                ]
            item["status"] = slim
    elif kind == "Node":
        if isinstance(status, dict):
            item["status"] = {k: status[k] for k in NODE_STATUS_FIELDS if k in status}
    elif kind == "Workload" and isinstance(spec, dict) and isinstance(spec.get("podSets"), list):
        for pod_set in spec["podSets"]:
            template = pod_set.get("template") if isinstance(pod_set, dict) else None
            if isinstance(template, dict) and "spec" in template:
                template["spec"] = _slim_pod_spec(template["spec"])
    return item


def _status_message(body: Any, fallback: str) -> tuple[str, str]:
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


def _map_api_exception(exc: ApiException, what: str) -> KubeError:
    status = int(exc.status or 0)
    message, reason = _status_message(exc.body, str(exc.reason or "error"))
    if status == 0:
        # The client raises status 0 for TLS failures: a configuration problem, not a blip.
        return KubeError(f"{what}: {message}", None, True, reason="TLS")
    return error_from_status(status, f"{what}: HTTP {status} {message}", reason)


class KueueClient:
    """Reads Kueue objects, GPU pods and nodes from one API server."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        page_size: int = PAGE_SIZE,
        name: str = "",
    ) -> None:
        self.api_client = api_client
        self.page_size = page_size
        self.name = name or api_client.configuration.host
        self.custom = k8s.CustomObjectsApi(api_client)
        self.core = k8s.CoreV1Api(api_client)
        self.apis = k8s.ApisApi(api_client)
        self._discovery: Discovery | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_cluster(
        cls,
        cluster: Cluster,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        page_size: int = PAGE_SIZE,
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
        return cls(k8s.ApiClient(configuration), page_size=page_size, name=cluster.name)

    def close(self) -> None:
        self.api_client.close()

    def __enter__(self) -> KueueClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing ----------------------------------------------------------------------------
    def _call(self, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", (CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS))
        try:
            response = func(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            raise _map_api_exception(exc, what) from exc
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

    def _get_path(self, what: str, path: str, query: list[tuple[str, Any]] | None = None) -> Any:
        """GET an arbitrary API path (discovery documents, visibility subresources)."""
        method, url, headers, body, post = self.api_client.param_serialize(
            method="GET",
            resource_path=path,
            query_params=query or [],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api_client.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                post_params=post,
                _request_timeout=(CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS),
            )
        except ApiException as exc:
            raise _map_api_exception(exc, what) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(f"{what}: {exc}", None, False, reason="Connection") from exc
        raw = response.response
        if not 200 <= response.status <= 299:
            raw.read()
            message, reason = _status_message(raw.data, str(response.reason))
            raw.release_conn()
            raise error_from_status(
                response.status, f"{what}: HTTP {response.status} {message}", reason
            )
        return self._read_json(what, raw)

    # --- discovery ---------------------------------------------------------------------------
    def discover(self, refresh: bool = False) -> Discovery:
        """Served Kueue version (v1beta2, else v1beta1), its resources, and the visibility API."""
        with self._lock:
            if self._discovery is not None and not refresh:
                return self._discovery
        groups_doc = self._read_json(
            "discovery /apis", self._call("discovery /apis", self.apis.get_api_versions)
        )
        served: dict[str, set[str]] = {}
        for group in groups_doc.get("groups") or []:
            versions = {v.get("version") for v in group.get("versions") or []}
            served[group.get("name", "")] = {v for v in versions if v}
        kueue_version = next((v for v in KUEUE_VERSIONS if v in served.get(KUEUE_GROUP, ())), None)
        plurals: frozenset[str] = frozenset()
        if kueue_version is not None:
            what = f"discovery /apis/{KUEUE_GROUP}/{kueue_version}"
            resources = self._read_json(
                what,
                self._call(what, self.custom.get_api_resources, KUEUE_GROUP, kueue_version),
            )
            plurals = frozenset(
                r.get("name", "")
                for r in resources.get("resources") or []
                if "/" not in r.get("name", "")
            )
        else:
            logger.warning(
                "cluster %s serves no Kueue version we read (%s); Kueue kinds are skipped",
                self.name,
                ", ".join(KUEUE_VERSIONS),
            )
        visibility = next(
            (v for v in VISIBILITY_VERSIONS if v in served.get(VISIBILITY_GROUP, ())), None
        )
        discovery = Discovery(kueue_version, plurals, visibility)
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

    def list_objects(self, kind_name: str) -> ListResult:
        """Every object of a kind (all namespaces), page by page, plus the list resourceVersion.

        Pods are filtered here to those requesting GPUs, so 100,000 CPU pods never reach ingest.
        A failure on any page raises: a partial LIST must never look complete.
        """
        kind = KINDS_BY_NAME[kind_name]
        discovery = self.discover()
        if not discovery.serves(kind):
            raise KubeError(
                f"{kind.name}: not served by this API server",
                404,
                True,
                reason="NotServed",
            )
        version = discovery.kueue_version or "v1"
        items: list[dict[str, Any]] = []
        token: str | None = None
        pages = filtered = 0
        resource_version = ""
        while True:
            params: dict[str, Any] = {"limit": self.page_size}
            if token:
                params["_continue"] = token
            func, args, params = self._list_call(kind, version, **params)
            what = f"LIST {kind.plural} page {pages + 1}"
            doc = self._read_json(what, self._call(what, func, *args, **params))
            pages += 1
            if not isinstance(doc, dict) or not isinstance(doc.get("items", []), list):
                raise KubeError(f"{what}: answer is not a list", None, False)
            meta = doc.get("metadata") or {}
            list_version = doc.get("apiVersion") or (
                f"{kind.group}/{version}" if kind.group else "v1"
            )
            for item in doc.get("items") or []:
                if kind.name == "Pod" and not requests_gpus(item):
                    filtered += 1
                    continue
                items.append(_slim(item, list_version, kind.name))
            del doc
            resource_version = str(meta.get("resourceVersion") or resource_version)
            token = meta.get("continue") or None
            if not token:
                break
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
    ) -> Iterator[WatchEvent]:
        """Events after ``resource_version`` until the server ends the stream (timeoutSeconds).

        BOOKMARK events carry only a resourceVersion. Pod events for pods that request no GPU
        are dropped here, like in ``list_objects``. Raises ``ResourceExpired`` on 410 (relist), and
        ``KubeError`` for other failures and ERROR events.
        """
        kind = KINDS_BY_NAME[kind_name]
        discovery = self.discover()
        version = discovery.kueue_version or "v1"
        func, args, params = self._list_call(
            kind,
            version,
            watch=True,
            resource_version=resource_version,
            timeout_seconds=max(1, int(timeout_seconds)),
            allow_watch_bookmarks=True,
        )
        what = f"WATCH {kind.plural} from {resource_version}"
        response = self._call(
            what,
            func,
            *args,
            _request_timeout=(CONNECT_TIMEOUT_SECONDS, timeout_seconds + WATCH_GRACE_SECONDS),
            **params,
        )
        default_version = f"{kind.group}/{version}" if kind.group else "v1"
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
            if buffer.strip():
                event = self._decode_event(what, buffer, kind, default_version)
                if event is not None:
                    yield event
        except (urllib3.exceptions.HTTPError, OSError) as exc:
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
        if not isinstance(obj, dict):
            raise KubeError(f"{what}: {event_type} event without an object", None, False)
        meta = obj.get("metadata")
        rv = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
        if event_type != "BOOKMARK" and kind.name == "Pod" and not requests_gpus(obj):
            # Still a resourceVersion to resume from.
            return WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": rv}}, rv)
        return WatchEvent(event_type, _slim(obj, default_version, kind.name), rv)

    # --- visibility API ----------------------------------------------------------------------
    def pending_workloads(self, cluster_queue: str) -> list[dict[str, Any]]:
        """Kueue's pending workloads of one ClusterQueue in queue order (visibility API).

        Raises ``KubeError`` (permanent, reason ``NotServed``) when the API is not served.
        """
        version = self.discover().visibility_version
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
            )
            page = doc.get("items") if isinstance(doc, dict) else None
            if not isinstance(page, list):
                raise KubeError(f"pending workloads of {cluster_queue}: no items list", None, False)
            items.extend(page)
            if len(page) < VISIBILITY_PAGE_SIZE:
                return items
            offset += len(page)
