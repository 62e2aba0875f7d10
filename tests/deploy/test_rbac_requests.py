"""The rendered RBAC against the requests the app really sends: a sync (LIST, WATCH, the
visibility API), a quota write-back and a remediation, each through the real client against the
loopback Kubernetes API server. Every request must be allowed by its overlay's roles, and every
read the roles grant must be one the sync uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from quotas.models import ClusterQueue, Cohort
from quotas.sync import sync_cluster
from quotas.writeback import service
from tests.deploy.rendering import (
    Access,
    allows,
    grants,
    render,
    request_access,
    rules_of,
    with_components,
)

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"


def accesses(api: Any, since: int = 0) -> list[Access]:
    found = [request_access(method, path, query) for method, path, query in api.requests[since:]]
    return [a for a in found if a is not None]


def test_the_mapping_from_requests_to_rbac_follows_the_api_servers_rules() -> None:
    assert request_access("GET", "/apis", {}) is None
    assert request_access("GET", "/apis/kueue.x-k8s.io/v1beta2", {}) is None
    assert request_access("GET", "/api/v1/pods", {"limit": "500"}) == Access("", "pods", "list")
    assert request_access("GET", "/api/v1/nodes", {"watch": "true"}) == Access("", "nodes", "watch")
    assert request_access(
        "GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/w1", {}
    ) == Access("kueue.x-k8s.io", "workloads", "get")
    assert request_access(
        "PATCH", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-a", {}
    ) == Access("kueue.x-k8s.io", "clusterqueues", "patch")
    assert request_access(
        "GET", "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/a/pendingworkloads", {}
    ) == Access("visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads", "get")
    assert request_access("GET", "/api/v1/namespaces/team-a", {}) == Access("", "namespaces", "get")


def test_a_sync_needs_exactly_what_read_only_grants(make_kube_api, cluster) -> None:
    api = make_kube_api(visibility_versions=("v1beta2",))

    run = sync_cluster(cluster.pk, watch_seconds=1)

    assert run.status == "success", run.error
    used = accesses(api)
    rules = rules_of(render("read-only"))
    refused = sorted({str(a) for a in used if not allows(rules, a)})
    assert refused == []
    # Nothing granted goes unused: every resource the role reads is listed and watched by a
    # sync (the visibility API is GET only, and GET of single objects is write-back's).
    granted_reads = {(a.group, a.resource, a.verb) for a in grants(rules) if a.verb != "get"}
    assert granted_reads == {(a.group, a.resource, a.verb) for a in used if a.verb != "get"}
    assert any(a.resource == "clusterqueues/pendingworkloads" for a in used)


def test_quota_write_back_needs_the_quota_write_overlay(kube, cluster, quota_admin) -> None:
    cluster.quota_write_enabled = True
    cluster.save()
    sync_cluster(cluster.pk)
    since = len(kube.requests)

    for target in (
        {"cluster_queue": ClusterQueue.objects.get(name="team-a")},
        {"cohort": Cohort.objects.get(name="research")},
    ):
        flavor = "h100" if "cluster_queue" in target else "a100"
        change = service.preview(
            **target,
            changes=[
                {
                    "flavor": flavor,
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

    used = set(accesses(kube, since))
    writes = {a for a in used if a.verb == "patch"}
    assert writes == {
        Access("kueue.x-k8s.io", "clusterqueues", "patch"),
        Access("kueue.x-k8s.io", "cohorts", "patch"),
    }
    quota_write = rules_of(render("quota-write"))
    read_only = rules_of(render("read-only"))
    assert sorted(str(a) for a in used if not allows(quota_write, a)) == []
    assert sorted(str(a) for a in writes if allows(read_only, a)) == []


def test_remediation_needs_its_component(kube, cluster, tmp_path: Path) -> None:
    from remediation.apply import patch_active

    since = len(kube.requests)

    status, _ = patch_active(cluster, "team-a", "job-llama-pretrain-8b-fbe70", False)

    assert status == 200
    used = set(accesses(kube, since))
    assert used == {Access("kueue.x-k8s.io", "workloads", "patch")}
    with_remediation = rules_of(with_components(tmp_path, "quota-write", "remediation"))
    assert all(allows(with_remediation, a) for a in used)
    assert not any(allows(rules_of(render("quota-write")), a) for a in used)
