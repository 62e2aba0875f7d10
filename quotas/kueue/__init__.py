"""Thin client for one cluster's Kubernetes API server: Kueue objects, GPU pods and nodes.

It owns configuration (a kubeconfig context, or the pod's service account), discovery of the served
Kueue versions (v1beta2 preferred, v1beta1 fallback) and of the visibility API, paginated LISTs,
WATCH streams and timeouts, and maps every failure to ``KubeError`` with a ``permanent`` flag
(docs/conventions.md "Background work"): connection errors, timeouts, 429 and 5xx are transient;
400, 401, 403, 404 and 422 are permanent; ``410 Gone`` is ``ResourceExpired``, which means "relist".

It trusts no answer's shape (docs/architecture.md "Upstream facts": never read a failed or partial
LIST as everything was deleted): ``list_objects`` returns only a complete LIST, a ``<Kind>List`` of
the asked kind with an ``items`` array on every page and the pagination run to its end; anything
else (a ``{}`` or a ``Status`` answered with 200 by a proxy or a broken aggregation layer, a page
that fails or lies) raises ``IncompleteList``, so the caller deletes nothing of that kind. A WATCH
event whose object is not of the watched kind, or has no identity, comes out as an ``INVALID`` event
to count and skip.

Every call has an overall deadline (``core.deadlines``): ``REQUEST_DEADLINE_SECONDS`` for the
connect, the whole answer and urllib3's retries together, or the caller's run deadline when that
comes first, however slowly the server drips its answer. A call cut off raises ``KubeTimeout``.

Each cluster gets its own ``ApiClient`` and ``Configuration``; the package-wide default
configuration is never touched, so one worker can talk to several clusters. Responses are read with
``_preload_content=False`` and decoded with ``json`` directly: the generated models would cost
seconds and gigabytes at 50,000 objects. Objects come back as plain dicts in the API's shape,
minus ``metadata.managedFields`` and the ``last-applied-configuration`` annotation, which nobody
here reads and which can double an object's size.

The package: ``client`` (``KueueClient``), ``payloads`` (the kinds, the checks of LIST pages
and watch events, the trimming of objects) and ``errors``.
"""

from quotas.kueue.client import (
    KUEUE_VERSIONS,
    PAGE_SIZE,
    REQUEST_DEADLINE_SECONDS,
    VISIBILITY_GROUP,
    Discovery,
    KueueClient,
)
from quotas.kueue.errors import (
    IncompleteList,
    KubeError,
    KubeTimeout,
    ResourceExpired,
    error_from_status,
)
from quotas.kueue.payloads import KINDS, KINDS_BY_NAME, Kind, ListResult, WatchEvent, requests_gpus

__all__ = [
    "KINDS",
    "KINDS_BY_NAME",
    "KUEUE_VERSIONS",
    "PAGE_SIZE",
    "REQUEST_DEADLINE_SECONDS",
    "VISIBILITY_GROUP",
    "Discovery",
    "IncompleteList",
    "Kind",
    "KubeError",
    "KubeTimeout",
    "KueueClient",
    "ListResult",
    "ResourceExpired",
    "WatchEvent",
    "error_from_status",
    "requests_gpus",
]
