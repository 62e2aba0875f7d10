"""Discovery for ``tests.kube_api_server.FakeKubeAPI``: ``/api``, ``/apis``, each served group
and each group version's resource list, listing only what the server was built to serve (Kueue by
default; the visibility API, Volcano's and KAI's groups and core ResourceQuotas when asked)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.kube_api_server import KUEUE_GROUP, RESOURCES, VISIBILITY_GROUP, Resource

if TYPE_CHECKING:
    from tests.kube_api_server import FakeKubeAPI

# Kinds whose CRD has no status subresource.
NO_STATUS = {"workloadpriorityclasses", "podgroups.scheduling.volcano.sh"}
CORE_ORDER = ("pods", "nodes", "resourcequotas")
VISIBILITY_RESOURCES = [
    {
        "name": f"{parent}/pendingworkloads",
        "singularName": "",
        "namespaced": namespaced,
        "kind": "PendingWorkloadsSummary",
        "verbs": ["get"],
    }
    for parent, namespaced in (("clusterqueues", False), ("localqueues", True))
]


def group_doc(name: str, versions: tuple[str, ...]) -> dict[str, Any]:
    return {
        "name": name,
        "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
        "preferredVersion": {"groupVersion": f"{name}/{versions[0]}", "version": versions[0]},
    }


def resource_doc(res: Resource) -> dict[str, Any]:
    return {
        "name": res.plural,
        "singularName": res.singular,
        "namespaced": res.namespaced,
        "kind": res.kind,
        "verbs": ["delete", "get", "list", "patch", "update", "watch"],
    }


def status_doc(res: Resource) -> dict[str, Any]:
    return {
        "name": f"{res.plural}/status",
        "singularName": "",
        "namespaced": res.namespaced,
        "kind": res.kind,
        "verbs": ["get", "patch", "update"],
    }


def resource_list(group_version: str, resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def crd_resources(api: FakeKubeAPI, group: str, version: str) -> list[dict[str, Any]]:
    """The served kinds of a CRD group at one version, each with its status subresource."""
    resources = []
    served = (RESOURCES[key] for key in sorted(api.served_plurals))
    for res in served:
        if res.group != group or (res.versions and version not in res.versions):
            continue
        resources.append(resource_doc(res))
        if res.key not in NO_STATUS:
            resources.append(status_doc(res))
    return resources


def discovery(api: FakeKubeAPI, path: str) -> dict[str, Any] | None:
    groups = list(api.group_versions.items())
    if api.visibility_versions:
        # The visibility group comes right after Kueue's, as it always has.
        at = 1 if KUEUE_GROUP in api.group_versions else 0
        groups.insert(at, (VISIBILITY_GROUP, api.visibility_versions))
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if path == "/api/v1":
        core = [RESOURCES[p] for p in CORE_ORDER if p in api.served_plurals]
        return {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [resource_doc(r) for r in core],
        }
    if path == "/apis":
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [group_doc(n, v) for n, v in groups],
        }
    parts = path.strip("/").split("/")
    if len(parts) == 2 and parts[0] == "apis":
        for name, versions in groups:
            if parts[1] == name:
                return {"kind": "APIGroup", "apiVersion": "v1", **group_doc(name, versions)}
    if len(parts) == 3 and parts[0] == "apis":
        group, version = parts[1], parts[2]
        if group == VISIBILITY_GROUP and version in api.visibility_versions:
            return resource_list(f"{group}/{version}", VISIBILITY_RESOURCES)
        if version in api.group_versions.get(group, ()):
            return resource_list(f"{group}/{version}", crd_resources(api, group, version))
    return None
