"""Where a quota edit is written: Kueue's own ClusterQueue or Cohort, or the Volcano or KAI Queue
a ClusterQueue row was translated from (docs/architecture.md "Quota write-back").

An edit is always made in the product's vocabulary (``Cell``: nominal, borrowing limit, lending
limit of ``default-flavor`` x ``nvidia.com/gpu``, as the translation of
``quotas.sources.volcano`` / ``quotas.sources.kai`` shows the queue), and written back to the
source's own fields with one merge patch of the Queue:

* **Volcano** (``scheduling.volcano.sh/v1beta1`` Queue): nominal -> ``spec.deserved``,
  nominal + borrowing limit -> ``spec.capability`` (no borrowing limit: the key removed),
  and, for a reclaimable queue, an edited lending limit: nominal - lending limit ->
  ``spec.guarantee.resource`` (the part never lent; no lending limit: guarantee 0, everything
  lendable). A lending limit left as it was keeps the guarantee an administrator set (the
  lending limit shown moves with the nominal: nominal - guarantee), unless the nominal falls
  below it, when the guarantee falls to the nominal. A ``reclaimable: false`` queue lends
  nothing whatever its guarantee: its lending limit stays 0 and its guarantee is not touched.
  Only the ``nvidia.com/gpu`` key of each map is sent: a merge patch of a map changes the keys
  it names and keeps the others (CPU, memory).
* **KAI** (``scheduling.run.ai/v2`` Queue): nominal -> ``spec.resources.gpu.quota``, nominal +
  borrowing limit -> ``spec.resources.gpu.limit`` (no borrowing limit: ``-1``), JSON numbers as
  the CRD types them. KAI has no lending limit. A queue whose quota is unlimited (``-1``) shows
  the GPUs it holds as its nominal: typing another nominal gives it that finite quota; a
  borrowing limit over an unlimited quota has no meaning and is refused.
* Stop policy: Volcano opens and closes queues through ``status.state`` (a ``bus.volcano.sh``
  Command), KAI has none; neither is written here.
* A **parent queue** (a Cohort row) shows as its own pool what its children's quota leaves of
  its own (``quotas.sources.common.own_quota``). An edit of that pool writes the queue's own
  quota: Volcano ``deserved`` = pool + its children's deserved, its ``capability`` moved by as
  much (what it may take above its deserved stays); KAI ``gpu.quota`` = pool + its children's
  quota, and ``gpu.limit`` = that + the Cohort's borrowing limit (none: -1). The children are
  listed with the parent, and apply refuses, as a conflict, a write whose children changed
  since the preview (their sum is not guarded by the parent's resourceVersion). A Volcano
  parent shows no limits, so none are written; a KAI parent or child with an unlimited quota
  has a pool that moves with what it holds, and is refused.

The values after an edit (``normalize``) are those the next sync will show, so the sync marks
the change applied and observed when it sees them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from core.mig import GPU_RESOURCE
from core.quantity import display_quantity, parse_quantity
from fleet.choices import QuotaSource
from quotas.constants import KUEUE_GROUP
from quotas.kueue import KubeError, KueueClient
from quotas.kueue.payloads import Kind
from quotas.sources import kai, volcano
from quotas.sources.common import as_dict, gpus, name_of, quantity
from quotas.writeback.edits import (
    Cell,
    Edit,
    EditError,
    cell_field,
    live_cells,
    live_stop_policy,
    patch_body,
)
from quotas.writeback.gitops import QUOTA_FIELDS


@dataclass(frozen=True)
class Target:
    """The object a quota edit of a ClusterQueue or Cohort row is written to."""

    scheduler: str
    # The product's kind of the row (ClusterQueue or Cohort).
    product_kind: str
    # The source's own kind (a Volcano or KAI Queue); None: Kueue's own ``product_kind``.
    kind: Kind | None = None
    versions: tuple[str, ...] = ()
    # The ``managedFields`` keys under ``f:spec`` that hold the quotas (gitops.gitops_owner).
    quota_fields: tuple[str, ...] = QUOTA_FIELDS

    @property
    def native(self) -> bool:
        return self.kind is not None

    @property
    def kind_name(self) -> str:
        """The object's kind as the API server names it (``Queue`` for Volcano and KAI)."""
        return self.kind.name if self.kind else self.product_kind

    @property
    def resource(self) -> str:
        """As kubectl names it: ``clusterqueues.kueue.x-k8s.io``, ``queues.scheduling.run.ai``."""
        if self.kind is not None:
            return f"{self.kind.plural}.{self.kind.group}"
        return f"{self.product_kind.lower()}s.{KUEUE_GROUP}"

    def default_api_version(self) -> str:
        if self.kind is not None:
            return f"{self.kind.group}/{self.versions[0]}"
        return f"{KUEUE_GROUP}/v1beta2"


VOLCANO_FIELDS = ("f:deserved", "f:capability", "f:guarantee")
# Where ``read`` puts a parent queue's child queues in the live object it returns.
CHILDREN = "gpu-ledger.io/children"
KAI_FIELDS = ("f:resources",)
NATIVE: dict[str, tuple[Kind, tuple[str, ...], tuple[str, ...]]] = {
    QuotaSource.VOLCANO: (volcano.QUEUE, volcano.VOLCANO_VERSIONS, VOLCANO_FIELDS),
    QuotaSource.KAI: (kai.QUEUE, kai.QUEUE_VERSIONS, KAI_FIELDS),
}


def target_for(scheduler: str, product_kind: str) -> Target:
    """The object an edit of a ``product_kind`` row read from ``scheduler`` is written to.

    Raises ``EditError`` for a source without write-back."""
    if scheduler in ("", QuotaSource.KUEUE):
        return Target(QuotaSource.KUEUE, product_kind)
    if scheduler not in NATIVE:
        raise EditError({"__all__": [f"Quota write-back does not serve {scheduler} quotas."]})
    kind, versions, fields = NATIVE[scheduler]
    return Target(scheduler, product_kind, kind, versions, fields)


def object_names(scheduler: str, product_kind: str) -> tuple[str, str]:
    """(resource as kubectl names it, apiVersion) of the object a row read from ``scheduler``
    comes from; the apiVersion "" for Kueue's (the served version is not known here), both ""
    for a source without write-back."""
    if scheduler not in ("", QuotaSource.KUEUE, *NATIVE):
        return "", ""
    target = target_for(scheduler, product_kind)
    return target.resource, target.default_api_version() if target.native else ""


def target_of_resource(resource: str, product_kind: str) -> Target:
    """The target a stored change names (``QuotaChange.target_resource``; "" for changes made
    before it was recorded: Kueue's)."""
    for scheduler, (kind, versions, fields) in NATIVE.items():
        if resource == f"{kind.plural}.{kind.group}":
            return Target(scheduler, product_kind, kind, versions, fields)
    return Target(QuotaSource.KUEUE, product_kind)


def mapping_note(target: Target) -> str:
    """What the edit form's values become on the source's Queue, for the form; "" for Kueue."""
    if target.kind is None:
        return ""
    where = f"Written to the {target.resource} object ({target.default_api_version()}): "
    if target.scheduler == QuotaSource.VOLCANO:
        if target.product_kind == "Cohort":
            return where + (
                "the pool + its children's deserved becomes spec.deserved, and spec.capability "
                "moves by as much. Only the nvidia.com/gpu keys change."
            )
        return where + (
            "nominal becomes spec.deserved, nominal + borrowing limit spec.capability (empty: "
            "no GPU capability), nominal - lending limit spec.guarantee (the part never lent). "
            "Only the nvidia.com/gpu keys change. Volcano opens and closes queues with vcctl: "
            "no stop policy here."
        )
    if target.product_kind == "Cohort":
        return where + (
            "the pool + its children's quota becomes spec.resources.gpu.quota, that + the "
            "borrowing limit spec.resources.gpu.limit (empty: -1, no limit). KAI has no lending "
            "limit."
        )
    return where + (
        "nominal becomes spec.resources.gpu.quota, nominal + borrowing limit "
        "spec.resources.gpu.limit (empty: -1, no limit). KAI has no lending limit and no stop "
        "policy."
    )


# --- reading and writing ---------------------------------------------------------------------


def _version(client: KueueClient, target: Target) -> str:
    assert target.kind is not None  # noqa: S101 - only native targets come here
    # No Kueue on this cluster is expected: discovery need not warn about it.
    client.expects_kueue = False
    served = client.discover().group_versions(target.kind.group)
    version = next((v for v in target.versions if v in served), None)
    if version is None:
        raise KubeError(
            f"{target.resource} {'/'.join(target.versions)}: not served by this API server",
            404,
            True,
            reason="NotServed",
        )
    return version


def read(client: KueueClient, target: Target, name: str) -> dict[str, Any]:
    """The live object, ``managedFields`` included; a parent queue's with its child queues
    (under ``CHILDREN``, never sent back)."""
    if target.kind is None:
        return client.get_object(target.product_kind, name)
    version = _version(client, target)
    live = client.get_cluster_object(target.kind, version, name)
    if target.product_kind == "Cohort":
        parent_of = volcano.parent_of if target.scheduler == QuotaSource.VOLCANO else kai.parent_of
        listed = client.list_kind(target.kind, version)
        live[CHILDREN] = [
            q for q in listed.items if parent_of(q) == name and name_of(q) not in ("", name)
        ]
    return live


def write(
    client: KueueClient,
    target: Target,
    name: str,
    body: dict[str, Any],
    *,
    field_manager: str,
    dry_run: bool,
) -> dict[str, Any]:
    """One merge patch of the object (``dryRun=All`` when asked)."""
    if target.kind is None:
        return client.patch_object(
            target.product_kind, name, body, field_manager=field_manager, dry_run=dry_run
        )
    return client.patch_cluster_object(
        target.kind,
        _version(client, target),
        name,
        body,
        field_manager=field_manager,
        dry_run=dry_run,
    )


def synced_queue(target: Target, cells: list[Cell]) -> dict[str, Any] | None:
    """A Volcano or KAI leaf queue's quota fields rebuilt from its synced cells, for a patch
    when the live Queue cannot be read (its reclaimable flag and an unlimited KAI quota are not
    known: read as reclaimable and finite). None for Kueue and parent queues."""
    if target.kind is None or target.product_kind == "Cohort":
        return None
    gpu = next((cell for cell in cells if cell.resource == GPU_RESOURCE), None)
    if gpu is None:
        return {"spec": {}}
    nominal = _amount(gpu.nominal) or Decimal(0)
    borrowing = _amount(gpu.borrowing_limit)
    lending = _amount(gpu.lending_limit)
    if target.scheduler == QuotaSource.VOLCANO:
        spec: dict[str, Any] = {"deserved": {GPU_RESOURCE: _text(nominal)}}
        if borrowing is not None:
            spec["capability"] = {GPU_RESOURCE: _text(nominal + borrowing)}
        if lending is not None and lending < nominal:
            spec["guarantee"] = {"resource": {GPU_RESOURCE: _text(nominal - lending)}}
        return {"spec": spec}
    limit = -1 if borrowing is None else _kai_number(nominal + borrowing)
    return {"spec": {"resources": {"gpu": {"quota": _kai_number(nominal), "limit": limit}}}}


def _children(live: dict[str, Any]) -> list[Mapping[str, Any]]:
    found = live.get(CHILDREN)
    return [q for q in found if isinstance(q, dict)] if isinstance(found, list) else []


def cells_of(target: Target, live: dict[str, Any]) -> list[Cell]:
    """The live object's quotas as the product reads them (the source's translation)."""
    cohort = target.product_kind == "Cohort"
    if target.scheduler == QuotaSource.VOLCANO:
        if cohort:
            return live_cells(volcano.queue_to_cohort(live, _children(live)))
        return live_cells(volcano.queue_to_cluster_queue(live))
    if target.scheduler == QuotaSource.KAI:
        if cohort:
            return live_cells(kai.queue_to_cohort(live, _children(live)))
        return live_cells(kai.queue_to_cluster_queue(live))
    return live_cells(live)


def stop_policy_of(target: Target, live: dict[str, Any]) -> str:
    if target.scheduler == QuotaSource.VOLCANO:
        return live_stop_policy(volcano.queue_to_cluster_queue(live))
    if target.scheduler == QuotaSource.KAI:
        return "None"
    return live_stop_policy(live)


def body_for(
    target: Target,
    live: dict[str, Any],
    after: list[Cell],
    stop_policy: str | None,
    resource_version: str,
) -> dict[str, Any]:
    """The merge patch of the object that carries ``after`` (and the stopPolicy, Kueue only),
    with the resourceVersion the preview read."""
    if target.kind is None:
        return patch_body(live, after, stop_policy, resource_version)
    spec: dict[str, Any] = {}
    for cell in after:
        if target.product_kind == "Cohort":
            cell = _subtree_cell(target, live, cell)
        if target.scheduler == QuotaSource.VOLCANO:
            _merge(
                spec, _volcano_spec(live, cell, moves_capability=target.product_kind == "Cohort")
            )
        else:
            _merge(spec, _kai_spec(live, cell))
    body: dict[str, Any] = {"spec": spec}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return body


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _amount(value: str | None) -> Decimal | None:
    return None if value is None else parse_quantity(value)


def _text(amount: Decimal) -> str:
    return display_quantity(amount, GPU_RESOURCE)


def _subtree_cell(target: Target, live: dict[str, Any], cell: Cell) -> Cell:
    """A parent queue's cell with its own quota in place of its pool: the pool plus what its
    children's quota takes (see the module docstring)."""
    if target.scheduler == QuotaSource.VOLCANO:
        taken = sum((volcano.deserved(q) for q in _children(live)), Decimal(0))
    else:
        taken = sum((kai.nominal(q) for q in _children(live)), Decimal(0))
    pool = _amount(cell.nominal) or Decimal(0)
    return replace(cell, nominal=_text(pool + taken))


def _volcano_spec(
    live: dict[str, Any], cell: Cell, *, moves_capability: bool = False
) -> dict[str, Any]:
    """The ``spec`` keys that give the queue ``cell``; a key already at its value is not sent.
    ``moves_capability`` (a parent queue, which shows no limits): the capability moves with the
    deserved, guarantee untouched."""
    spec = as_dict(live.get("spec"))
    nominal = _amount(cell.nominal) or Decimal(0)
    borrowing = _amount(cell.borrowing_limit)
    out: dict[str, Any] = {}
    deserved = gpus(spec.get("deserved")) or Decimal(0)
    if deserved != nominal or "deserved" not in spec:
        out["deserved"] = {GPU_RESOURCE: _text(nominal)}
    capability = gpus(spec.get("capability"))
    if moves_capability:
        if capability is not None and nominal != deserved:
            moved = max(Decimal(0), capability + nominal - deserved)
            out["capability"] = {GPU_RESOURCE: _text(moved)}
        return out
    if borrowing is None:
        if GPU_RESOURCE in as_dict(spec.get("capability")):
            out["capability"] = {GPU_RESOURCE: None}
    elif capability != nominal + borrowing:
        out["capability"] = {GPU_RESOURCE: _text(nominal + borrowing)}
    if spec.get("reclaimable") is not False:
        lending = _amount(cell.lending_limit)
        kept = nominal - (nominal if lending is None else lending)
        guarantee = as_dict(spec.get("guarantee")).get("resource")
        now = gpus(guarantee)
        if (now or Decimal(0)) != kept:
            out["guarantee"] = {"resource": {GPU_RESOURCE: _text(kept)}}
    return out


def _kai_gpu(live: dict[str, Any]) -> dict[str, Any]:
    return as_dict(as_dict(as_dict(live.get("spec")).get("resources")).get("gpu"))


def _kai_number(amount: Decimal) -> int | float:
    """A KAI quota as its CRD types it (``number``): 16, 0.5."""
    return int(amount) if amount == amount.to_integral_value() else float(amount)


def _kai_spec(live: dict[str, Any], cell: Cell) -> dict[str, Any]:
    """``spec.resources.gpu`` keys that give the queue ``cell``; a key already at its value is
    not sent."""
    gpu = _kai_gpu(live)
    nominal = _amount(cell.nominal) or Decimal(0)
    borrowing = _amount(cell.borrowing_limit)
    out: dict[str, Any] = {}
    if quantity(gpu.get("quota")) != nominal:
        out["quota"] = _kai_number(nominal)
    limit = quantity(gpu.get("limit"))
    if borrowing is None:
        if limit is not None and limit != kai.UNLIMITED:
            out["limit"] = -1
    elif limit != nominal + borrowing:
        out["limit"] = _kai_number(nominal + borrowing)
    return {"resources": {"gpu": out}} if out else {}


# --- what an edit of a Volcano or KAI queue may say -------------------------------------------


def normalize(target: Target, live: dict[str, Any] | None, edit: Edit, before: list[Cell]) -> Edit:
    """The edit as the source can hold it, with the values the next sync will show; raises
    ``EditError`` naming what has no meaning for the source (see the module docstring)."""
    if target.kind is None:
        return edit
    errors: dict[str, list[str]] = {}
    current = {cell.key: cell for cell in before}
    stop_now = stop_policy_of(target, live) if live is not None else "None"
    if edit.stop_policy and edit.stop_policy != stop_now:
        errors["stop_policy"] = [
            "Volcano opens and closes a queue through its state (vcctl queue operate), not a "
            "field GPU Ledger writes."
            if target.scheduler == QuotaSource.VOLCANO
            else "KAI queues have no stop policy."
        ]
    cells = []
    for cell in edit.cells:
        was = current.get(cell.key)
        if was is None:
            cells.append(cell)  # changed_cells names it
            continue
        if target.product_kind == "Cohort":
            fixed, problems = _parent_cell(target, live or {}, cell, was)
        elif target.scheduler == QuotaSource.VOLCANO:
            fixed, problems = _volcano_cell(live or {}, cell, was)
        else:
            fixed, problems = _kai_cell(live or {}, cell, was)
        for name, message in problems.items():
            errors.setdefault(cell_field(cell.flavor, cell.resource, name), []).append(message)
        cells.append(fixed)
    if errors:
        raise EditError(errors)
    return Edit(cells, None)


def _volcano_cell(live: dict[str, Any], cell: Cell, was: Cell) -> tuple[Cell, dict[str, str]]:
    spec = as_dict(live.get("spec"))
    if spec.get("reclaimable") is False:
        if cell.lending_limit != "0":
            return cell, {
                "lending_limit": "This Volcano queue is reclaimable: false: it lends none of "
                "its deserved GPUs, whatever its guarantee, so its lending limit is 0. Set "
                "reclaimable: true on the queue first (GPU Ledger does not change it)."
            }
        return cell, {}
    if cell.lending_limit == was.lending_limit:
        # Not edited: the guarantee stays, and the lending limit the sync shows moves with the
        # nominal.
        guarantee = gpus(as_dict(spec.get("guarantee")).get("resource")) or Decimal(0)
        nominal = _amount(cell.nominal) or Decimal(0)
        return replace(cell, lending_limit=_text(max(Decimal(0), nominal - guarantee))), {}
    if cell.lending_limit is None:
        # No guarantee: every deserved GPU is lendable, and the sync shows that as the nominal.
        return replace(cell, lending_limit=cell.nominal), {}
    return cell, {}


def _kai_cell(live: dict[str, Any], cell: Cell, was: Cell) -> tuple[Cell, dict[str, str]]:
    problems: dict[str, str] = {}
    if cell.lending_limit not in (None, was.lending_limit):
        problems["lending_limit"] = (
            "KAI has no lending limit: every unused GPU of a queue's quota is lent to over-quota "
            "work of other queues and reclaimed when the queue needs it."
        )
    unlimited = kai.is_unlimited(live)
    if unlimited and cell.nominal == was.nominal:
        if cell.borrowing_limit != was.borrowing_limit:
            problems["borrowing_limit"] = (
                "This KAI queue's GPU quota is unlimited (-1): the nominal shown is what it "
                "holds, and a borrowing limit over an unlimited quota has no meaning. Give it a "
                "quota (another nominal) in the same change to set a limit."
            )
        # Nothing of the quota changes: the cell stays as the sync shows it.
        return was, problems
    if unlimited and cell.borrowing_limit == was.borrowing_limit:
        # The limit shown over what the queue holds: it stays as written over the new quota.
        limit = quantity(_kai_gpu(live).get("limit"))
        if limit is not None and limit != kai.UNLIMITED:
            nominal = _amount(cell.nominal) or Decimal(0)
            cell = replace(cell, borrowing_limit=_text(max(Decimal(0), limit - nominal)))
    # A finite quota: no lending limit, as the sync will show it.
    return replace(cell, lending_limit=None), problems


def _parent_cell(
    target: Target, live: dict[str, Any], cell: Cell, was: Cell
) -> tuple[Cell, dict[str, str]]:
    problems: dict[str, str] = {}
    if target.scheduler == QuotaSource.VOLCANO:
        for name in ("borrowing_limit", "lending_limit"):
            if getattr(cell, name) is not None:
                problems[name] = (
                    "A Volcano parent queue shows no limits here: its pool is its deserved "
                    "GPUs less its children's. Its capability moves with its deserved; change "
                    "its capability or guarantee with kubectl."
                )
        return cell, problems
    if cell.lending_limit is not None:
        problems["lending_limit"] = (
            "KAI has no lending limit: every unused GPU of a queue's quota is lent to over-quota "
            "work of other queues and reclaimed when the queue needs it."
        )
    unlimited = [name_of(live)] if kai.is_unlimited(live) else []
    unlimited += [name_of(q) for q in _children(live) if kai.is_unlimited(q)]
    if unlimited:
        problems["nominal"] = (
            f"{', '.join(unlimited)}: GPU quota unlimited (-1): the pool shown moves with what "
            "it holds, so an edit of it has no meaning. Give the queue a quota with kubectl "
            "first."
        )
    return cell, problems
