"""Writes for ``tests.kube_api_server.FakeKubeAPI``: PATCH (JSON merge patch and server-side
apply) as kube-apiserver handles them for Kueue objects.

* ``dryRun=All``: the whole write is computed and validated, and answered, but nothing is stored
  and no watch event goes out.
* ``metadata.resourceVersion`` in the patch must equal the stored one, else ``409 Conflict``.
* Validation runs Kueue's CRD rules a quota edit can break (quantities, at most 16 resource groups,
  ``borrowingLimit`` / ``lendingLimit`` only with a cohort, ``lendingLimit`` ≤ ``nominalQuota``),
  the Volcano and KAI Queue schemas' types of the quota fields (``scheduler_causes``: Volcano's
  resource lists are quantities, KAI's ``spec.resources.*`` numbers), then the test's
  ``validators``; failures answer ``422 Invalid`` with ``details.causes``.
* ``fieldManager`` takes ownership of the top-level ``spec`` fields the patch sets, in
  ``metadata.managedFields`` (operation ``Update`` for merge patches, ``Apply`` for apply).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import yaml

from tests.scheduler_fixtures import KAI_GROUP, VOLCANO_GROUP

if TYPE_CHECKING:
    from tests.kube_api_server import FakeKubeAPI, Resource

QUANTITY = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?")
PATCH_TYPES = {
    "application/merge-patch+json": "Update",
    "application/apply-patch+yaml": "Apply",
}

# (resource, the object as it would be stored) -> causes [{reason, message, field}]
Validator = Callable[["Resource", dict[str, Any]], list[dict[str, str]]]


@dataclass
class RecordedRequest:
    """One request the server received, as it came."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""
    json: Any = field(default=None)


def writes(api: FakeKubeAPI, plural: str) -> list[RecordedRequest]:
    with api._lock:
        return [r for r in api.recorded if r.method == "PATCH" and f"/{plural}/" in r.path + "/"]


def kueue_causes(resource: Resource, obj: dict[str, Any]) -> list[dict[str, str]]:
    """What Kueue's CRD schema and CEL rules say about a ClusterQueue's or Cohort's quotas."""
    if resource.kind not in ("ClusterQueue", "Cohort"):
        return []
    spec = obj.get("spec") or {}
    causes = []
    groups = spec.get("resourceGroups") or []
    if len(groups) > 16:
        causes.append(
            _cause("FieldValueTooMany", "must have at most 16 items", "spec.resourceGroups")
        )
    has_cohort = bool(spec.get("cohortName") or spec.get("cohort") or resource.kind == "Cohort")
    for g, group in enumerate(groups):
        for f, flavor in enumerate(group.get("flavors") or []):
            for r, quota in enumerate(flavor.get("resources") or []):
                path = f"spec.resourceGroups[{g}].flavors[{f}].resources[{r}]"
                for name in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    value = quota.get(name)
                    if value is not None and not QUANTITY.fullmatch(str(value)):
                        causes.append(
                            _cause(
                                "FieldValueInvalid",
                                f"Invalid value: {value!r}: quantities must match the regular "
                                "expression",
                                f"{path}.{name}",
                            )
                        )
                if not has_cohort:
                    for name in ("borrowingLimit", "lendingLimit"):
                        if quota.get(name) is not None:
                            causes.append(
                                _cause(
                                    "FieldValueForbidden",
                                    "must be nil when cohort is empty",
                                    f"{path}.{name}",
                                )
                            )
                nominal, lending = quota.get("nominalQuota"), quota.get("lendingLimit")
                if _number(lending) is not None and _number(nominal) is not None:
                    if _number(lending) > _number(nominal):  # type: ignore[operator]
                        causes.append(
                            _cause(
                                "FieldValueInvalid",
                                "must be less than or equal to the nominalQuota",
                                f"{path}.lendingLimit",
                            )
                        )
    stop = spec.get("stopPolicy")
    if stop is not None and stop not in ("None", "Hold", "HoldAndDrain"):
        causes.append(
            _cause(
                "FieldValueNotSupported",
                f'Unsupported value: "{stop}": supported values: "None", "Hold", "HoldAndDrain"',
                "spec.stopPolicy",
            )
        )
    return causes


def scheduler_causes(resource: Resource, obj: dict[str, Any]) -> list[dict[str, str]]:
    """What the Volcano and KAI Queue CRD schemas say about the quota fields' types:
    Volcano's ``deserved``, ``capability`` and ``guarantee.resource`` are int-or-string
    quantities, KAI's ``spec.resources.{gpu,cpu,memory}.{quota,limit,overQuotaWeight}`` numbers."""
    if resource.kind != "Queue":
        return []
    spec = obj.get("spec") or {}
    causes = []
    if resource.group == VOLCANO_GROUP:
        lists = {
            "spec.deserved": spec.get("deserved"),
            "spec.capability": spec.get("capability"),
            "spec.guarantee.resource": (spec.get("guarantee") or {}).get("resource"),
        }
        for path, found in lists.items():
            for name, value in (found or {}).items():
                if isinstance(value, bool) or not (
                    isinstance(value, int) or QUANTITY.fullmatch(str(value))
                ):
                    causes.append(
                        _cause(
                            "FieldValueInvalid",
                            f"Invalid value: {value!r}: quantities must match the regular "
                            "expression",
                            f"{path}.{name}",
                        )
                    )
    elif resource.group == KAI_GROUP:
        for name, found in (spec.get("resources") or {}).items():
            for key in ("quota", "limit", "overQuotaWeight"):
                value = (found or {}).get(key)
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, int | float)
                ):
                    path = f"spec.resources.{name}.{key}"
                    causes.append(
                        _cause(
                            "FieldValueTypeInvalid",
                            f'Invalid value: "{type(value).__name__}": {path} in body must be of '
                            "type number",
                            path,
                        )
                    )
    return causes


def _number(value: Any) -> float | None:
    from core.quantity import parse_quantity

    try:
        return float(parse_quantity(value)) if value is not None else None
    except ValueError:
        return None


def _cause(reason: str, message: str, field_path: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field_path}


def _own(obj: dict[str, Any], manager: str, operation: str, patch: dict[str, Any]) -> None:
    """Give ``manager`` the top-level spec fields the patch sets; take them from the others."""
    fields = sorted((patch.get("spec") or {}).keys()) if isinstance(patch.get("spec"), dict) else []
    if not fields:
        return
    meta = obj.setdefault("metadata", {})
    entries = meta.get("managedFields") or []
    owned = {f"f:{name}" for name in fields}
    kept = []
    for entry in entries:
        spec_fields = ((entry.get("fieldsV1") or {}).get("f:spec") or {}) if entry else {}
        if entry.get("manager") == manager and entry.get("operation") == operation:
            continue
        for key in owned:
            spec_fields.pop(key, None)
        if spec_fields or entry.get("subresource"):
            kept.append(entry)
    previous = next(
        (e for e in entries if e.get("manager") == manager and e.get("operation") == operation),
        None,
    )
    mine = copy.deepcopy((previous or {}).get("fieldsV1") or {"f:spec": {}})
    mine.setdefault("f:spec", {}).update({key: {} for key in owned})
    kept.append(
        {
            "manager": manager,
            "operation": operation,
            "apiVersion": obj.get("apiVersion", ""),
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "fieldsType": "FieldsV1",
            "fieldsV1": mine,
        }
    )
    meta["managedFields"] = kept


def patch(
    api: FakeKubeAPI,
    resource: Resource,
    namespace: str,
    name: str,
    body: bytes,
    content_type: str,
    query: dict[str, str],
) -> tuple[int, dict[str, Any] | bytes]:
    """Answer one PATCH: (status, Status body or the encoded object)."""
    from tests.kube_api_server import merge_patch, status_body

    operation = PATCH_TYPES.get(content_type)
    if operation is None:
        return 415, status_body(
            415, f"the body of the request was in an unknown format: {content_type}"
        )
    try:
        doc = json.loads(body or b"null") if operation == "Update" else yaml.safe_load(body)
    except (ValueError, yaml.YAMLError):
        return 400, status_body(400, "error decoding patch body")
    if not isinstance(doc, dict):
        return 422, status_body(422, "patch body must be an object")
    manager = query.get("fieldManager", "")
    if operation == "Apply" and not manager:
        return 400, status_body(400, "PATCH, application/apply-patch+yaml requires fieldManager")
    dry_run = query.get("dryRun") == "All"
    store = api._stores[resource.key]
    with api._lock:
        current = store.objects.get((namespace, name))
        if current is None:
            return 404, status_body(404, f'{resource.plural}.{resource.group} "{name}" not found')
        wanted_rv = str((doc.get("metadata") or {}).get("resourceVersion") or "")
        stored_rv = str((current.get("metadata") or {}).get("resourceVersion") or "")
        if wanted_rv and wanted_rv != stored_rv:
            conflict = status_body(
                409,
                f'Operation cannot be fulfilled on {resource.plural}.{resource.group} "{name}": '
                "the object has been modified; please apply your changes to the latest version "
                "and try again",
                "Conflict",
            )
            conflict["details"] = {"name": name, "group": resource.group, "kind": resource.plural}
            return 409, conflict
        patched = merge_patch(current, doc)
        patched.setdefault("metadata", {})["name"] = name
        patched["metadata"]["resourceVersion"] = stored_rv
        if namespace:
            patched["metadata"]["namespace"] = namespace
        causes = kueue_causes(resource, patched) + scheduler_causes(resource, patched)
        for validator in api.validators:
            causes.extend(validator(resource, patched))
        if causes:
            invalid = status_body(
                422,
                f'{resource.kind}.{resource.group} "{name}" is invalid: '
                + ", ".join(f"{c['field']}: {c['message']}" for c in causes),
                "Invalid",
            )
            invalid["details"] = {
                "name": name,
                "group": resource.group,
                "kind": resource.kind,
                "causes": causes,
            }
            return 422, invalid
        if manager:
            _own(patched, manager, operation, doc)
        if dry_run:
            return 200, json.dumps(patched, separators=(",", ":")).encode()
        api._record(store, "MODIFIED", patched, (namespace, name))
        return 200, store.encoded[(namespace, name)]
