"""What a quota edit is, and the one write that carries it.

An edit names flavor x resource cells with their new ``nominalQuota``, ``borrowingLimit`` and
``lendingLimit`` (``None`` or empty = unset; a limit the cell does not name at all keeps its live
value, ``keep_limits``) and maybe a new ``stopPolicy``. Values are validated as
Kubernetes quantities and written in canonical form (``12``, never ``12000m``), so a GitOps diff
does not flap between spellings of one number.

``resourceGroups`` is an atomic list in Kueue's CRD (docs/architecture.md "Quota write-back"): the
write always carries the complete list, copied from the live object, with only the edited values
changed; other flavors, resources, and the spelling of untouched values stay exactly as they are.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from core.quantity import QuantityError, canonical_quantity, parse_quantity, quota_quantity
from quotas.choices import STOP_POLICIES

LIMITS = ("nominal", "borrowing_limit", "lending_limit")
# Our names -> the CRD's.
CRD_NAMES = {
    "nominal": "nominalQuota",
    "borrowing_limit": "borrowingLimit",
    "lending_limit": "lendingLimit",
}


class EditError(ValueError):
    """An edit that cannot be written; ``errors`` maps a field to its messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class Cell:
    """One flavor x resource quota, values as canonical quantity strings (None = unset)."""

    flavor: str
    resource: str
    nominal: str | None
    borrowing_limit: str | None = None
    lending_limit: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.flavor, self.resource)

    def as_dict(self) -> dict[str, Any]:
        return {
            "flavor": self.flavor,
            "resource": self.resource,
            "nominal": self.nominal,
            "borrowing_limit": self.borrowing_limit,
            "lending_limit": self.lending_limit,
        }

    def amount(self, name: str) -> Decimal | None:
        value = getattr(self, name)
        return None if value is None else parse_quantity(value)


@dataclass
class Edit:
    """The cells asked for, and the stopPolicy (None = leave it)."""

    cells: list[Cell] = field(default_factory=list)
    stop_policy: str | None = None
    # (flavor, resource, limit) the request did not name: they keep their live values.
    kept: frozenset[tuple[str, str, str]] = frozenset()


def cell_field(flavor: str, resource: str, name: str) -> str:
    """The form / API field name of one value, as errors name it."""
    return f"{flavor}/{resource}/{name}"


def parse_edit(
    raw_cells: list[dict[str, Any]], stop_policy: str | None, *, has_cohort: bool
) -> Edit:
    """Validate ``[{flavor, resource, nominal, borrowing_limit, lending_limit}]``.

    Empty strings and None unset a limit; a limit whose key is absent is kept as it is live
    (``keep_limits`` fills it in); nominal is required. Raises ``EditError`` naming each bad
    field; every value goes through ``core.quantity.quota_quantity`` (grammar, ASCII digits, the
    resource's ceiling).
    """
    errors: dict[str, list[str]] = {}
    cells = []
    kept: set[tuple[str, str, str]] = set()
    seen: set[tuple[str, str]] = set()
    for index, raw in enumerate(raw_cells):
        flavor = str(raw.get("flavor") or "").strip()
        resource = str(raw.get("resource") or "").strip()
        if not flavor or not resource:
            errors.setdefault(f"changes[{index}]", []).append("flavor and resource are required.")
            continue
        if (flavor, resource) in seen:
            errors.setdefault(cell_field(flavor, resource, "flavor"), []).append("listed twice.")
            continue
        seen.add((flavor, resource))
        values: dict[str, str | None] = {}
        for name in LIMITS:
            if name != "nominal" and name not in raw:
                kept.add((flavor, resource, name))
                values[name] = None
                continue
            value = raw.get(name)
            text = "" if value is None else str(value).strip()
            if not text:
                if name == "nominal":
                    errors.setdefault(cell_field(flavor, resource, name), []).append(
                        "A nominal quota is required (0 for none)."
                    )
                values[name] = None
                continue
            try:
                values[name] = quota_quantity(text, resource)
            except QuantityError as exc:
                errors.setdefault(cell_field(flavor, resource, name), []).append(str(exc))
        if not has_cohort:
            for name in ("borrowing_limit", "lending_limit"):
                if values.get(name) is not None:
                    errors.setdefault(cell_field(flavor, resource, name), []).append(
                        "Only a queue in a cohort can have a borrowing or lending limit."
                    )
        nominal, lending = values.get("nominal"), values.get("lending_limit")
        if nominal is not None and lending is not None:
            if parse_quantity(lending) > parse_quantity(nominal):
                errors.setdefault(cell_field(flavor, resource, "lending_limit"), []).append(
                    "Must not exceed the nominal quota."
                )
        cells.append(
            Cell(
                flavor,
                resource,
                values.get("nominal"),
                values.get("borrowing_limit"),
                values.get("lending_limit"),
            )
        )
    if stop_policy not in (None, "", *STOP_POLICIES):
        errors.setdefault("stop_policy", []).append(f"Must be one of {', '.join(STOP_POLICIES)}.")
    if errors:
        raise EditError(errors)
    return Edit(cells, stop_policy or None, frozenset(kept))


def keep_limits(edit: Edit, before: list[Cell]) -> Edit:
    """The edit with every limit it did not name set to its live value.

    A client that sends only ``nominal`` must not turn ``borrowingLimit: 0`` into unlimited
    borrowing. Raises ``EditError`` when a kept lending limit exceeds the new nominal quota.
    """
    if not edit.kept:
        return edit
    current = {cell.key: cell for cell in before}
    cells, errors = [], {}
    for cell in edit.cells:
        was = current.get(cell.key)
        values = {name: getattr(cell, name) for name in LIMITS}
        for name in ("borrowing_limit", "lending_limit"):
            if was is not None and (cell.flavor, cell.resource, name) in edit.kept:
                values[name] = getattr(was, name)
        nominal, lending = values["nominal"], values["lending_limit"]
        if nominal is not None and lending is not None:
            if parse_quantity(lending) > parse_quantity(nominal):
                errors[cell_field(cell.flavor, cell.resource, "lending_limit")] = [
                    f"The lending limit ({lending}) must not exceed the nominal quota: lower "
                    "it in the same change."
                ]
        cells.append(Cell(cell.flavor, cell.resource, **values))
    if errors:
        raise EditError(errors)
    return Edit(cells, edit.stop_policy)


def live_cells(obj: dict[str, Any]) -> list[Cell]:
    """The quota cells of a live ClusterQueue or Cohort, values canonicalised for comparing."""
    cells = []
    for group in (obj.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for quota in flavor.get("resources") or []:
                values = {}
                for name, crd in CRD_NAMES.items():
                    value = quota.get(crd)
                    values[name] = None if value is None else _canonical_or_raw(value)
                if values["nominal"] is None:
                    values["nominal"] = "0"
                cells.append(Cell(flavor.get("name", ""), quota.get("name", ""), **values))
    return cells


def _canonical_or_raw(value: Any) -> str:
    try:
        return canonical_quantity(value)
    except ValueError:
        return str(value)


def live_stop_policy(obj: dict[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("stopPolicy") or "None")


def changed_cells(before: list[Cell], edit: Edit) -> tuple[list[Cell], list[Cell]]:
    """(before, after) of the cells the edit really changes, in the edit's order.

    A cell the object does not have is an error: resource groups are not restructured here.
    """
    current = {cell.key: cell for cell in before}
    missing = [cell for cell in edit.cells if cell.key not in current]
    if missing:
        raise EditError(
            {
                cell_field(cell.flavor, cell.resource, "flavor"): [
                    "The queue has no quota for this flavor and resource."
                ]
                for cell in missing
            }
        )
    old, new = [], []
    for cell in edit.cells:
        was = current[cell.key]
        if any(getattr(was, name) != getattr(cell, name) for name in LIMITS):
            old.append(was)
            new.append(cell)
    return old, new


def build_resource_groups(live: dict[str, Any], after: list[Cell]) -> list[dict[str, Any]]:
    """The complete ``resourceGroups`` of the live object with only ``after``'s values changed."""
    groups = copy.deepcopy((live.get("spec") or {}).get("resourceGroups") or [])
    wanted = {cell.key: cell for cell in after}
    done: set[tuple[str, str]] = set()
    for group in groups:
        for flavor in group.get("flavors") or []:
            for quota in flavor.get("resources") or []:
                cell = wanted.get((flavor.get("name", ""), quota.get("name", "")))
                if cell is None:
                    continue
                done.add(cell.key)
                for name, crd in CRD_NAMES.items():
                    value = getattr(cell, name)
                    if value is None and name != "nominal":
                        quota.pop(crd, None)
                    else:
                        quota[crd] = value if value is not None else "0"
    missing = sorted(set(wanted) - done)
    if missing:
        raise EditError(
            {
                cell_field(flavor, resource, "flavor"): [
                    "The live object has no quota for this flavor and resource."
                ]
                for flavor, resource in missing
            }
        )
    return groups


def patch_body(
    live: dict[str, Any],
    after: list[Cell],
    stop_policy: str | None,
    resource_version: str,
) -> dict[str, Any]:
    """The merge patch: complete resourceGroups (when cells change), stopPolicy, and the
    resourceVersion the preview was computed from."""
    spec: dict[str, Any] = {}
    if after:
        spec["resourceGroups"] = build_resource_groups(live, after)
    if stop_policy is not None:
        spec["stopPolicy"] = stop_policy
    body: dict[str, Any] = {"spec": spec}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return body
