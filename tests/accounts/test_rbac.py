"""Optional RBAC visibility: SubjectAccessReviews (``list pods``) against the Kubernetes API test
server, the exact reviews it receives, their cache, and the union with the team policy on the
workload page."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from accounts.models import OidcIdentity
from accounts.rbac import rbac_namespaces
from quotas.choices import WorkloadState
from quotas.models import ClusterQueue, Team, TeamNamespace, Workload

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

ISSUER = "http://127.0.0.1:1/openid"


@pytest.fixture
def world(cluster, make_kube_api, settings):
    api = make_kube_api(load=False)
    settings.GPULEDGER_RBAC_VISIBILITY = True
    settings.GPULEDGER_RBAC_USERNAME_PREFIX = "oidc:"
    settings.GPULEDGER_RBAC_GROUPS_PREFIX = "oidc:"
    alpha = Team.objects.create(name="alpha")
    beta = Team.objects.create(name="beta")
    TeamNamespace.objects.create(team=alpha, cluster=cluster, namespace="ns-alpha")
    TeamNamespace.objects.create(team=beta, cluster=cluster, namespace="ns-beta")
    cq_beta = ClusterQueue.objects.create(cluster=cluster, name="cq-beta", team=beta)
    workloads = {
        namespace: Workload.objects.create(
            cluster=cluster,
            namespace=namespace,
            name=f"train-{namespace}",
            cluster_queue=cq_beta if namespace == "ns-beta" else None,
            state=WorkloadState.ADMITTED,
            requested_gpus=1,
            admitted_gpus=1,
        )
        for namespace in ("ns-beta", "ns-gamma")
    }
    user = get_user_model().objects.create_user("ada", email="ada@example.com")
    OidcIdentity.objects.create(user=user, issuer=ISSUER, subject="sub-7", groups=["ml-eng"])
    alpha.leads.add(user)
    return api, user, workloads


def _review(namespace: str) -> dict:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "oidc:sub-7",
            "groups": ["oidc:ml-eng"],
            "resourceAttributes": {
                "namespace": namespace,
                "verb": "list",
                "group": "",
                "resource": "pods",
            },
        },
    }


def test_it_asks_one_review_per_known_namespace_as_the_user(world, cluster):
    api, user, _ = world
    api.allow("group:oidc:ml-eng", "ns-beta")
    api.allow("user:oidc:sub-7", "ns-gamma", verb="get")  # not list: no

    assert rbac_namespaces(user, cluster) == {"ns-beta"}

    assert api.access_reviews() == [_review("ns-alpha"), _review("ns-beta"), _review("ns-gamma")]
    # Asked with GPU Ledger's own credentials, not the user's.
    posted = [r for r in api.recorded if r.method == "POST"]
    sent = [{k.lower(): v for k, v in r.headers.items()}["authorization"] for r in posted]
    assert set(sent) == {f"Bearer {api.token}"}


def test_answers_are_cached_for_the_cache_seconds(world, cluster):
    api, user, _ = world
    api.allow("user:oidc:sub-7", "ns-gamma")

    assert rbac_namespaces(user, cluster) == {"ns-gamma"}
    assert rbac_namespaces(user, cluster) == {"ns-gamma"}
    assert len(api.access_reviews()) == 3

    cache.clear()
    assert rbac_namespaces(user, cluster) == {"ns-gamma"}
    assert len(api.access_reviews()) == 6


def test_the_email_claim_and_no_prefix_name_the_user_by_address(world, cluster, settings):
    api, user, _ = world
    settings.GPULEDGER_RBAC_USERNAME_CLAIM = "email"
    settings.GPULEDGER_RBAC_USERNAME_PREFIX = ""
    api.allow("user:ada@example.com", "ns-alpha")

    assert rbac_namespaces(user, cluster) == {"ns-alpha"}
    assert api.access_reviews()[0]["spec"]["user"] == "ada@example.com"


def test_an_api_server_failure_gives_no_namespaces_and_is_not_cached(world, cluster):
    api, user, _ = world
    api.allow("group:oidc:ml-eng", "ns-beta")
    api.fail("subjectaccessreviews", 503, times=1)

    assert rbac_namespaces(user, cluster) == frozenset()
    assert rbac_namespaces(user, cluster) == {"ns-beta"}


def test_off_or_for_a_local_account_nothing_is_asked(world, cluster, settings):
    api, user, _ = world
    local = get_user_model().objects.create_user("local")
    assert rbac_namespaces(local, cluster) == frozenset()
    settings.GPULEDGER_RBAC_VISIBILITY = False
    assert rbac_namespaces(user, cluster) == frozenset()
    assert api.access_reviews() == []


def test_rbac_adds_a_namespaces_workloads_to_what_the_team_policy_shows(world, settings):
    api, user, workloads = world
    api.allow("group:oidc:ml-eng", "ns-beta")
    client = Client()
    client.force_login(user)

    # The user leads alpha only: beta's workload is visible through RBAC, gamma's is not.
    assert client.get(f"/workloads/{workloads['ns-beta'].pk}/").status_code == 200
    assert client.get(f"/workloads/{workloads['ns-gamma'].pk}/").status_code == 404
    # Team-level pages stay with the team policy.
    assert client.get("/teams/beta/").status_code == 404
    # The workload list and the search list the same workloads the detail pages open.
    listed = client.get("/workloads/?range=30d").content.decode()
    found = client.get("/search/?q=ns-").content.decode()
    for page in (listed, found):
        assert workloads["ns-beta"].name in page
        assert workloads["ns-gamma"].name not in page

    settings.GPULEDGER_RBAC_VISIBILITY = False
    assert client.get(f"/workloads/{workloads['ns-beta'].pk}/").status_code == 404
