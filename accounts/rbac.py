"""Optional Kubernetes RBAC visibility (``GPULEDGER_RBAC_VISIBILITY``; README "Sign-in").

For installs whose users sign in to the API server with the same identity provider: a user may
open the workloads of a namespace where a ``SubjectAccessReview`` says they may ``list pods``.

How it combines with the team policy (``quotas.access``): a union, scoped to namespaced objects.
The team policy decides everything it decides today; RBAC can only add the workloads of the
namespaces the cluster itself already lets the user list pods in: what they could read with
``kubectl get pods`` anyway. It never widens team-level figures (a team's totals, chargeback,
its ClusterQueues' quotas), which a ``list pods`` grant does not cover, and it never takes a
team-policy grant away (an intersection would make GPU Ledger's own admin grants depend on a
second system). Reviews are asked as the user (the username and groups the API server would see
for the same provider identity) about the namespaces GPU Ledger knows for the cluster (team
namespaces and workload namespaces), cached for ``GPULEDGER_RBAC_CACHE_SECONDS``. When the API
server cannot answer, the user gets no RBAC namespaces (fail closed) and the failure is logged,
not cached.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from kubernetes import client as k8s

from accounts.models import OidcIdentity
from fleet.models import Cluster
from quotas.kueue import KubeError, KueueClient
from quotas.models import TeamNamespace, Workload

logger = logging.getLogger(__name__)

SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def kube_subject(identity: OidcIdentity) -> tuple[str, list[str]]:
    """The username and groups the API server gives this provider identity (its
    ``--oidc-username-claim`` / ``-prefix`` and ``--oidc-groups-prefix``, mirrored by our
    settings)."""
    claim = settings.GPULEDGER_RBAC_USERNAME_CLAIM
    name = identity.user.email if claim == "email" else identity.subject
    groups = [settings.GPULEDGER_RBAC_GROUPS_PREFIX + group for group in identity.groups]
    return settings.GPULEDGER_RBAC_USERNAME_PREFIX + name, groups


def known_namespaces(cluster: Cluster) -> list[str]:
    """The namespaces GPU Ledger knows on ``cluster``: those a team owns and those of workloads."""
    owned = TeamNamespace.objects.filter(cluster=cluster).values_list("namespace", flat=True)
    running = (
        Workload.objects.filter(cluster=cluster).values_list("namespace", flat=True).distinct()
    )
    return sorted(set(owned) | set(running))


def review_body(user: str, groups: list[str], namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": groups,
            "resourceAttributes": {
                "namespace": namespace,
                "verb": "list",
                "group": "",
                "resource": "pods",
            },
        },
    }


def _review(client: KueueClient, body: dict[str, Any]) -> bool:
    api = k8s.AuthorizationV1Api(client.api_client)
    what = f"cluster {client.name}: SubjectAccessReview"
    response = client._call(what, api.create_subject_access_review, body)
    answer = client._read_json(what, response)
    status = answer.get("status") if isinstance(answer, dict) else None
    return bool(isinstance(status, dict) and status.get("allowed") is True)


def _cache_key(user_pk: int, cluster_pk: int) -> str:
    return f"gpuledger:rbac:{user_pk}:{cluster_pk}"


def rbac_namespaces(user: Any, cluster: Cluster) -> frozenset[str]:
    """The namespaces of ``cluster`` where ``user`` may list pods; empty when RBAC visibility
    is off, the user did not sign in through the provider, or the API server cannot answer."""
    if not settings.GPULEDGER_RBAC_VISIBILITY or not getattr(user, "is_authenticated", False):
        return frozenset()
    key = _cache_key(user.pk, cluster.pk)
    cached = cache.get(key)
    if cached is not None:
        return frozenset(cached)
    identity = OidcIdentity.objects.select_related("user").filter(user_id=user.pk).first()
    if identity is None:
        return frozenset()
    name, groups = kube_subject(identity)
    allowed = set()
    try:
        with KueueClient.for_cluster(cluster) as client:
            for namespace in known_namespaces(cluster):
                if _review(client, review_body(name, groups, namespace)):
                    allowed.add(namespace)
    except KubeError as exc:
        logger.warning("RBAC visibility for user %s on %s: %s", user.pk, cluster.name, exc)
        return frozenset()
    cache.set(key, sorted(allowed), settings.GPULEDGER_RBAC_CACHE_SECONDS)
    return frozenset(allowed)


def rbac_allows(user: Any, cluster: Cluster, namespace: str) -> bool:
    """Whether RBAC visibility lets ``user`` see a namespaced object of ``cluster``."""
    return namespace in rbac_namespaces(user, cluster)


def rbac_workloads(user: Any) -> Q | None:
    """The workloads RBAC visibility adds for ``user`` on every cluster (the lists' and search's
    share of the union with the team policy); None when it adds none."""
    if not settings.GPULEDGER_RBAC_VISIBILITY or not getattr(user, "is_authenticated", False):
        return None
    added: Q | None = None
    for cluster in Cluster.objects.all():
        namespaces = rbac_namespaces(user, cluster)
        if namespaces:
            part = Q(cluster=cluster, namespace__in=sorted(namespaces))
            added = part if added is None else added | part
    return added
