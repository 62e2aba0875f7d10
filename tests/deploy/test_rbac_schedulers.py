"""The RBAC components of the other quota sources (deploy/kubernetes/components/volcano, kai,
resourcequota, volcano-write, kai-write) against the requests a sync and a quota write-back of
such a cluster really send, through the real client against the loopback Kubernetes API server
serving the recorded fleets (tests/fixtures/volcano, kai, resourcequota). Every request must be
allowed by the read-only overlay with the source's component; everything the component grants
must be used; writes need the write component and the quota-write overlay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleet.models import Cluster
from quotas.models import ClusterQueue
from quotas.sync import sync_cluster
from quotas.writeback import service
from tests.deploy.rendering import Access, allows, grants, render, rules_of, with_components
from tests.deploy.test_rbac_requests import accesses
from tests.scheduler_fixtures import load_scheduler_fixtures

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"

SOURCES = {
    "volcano": ({"volcano_versions": ("v1beta1",)}, "scheduling.volcano.sh"),
    "kai": ({"kai_versions": ("v2", "v2alpha2")}, "scheduling.run.ai"),
    "resourcequota": ({"serve_resource_quotas": True}, ""),
}


def _served(make_kube_api: Any, source: str) -> Any:
    options, _ = SOURCES[source]
    api = make_kube_api(load=False, kueue_versions=(), **options)
    return load_scheduler_fixtures(api, source)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_sync_needs_exactly_what_the_sources_component_adds(
    make_kube_api: Any, tmp_path: Path, source: str
) -> None:
    api = _served(make_kube_api, source)
    cluster = Cluster.objects.create(name=f"gpu-{source}")

    run = sync_cluster(cluster.pk, watch_seconds=1)

    assert run.status == "success", run.error
    used = accesses(api)
    base = rules_of(render("read-only"))
    rules = rules_of(with_components(tmp_path, "read-only", source))
    assert sorted({str(a) for a in used if not allows(rules, a)}) == []
    # Without the component the sync's reads of the source's kinds are refused.
    refused = {a for a in used if not allows(base, a)}
    _, group = SOURCES[source]
    assert refused and {a.group for a in refused} == {group}
    # Nothing the component adds goes unused.
    added = grants(rules) - grants(base)
    assert {(a.group, a.resource, a.verb) for a in added if a.verb != "get"} == {
        (a.group, a.resource, a.verb) for a in refused if a.verb != "get"
    }


@pytest.mark.parametrize(("source", "queue"), [("volcano", "team-v1"), ("kai", "kai-team-a")])
def test_quota_write_back_needs_the_write_component(
    make_kube_api: Any, tmp_path: Path, quota_admin: Any, source: str, queue: str
) -> None:
    api = _served(make_kube_api, source)
    cluster = Cluster.objects.create(name=f"gpu-{source}", quota_write_enabled=True)
    assert sync_cluster(cluster.pk).status == "success"
    since = len(api.requests)

    change = service.preview(
        cluster_queue=ClusterQueue.objects.get(cluster=cluster, name=queue),
        changes=[
            {
                "flavor": "default-flavor",
                "resource": GPU,
                "nominal": "4",
                "borrowing_limit": None,
                "lending_limit": None,
            }
        ],
        stop_policy=None,
        reason="RBAC check",
        user=quota_admin,
    )
    service.apply(change, quota_admin)
    change.refresh_from_db()
    assert change.status == "applied", change.api_answer

    used = set(accesses(api, since))
    _, group = SOURCES[source]
    writes = {a for a in used if a.verb == "patch"}
    assert writes == {Access(group, "queues", "patch")}
    allowed = rules_of(with_components(tmp_path, "quota-write", source, f"{source}-write"))
    assert sorted(str(a) for a in used if not allows(allowed, a)) == []
    without = rules_of(with_components(tmp_path, "quota-write", source))
    assert all(not allows(without, a) for a in writes)
