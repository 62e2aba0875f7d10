"""The recorded fleets of the quota sources besides Kueue: Volcano queues
(tests/fixtures/volcano), KAI Scheduler queues (tests/fixtures/kai) and plain namespace
ResourceQuota (tests/fixtures/resourcequota). Each directory's README describes its scenario and
the expected figures; this module loads the objects for ``tests.kube_api_server.FakeKubeAPI``.

The three scenarios share the node fleet of tests/fixtures/kueue (8 H100 and 4 A100 nodes with
8 GPUs each), so ``kueue_fixtures.fixture_nodes`` serves their Nodes too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.kueue_fixtures import fixture_nodes

if TYPE_CHECKING:
    from tests.kube_api_server import FakeKubeAPI

VOLCANO_GROUP = "scheduling.volcano.sh"
KAI_GROUP = "scheduling.run.ai"
FIXTURES = Path(__file__).parent / "fixtures"

# source -> {kind as FakeKubeAPI names it: file of LIST responses}
SOURCES: dict[str, dict[str, str]] = {
    "volcano": {
        f"Queue.{VOLCANO_GROUP}": "queues.v1beta1.json",
        f"PodGroup.{VOLCANO_GROUP}": "podgroups.v1beta1.json",
        "Pod": "pods.v1.json",
    },
    "kai": {
        f"Queue.{KAI_GROUP}": "queues.v2.json",
        f"PodGroup.{KAI_GROUP}": "podgroups.v2alpha2.json",
        "Pod": "pods.v1.json",
    },
    "resourcequota": {
        "ResourceQuota": "resourcequotas.v1.json",
        "Pod": "pods.v1.json",
    },
}


def list_response(source: str, kind: str) -> dict[str, Any]:
    """One fixture file as the API server answered the LIST: ``{apiVersion, kind, metadata,
    items}``."""
    return json.loads((FIXTURES / source / SOURCES[source][kind]).read_text())


def scheduler_items(source: str, kind: str) -> list[dict[str, Any]]:
    """The fixture objects of one kind of one source ("volcano", "kai", "resourcequota")."""
    if kind == "Node":
        return fixture_nodes()
    return list(list_response(source, kind)["items"])


def load_scheduler_fixtures(api: FakeKubeAPI, source: str) -> FakeKubeAPI:
    """Serve one source's fixtures (and the shared Nodes). The server must have been built to
    serve that source's kinds: ``volcano_versions``, ``kai_versions`` or
    ``serve_resource_quotas``."""
    for kind in (*SOURCES[source], "Node"):
        api.load(kind, scheduler_items(source, kind))
    return api
