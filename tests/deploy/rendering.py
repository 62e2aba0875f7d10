"""Render deploy/kubernetes with ``kubectl kustomize`` and read what came out.

Also a small RBAC evaluator: which (API group, resource, verb) a Kubernetes API request needs,
worked out from its method, path and query the way the API server's request-info parser does,
and whether a set of ClusterRole rules allows it.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("read-only", "quota-write")
APP_CONTAINERS = ("web", "worker", "beat")


def kubectl() -> str:
    found = shutil.which("kubectl") or (
        "/usr/bin/kubectl" if Path("/usr/bin/kubectl").exists() else None
    )
    if found is None:
        pytest.fail("kubectl is needed to render deploy/kubernetes (kubectl kustomize)")
    return found


@functools.cache
def render_dir(path: str) -> tuple[dict[str, Any], ...]:
    """Every object ``kubectl kustomize <path>`` renders (cached: the files do not change)."""
    result = subprocess.run(
        [kubectl(), "kustomize", path], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"kubectl kustomize {path} failed: {result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def render(overlay: str) -> list[dict[str, Any]]:
    return list(render_dir(str(KUSTOMIZE / "overlays" / overlay)))


def with_components(tmp_path: Path, overlay: str, *components: str) -> list[dict[str, Any]]:
    """An overlay with components switched on, as an operator does it: a copy of
    deploy/kubernetes whose overlay lists them under ``components:``."""
    root = tmp_path / f"{overlay}-{'-'.join(components)}"
    shutil.copytree(KUSTOMIZE, root)
    kustomization = root / "overlays" / overlay / "kustomization.yaml"
    listed = "".join(f"  - ../../components/{name}\n" for name in components)
    kustomization.write_text(kustomization.read_text() + "components:\n" + listed)
    return list(render_dir(str(root / "overlays" / overlay)))


def one(objects: Iterable[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


def of_kind(objects: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def containers(obj: dict[str, Any], *, init: bool = True) -> list[dict[str, Any]]:
    spec = pod_spec(obj)
    return list(spec.get("initContainers", []) if init else []) + list(spec["containers"])


def workloads(objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in {"Deployment", "Job"}]


# --- RBAC ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    """What one API request needs: ``resource`` may name a subresource (``a/b``)."""

    group: str
    resource: str
    verb: str


def request_access(method: str, path: str, query: dict[str, str]) -> Access | None:
    """The access a request needs; None for discovery (non-resource URLs such as ``/apis``,
    allowed to every authenticated identity by the cluster's ``system:discovery`` role)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"]:
        if len(parts) < 3:
            return None
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if method == "GET":
        if name is None:
            verb = "watch" if query.get("watch") in {"true", "1"} else "list"
        else:
            verb = "get"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
    return Access(group, f"{resource}/{sub}" if sub else resource, verb)


def rules_of(objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every rule of every ClusterRole bound to the gpu-ledger service account."""
    objects = list(objects)
    bound = {
        b["roleRef"]["name"]
        for b in of_kind(objects, "ClusterRoleBinding")
        if any(
            s == {"kind": "ServiceAccount", "name": "gpu-ledger", "namespace": "gpu-ledger"}
            for s in b["subjects"]
        )
    }
    return [
        rule
        for role in of_kind(objects, "ClusterRole")
        if role["metadata"]["name"] in bound
        for rule in role["rules"]
    ]


def allows(rules: Iterable[dict[str, Any]], access: Access) -> bool:
    return any(
        access.group in rule.get("apiGroups", [])
        and access.resource in rule.get("resources", [])
        and access.verb in rule.get("verbs", [])
        for rule in rules
    )


def grants(rules: Iterable[dict[str, Any]]) -> set[Access]:
    """The rules as a set of single (group, resource, verb) grants (no wildcards allowed)."""
    out = set()
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"a wildcard in {rule}"
                    out.add(Access(group, resource, verb))
    return out
