"""Who owns a queue's quotas, and the change offered to them instead of a write.

Argo CD marks what it manages with the ``argocd.argoproj.io/tracking-id`` annotation (or the
``app.kubernetes.io/instance`` label in its label tracking mode) and re-syncs drift within seconds
under selfHeal; Flux's kustomize-controller labels objects ``kustomize.toolkit.fluxcd.io/name``
and ``/namespace`` and reverts atomic lists even with ``Merge``. Any other field manager that owns
``spec.resourceGroups`` (``metadata.managedFields``) will overwrite the list on its next apply.
The same holds for a Volcano or KAI Queue, whose quota fields are others
(``quotas.writeback.native``: ``deserved``, ``capability``, ``guarantee``; ``resources``).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

import yaml

from quotas.constants import KUEUE_GROUP

OUR_FIELD_MANAGER = "gpu-ledger"
ARGO_TRACKING = "argocd.argoproj.io/tracking-id"
ARGO_INSTANCE = "app.kubernetes.io/instance"
FLUX_PREFIX = "kustomize.toolkit.fluxcd.io/"
# Managers that write an object's spec for a person at a terminal, not a controller that will
# put its own version back.
INTERACTIVE_MANAGERS = ("kubectl", "kubectl-edit", "kubectl-patch", "kubectl-client-side-apply")
QUOTA_FIELDS = ("f:resourceGroups", "f:stopPolicy")


@dataclass(frozen=True)
class Owner:
    """Who manages the object besides us: ``tool`` (argocd, flux, manager) and a sentence."""

    tool: str
    name: str
    detail: str


def quota_managers(
    obj: dict[str, Any], fields: tuple[str, ...] = QUOTA_FIELDS
) -> list[dict[str, Any]]:
    """``managedFields`` entries that own one of the spec ``fields`` (Kueue's
    ``spec.resourceGroups`` or ``spec.stopPolicy`` unless told)."""
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    found = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("subresource"):
            continue
        spec = ((entry.get("fieldsV1") or {}).get("f:spec")) or {}
        if isinstance(spec, dict) and any(key in spec for key in fields):
            found.append(entry)
    return found


def latest_quota_manager(obj: dict[str, Any]) -> str:
    """The manager that most recently wrote the quota fields ("" when unknown)."""
    entries = quota_managers(obj)
    if not entries:
        return ""
    newest = max(entries, key=lambda e: str(e.get("time") or ""))
    return str(newest.get("manager") or "")


def gitops_owner(obj: dict[str, Any], fields: tuple[str, ...] = QUOTA_FIELDS) -> Owner | None:
    """Argo CD, Flux or another non-interactive field manager owning the quotas (the spec
    ``fields`` that hold them), else None."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    if annotations.get(ARGO_TRACKING):
        app = str(annotations[ARGO_TRACKING]).split(":", 1)[0]
        return Owner("argocd", app, f"Argo CD application {app} ({ARGO_TRACKING})")
    flux = {k: v for k, v in labels.items() if str(k).startswith(FLUX_PREFIX)}
    if flux:
        name = flux.get(f"{FLUX_PREFIX}name", "")
        namespace = flux.get(f"{FLUX_PREFIX}namespace", "")
        where = f"{namespace}/{name}" if namespace else name
        return Owner("flux", where, f"Flux Kustomization {where} ({FLUX_PREFIX}* labels)")
    if labels.get(ARGO_INSTANCE) and any(
        "argocd" in str(e.get("manager") or "") for e in quota_managers(obj, fields)
    ):
        app = str(labels[ARGO_INSTANCE])
        return Owner("argocd", app, f"Argo CD application {app} ({ARGO_INSTANCE} label)")
    for entry in quota_managers(obj, fields):
        manager = str(entry.get("manager") or "")
        if manager == OUR_FIELD_MANAGER or manager in INTERACTIVE_MANAGERS:
            continue
        if "argocd" in manager:
            return Owner("argocd", manager, f"Argo CD (field manager {manager})")
        if "kustomize-controller" in manager or "flux" in manager:
            return Owner("flux", manager, f"Flux (field manager {manager})")
        operation = entry.get("operation") or ""
        spec = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        owned = ", ".join(f"spec.{key.removeprefix('f:')}" for key in fields if key in spec)
        return Owner(
            "manager",
            manager,
            f"field manager {manager} ({operation or 'write'}) owns {owned}",
        )
    return None


def patch_yaml(kind: str, name: str, api_version: str, spec_patch: dict[str, Any]) -> str:
    """The change as a YAML document for the repository (the fields to set, nothing else)."""
    doc = {
        "apiVersion": api_version or f"{KUEUE_GROUP}/v1beta2",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec_patch,
    }
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def kubectl_command(
    kind: str, name: str, body: dict[str, Any], context: str = "", *, resource: str = ""
) -> str:
    """The exact ``kubectl patch`` that makes the same write as GPU Ledger would; ``resource``
    names what is patched as kubectl does (``queues.scheduling.volcano.sh``), else the Kueue
    ``kind``'s."""
    parts = ["kubectl"]
    if context:
        parts += ["--context", context]
    parts += [
        "patch",
        resource or f"{kind.lower()}s.{KUEUE_GROUP}",
        name,
        "--type=merge",
        f"--field-manager={OUR_FIELD_MANAGER}",
        "-p",
        json.dumps(body, separators=(",", ":"), sort_keys=False),
    ]
    return " ".join(shlex.quote(part) for part in parts)
