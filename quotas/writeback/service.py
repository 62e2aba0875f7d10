"""Preview, validate, apply, request and decide quota changes; each leaves a ``QuotaChange``.

The order is fixed (docs/architecture.md "Quota write-back"): the preview reads the live object (its
quotas and ``resourceVersion``) and the latest synced state (the what-if), then asks the API
server for a ``dryRun=All`` write; apply re-reads the live object, builds the complete
``resourceGroups`` from it with only the edited values changed, and sends one merge patch with
``fieldManager=gpu-ledger`` and the previewed ``resourceVersion``. A 409 is a conflict shown
with the live values, never forced; transient errors are retried with backoff; permanent ones
are shown. A read-only cluster or a GitOps-managed object is refused, with the patch offered.
A queue read from Volcano or KAI is written the same way, to the source's own Queue
(``quotas.writeback.native``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.core.exceptions import PermissionDenied
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from fleet.choices import QuotaSource
from quotas.access import led_team_ids
from quotas.choices import QuotaChangeSource, QuotaChangeStatus
from quotas.kueue import KubeError, KueueClient
from quotas.models import ClusterQueue, Cohort, QuotaChange
from quotas.writeback.edits import (
    Cell,
    EditError,
    changed_cells,
    keep_limits,
    parse_edit,
    patch_body,
)
from quotas.writeback.gitops import (
    OUR_FIELD_MANAGER,
    gitops_owner,
    kubectl_command,
    patch_yaml,
)
from quotas.writeback.native import (
    Target,
    body_for,
    cells_of,
    normalize,
    read,
    stop_policy_of,
    synced_queue,
    target_for,
    target_of_resource,
    write,
)
from quotas.writeback.state import synced_cells, synced_object, whatif_inputs
from quotas.writeback.whatif import NO_EVICTION_NOTE, what_if

logger = logging.getLogger(__name__)

APPLY_PERMISSION = "quotas.apply_quota_change"
# Transient API errors (connection, timeout, 429, 5xx): attempts and the first pause, doubled.
WRITE_ATTEMPTS = 3
WRITE_BACKOFF_SECONDS = 0.5

ClientFactory = Callable[[Any], KueueClient]


def can_apply(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.has_perm(APPLY_PERMISSION))


_Changes = TypeVar("_Changes", bound=QuerySet[QuotaChange])


def changes_for(user: Any, changes: _Changes) -> _Changes:
    """The quota changes ``user`` may see: all for staff and quota admins; otherwise those of
    the queues of teams they lead, and their own requests (whatever the team visibility says:
    a change request is a team's business, not a figure)."""
    if not getattr(user, "is_authenticated", False):
        return changes.none()
    if can_apply(user) or getattr(user, "is_staff", False):
        return changes
    return changes.filter(Q(cluster_queue__team_id__in=led_team_ids(user)) | Q(requested_by=user))


def _client(cluster: Any, factory: ClientFactory | None) -> KueueClient:
    return (factory or KueueClient.for_cluster)(cluster)


def _with_retries(call: Callable[[], Any], what: str) -> tuple[Any, int]:
    """Run ``call``; retry transient ``KubeError`` with backoff. Returns (result, attempts)."""
    pause = WRITE_BACKOFF_SECONDS
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            return call(), attempt
        except KubeError as exc:
            if exc.permanent or attempt == WRITE_ATTEMPTS:
                raise
            logger.warning("%s: attempt %d failed (%s); retrying", what, attempt, exc.message)
            time.sleep(pause)
            pause *= 2
    raise AssertionError("unreachable")


def error_answer(exc: KubeError) -> dict[str, Any]:
    """A failed call for the audit trail and the page: status, message, per-field causes."""
    details = exc.status_body.get("details") or {}
    causes = [
        {
            "field": str(cause.get("field") or ""),
            "reason": str(cause.get("reason") or ""),
            "message": str(cause.get("message") or ""),
        }
        for cause in (details.get("causes") or [])
        if isinstance(cause, dict)
    ]
    return {
        "ok": False,
        "status": exc.status,
        "reason": exc.reason or str(exc.status_body.get("reason") or ""),
        "message": str(exc.status_body.get("message") or exc.message),
        "causes": causes,
    }


def _target(change: QuotaChange) -> tuple[Target, str]:
    return target_of_resource(change.target_resource, str(change.target_kind)), change.target_name


@dataclass
class _Before:
    """What an edit starts from: the live object when it could be read, else the synced row."""

    live: dict[str, Any] | None
    # Why the live object could not be read (``error_answer``); empty when it was.
    live_error: dict[str, Any]
    cells: list[Cell]
    stop_policy: str
    resource_version: str
    api_version: str


def _read_before(
    obj: Target,
    target: ClusterQueue | Cohort,
    cluster_queue: ClusterQueue | None,
    client_factory: ClientFactory | None,
) -> _Before:
    """The live object's quotas; a ClusterQueue falls back to its synced quotas when the live
    object cannot be read (the what-if still helps), a Cohort raises ``EditError``."""
    live: dict[str, Any] | None = None
    live_error: dict[str, Any] = {}
    try:
        with _client(target.cluster, client_factory) as client:
            live, _ = _with_retries(
                lambda: read(client, obj, target.name), f"GET {obj.resource} {target.name}"
            )
    except KubeError as exc:
        live_error = error_answer(exc)
    if live is not None:
        return _Before(
            live=live,
            live_error=live_error,
            cells=cells_of(obj, live),
            stop_policy=stop_policy_of(obj, live),
            resource_version=str((live.get("metadata") or {}).get("resourceVersion") or ""),
            api_version=str(live.get("apiVersion") or ""),
        )
    if cluster_queue is not None:
        return _Before(
            live=None,
            live_error=live_error,
            cells=synced_cells(cluster_queue),
            stop_policy=cluster_queue.stop_policy or "None",
            resource_version=cluster_queue.resource_version,
            api_version="",
        )
    raise EditError({"__all__": [f"The live Cohort cannot be read: {live_error['message']}"]})


def _dry_run(
    obj: Target,
    target: ClusterQueue | Cohort,
    before: _Before,
    body: dict[str, Any],
    client_factory: ClientFactory | None,
) -> dict[str, Any]:
    """The API server's ``dryRun=All`` answer to the patch, or why it was not asked."""
    cluster = target.cluster
    if not cluster.quota_write_enabled:
        return {"skipped": "Write-back is disabled for this cluster (read-only)."}
    if before.live is None:
        return {"skipped": "The live object could not be read.", **before.live_error}
    try:
        with _client(cluster, client_factory) as client:
            _with_retries(
                lambda: write(
                    client, obj, target.name, body, field_manager=OUR_FIELD_MANAGER, dry_run=True
                ),
                f"dry-run PATCH {obj.resource} {target.name}",
            )
    except KubeError as exc:
        return error_answer(exc)
    return {"ok": True}


def preview(
    *,
    cluster_queue: ClusterQueue | None = None,
    cohort: Cohort | None = None,
    changes: list[dict[str, Any]],
    stop_policy: str | None,
    reason: str,
    user: Any,
    request_only: bool = False,
    client_factory: ClientFactory | None = None,
) -> QuotaChange:
    """Validate an edit, compute its what-if, dry-run it; store and return the change.

    ``request_only`` makes it a team lead's request (status ``requested``) instead of a preview
    an admin may apply. Raises ``EditError`` for input that cannot be written.
    """
    target = cluster_queue or cohort
    if target is None:
        raise ValueError("a ClusterQueue or a Cohort is needed")
    kind = "ClusterQueue" if cluster_queue else "Cohort"
    if not (reason or "").strip():
        raise EditError({"reason": ["Say why: a reason is required for every quota change."]})
    if kind == "Cohort" and stop_policy:
        raise EditError({"stop_policy": ["Cohorts have no stopPolicy."]})
    obj = target_for(target.scheduler, kind)
    # KAI limits a queue without a parent too (its limit caps it among the top queues).
    has_cohort = bool(cluster_queue.cohort_name) if cluster_queue else True
    edit = parse_edit(
        changes, stop_policy, has_cohort=has_cohort or obj.scheduler == QuotaSource.KAI
    )
    cluster = target.cluster
    before = _read_before(obj, target, cluster_queue, client_factory)
    # Unreadable live object: a Volcano or KAI queue as its synced quotas read.
    queue = before.live if before.live is not None else synced_queue(obj, before.cells)
    edit = normalize(obj, queue, keep_limits(edit, before.cells), before.cells)
    live, stop_before = before.live, before.stop_policy
    old, new = changed_cells(before.cells, edit)
    stop_after = edit.stop_policy if edit.stop_policy and edit.stop_policy != stop_before else None
    if not new and stop_after is None:
        raise EditError({"__all__": ["Nothing changes: every value is already as given."]})
    after_all = [next((c for c in new if c.key == cell.key), cell) for cell in before.cells]

    now = timezone.now()
    summary: dict[str, Any] = {
        "note": NO_EVICTION_NOTE,
        # A Cohort's own quota is lendable to every member: the pool it adds, per flavor.
        "pool": [
            {"flavor": o.flavor, "resource": o.resource, "before": o.nominal, "after": n.nominal}
            for o, n in zip(old, new, strict=True)
        ]
        if cohort is not None
        else [],
    }
    if cluster_queue is not None:
        summary = what_if(whatif_inputs(cluster_queue, before.cells, after_all, now))
    owner = gitops_owner(live, obj.quota_fields) if live is not None else None
    # Unreadable live object: the patch is built from the synced quotas, so it is never empty
    # (a Volcano or KAI queue: its fields as native.synced_queue rebuilds them).
    body = _patch(obj, queue, cluster_queue, new, stop_after, before.resource_version)
    spec_patch = body.get("spec", {})
    summary.update(
        {
            "live_read": live is not None,
            "patch_from": "live" if live is not None else "synced",
            "live_error": before.live_error,
            "synced_resource_version": getattr(target, "resource_version", ""),
            "gitops": {"tool": owner.tool, "name": owner.name, "detail": owner.detail}
            if owner
            else None,
            "yaml": patch_yaml(
                obj.kind_name,
                target.name,
                before.api_version or obj.default_api_version(),
                spec_patch,
            )
            if spec_patch
            else "",
            "kubectl": kubectl_command(
                obj.kind_name, target.name, body, cluster.kube_context, resource=obj.resource
            )
            if body
            else "",
            "write_enabled": cluster.quota_write_enabled,
            # What apply must send again (a parent queue's: its children unchanged).
            "patch": body,
        }
    )
    dry_run = _dry_run(obj, target, before, body, client_factory)
    return QuotaChange.objects.create(
        cluster=cluster,
        target_kind=kind,
        target_name=target.name,
        target_resource=obj.resource,
        target_api_version=before.api_version or obj.default_api_version(),
        cluster_queue=cluster_queue,
        cohort=cohort,
        source=QuotaChangeSource.GPU_LEDGER,
        status=QuotaChangeStatus.REQUESTED if request_only else QuotaChangeStatus.PREVIEWED,
        reason=reason.strip(),
        before=[cell.as_dict() for cell in old],
        after=[cell.as_dict() for cell in new],
        stop_policy_before=stop_before if stop_after else "",
        stop_policy_after=stop_after or "",
        preview=summary,
        dry_run=dry_run,
        resource_version=before.resource_version,
        field_manager=OUR_FIELD_MANAGER,
        gitops_owner=owner.detail if owner else "",
        requested_by=user if getattr(user, "is_authenticated", False) else None,
    )


def _patch(
    obj: Target,
    live: dict[str, Any] | None,
    cluster_queue: ClusterQueue | None,
    after: list[Cell],
    stop_after: str | None,
    resource_version: str,
) -> dict[str, Any]:
    """The merge patch for the preview: from the live object, else from the synced quotas."""
    if live is not None:
        return body_for(obj, live, after, stop_after, resource_version)
    source = synced_object(cluster_queue)
    return patch_body(source, after, stop_after, resource_version) if source else {}


def _after_cells(change: QuotaChange) -> list[Cell]:
    return [
        Cell(c["flavor"], c["resource"], c["nominal"], c["borrowing_limit"], c["lending_limit"])
        for c in change.after
    ]


def _finish(change: QuotaChange, status: str, answer: dict[str, Any], **fields: Any) -> None:
    change.status = status
    change.api_answer = answer
    change.api_status = answer.get("status") if isinstance(answer.get("status"), int) else None
    for name, value in fields.items():
        setattr(change, name, value)
    change.save()


def apply(
    change: QuotaChange, user: Any, *, client_factory: ClientFactory | None = None
) -> QuotaChange:
    """Write a previewed (or requested) change: one merge patch, or a refusal / conflict."""
    if not can_apply(user):
        raise PermissionDenied("Applying quota changes needs the apply_quota_change permission.")
    with transaction.atomic():
        locked = QuotaChange.objects.select_for_update().get(pk=change.pk)
        if locked.status not in (QuotaChangeStatus.PREVIEWED, QuotaChangeStatus.REQUESTED):
            raise EditError({"__all__": [f"This change is {locked.get_status_display()}."]})
        # Claimed: a second click or a concurrent approval finds it no longer open.
        QuotaChange.objects.filter(pk=change.pk).update(status=QuotaChangeStatus.FAILED)
    change.refresh_from_db()
    change.decided_by = user
    change.decided_at = timezone.now()
    cluster = change.cluster
    obj, name = _target(change)
    if not cluster.quota_write_enabled:
        _finish(
            change,
            QuotaChangeStatus.REFUSED,
            {"ok": False, "message": "Write-back is disabled for this cluster (read-only)."},
        )
        return change
    after = _after_cells(change)
    stop_after = change.stop_policy_after or None
    try:
        with _client(cluster, client_factory) as client:
            live, _ = _with_retries(lambda: read(client, obj, name), f"GET {obj.resource} {name}")
            owner = gitops_owner(live, obj.quota_fields)
            if owner is not None and not cluster.quota_write_gitops_allowed:
                _finish(
                    change,
                    QuotaChangeStatus.REFUSED,
                    {
                        "ok": False,
                        "message": f"Managed by {owner.detail}: a direct write would be "
                        "reverted. Change the repository with the YAML patch instead.",
                    },
                    gitops_owner=owner.detail,
                )
                return change
            body = body_for(obj, live, after, stop_after, change.resource_version)
            if _children_moved(obj, change, live, body):
                answer: dict[str, Any] = {
                    "ok": False,
                    "status": 409,
                    "reason": "Conflict",
                    "message": "A child queue's quota changed since the preview, so this "
                    "queue's own quota would not be the one previewed. Nothing was written: "
                    "preview again.",
                    "live": _live_now(cluster, obj, name, client_factory),
                }
                _finish(change, QuotaChangeStatus.CONFLICT, answer)
                return change
            written, attempts = _with_retries(
                lambda: write(
                    client, obj, name, body, field_manager=OUR_FIELD_MANAGER, dry_run=False
                ),
                f"PATCH {obj.resource} {name}",
            )
    except EditError as exc:
        _finish(change, QuotaChangeStatus.FAILED, {"ok": False, "message": str(exc)})
        return change
    except KubeError as exc:
        answer = error_answer(exc)
        if exc.status == 409:
            answer["live"] = _live_now(cluster, obj, name, client_factory)
            if _already_written(answer["live"], after, stop_after):
                _finish(change, QuotaChangeStatus.APPLIED, {"ok": True, "retried": True})
                change.applied_at = timezone.now()
                change.save(update_fields=["applied_at"])
                return change
            _finish(change, QuotaChangeStatus.CONFLICT, answer)
        else:
            _finish(change, QuotaChangeStatus.FAILED, answer)
        return change
    meta = written.get("metadata") or {}
    _finish(
        change,
        QuotaChangeStatus.APPLIED,
        {"ok": True, "attempts": attempts, "resourceVersion": meta.get("resourceVersion", "")},
        applied_resource_version=str(meta.get("resourceVersion") or ""),
        applied_at=timezone.now(),
    )
    logger.info("applied quota change %s to %s %s/%s", change.pk, obj.resource, cluster.name, name)
    return change


def _children_moved(
    obj: Target, change: QuotaChange, live: dict[str, Any], body: dict[str, Any]
) -> bool:
    """Whether a Volcano or KAI parent queue's write differs from the previewed one while the
    queue itself did not change: its children's quota, which its own is computed from, did
    (``quotas.writeback.native``). A change of the queue itself is the API server's 409."""
    if not obj.native or obj.product_kind != "Cohort":
        return False
    version = str((live.get("metadata") or {}).get("resourceVersion") or "")
    if version != change.resource_version:
        return False
    previewed = (change.preview or {}).get("patch") or {}
    return previewed.get("spec") != body.get("spec")


def _live_now(
    cluster: Any, obj: Target, name: str, client_factory: ClientFactory | None
) -> dict[str, Any]:
    """The live quotas and resourceVersion after a conflict, to show what changed meanwhile."""
    try:
        with _client(cluster, client_factory) as client:
            live = read(client, obj, name)
    except KubeError as exc:
        return {"error": exc.message}
    return {
        "resource_version": str((live.get("metadata") or {}).get("resourceVersion") or ""),
        "cells": [cell.as_dict() for cell in cells_of(obj, live)],
        "stop_policy": stop_policy_of(obj, live),
    }


def _already_written(live: dict[str, Any], after: list[Cell], stop_after: str | None) -> bool:
    """Whether a write retried after a lost answer had in fact gone through."""
    if "cells" not in live:
        return False
    current = {(c["flavor"], c["resource"]): c for c in live["cells"]}
    if stop_after is not None and live.get("stop_policy") != stop_after:
        return False
    return all(current.get(cell.key) == cell.as_dict() for cell in after)


def writable(change: QuotaChange) -> bool:
    """Whether GPU Ledger may write ``change`` now: write-back on for its cluster, and the
    object not owned by GitOps (unless the cluster allows writing anyway). Otherwise the page
    offers the patch and no Apply."""
    cluster = change.cluster
    if not cluster.quota_write_enabled:
        return False
    return not (change.preview or {}).get("gitops") or cluster.quota_write_gitops_allowed


def decide(
    change: QuotaChange,
    user: Any,
    *,
    approve: bool,
    comment: str = "",
    client_factory: ClientFactory | None = None,
) -> QuotaChange:
    """An admin's answer to a lead's request: approve (apply it) or decline; the lead is told.

    Whether the lead could be emailed is on ``change.notify_error`` ("" when told)."""
    if not can_apply(user):
        raise PermissionDenied("Deciding quota requests needs the apply_quota_change permission.")
    if change.status != QuotaChangeStatus.REQUESTED:
        raise EditError({"__all__": [f"This change is {change.get_status_display()}."]})
    if approve:
        change = apply(change, user, client_factory=client_factory)
        change.decision_comment = comment.strip()
        change.save(update_fields=["decision_comment"])
    else:
        if not comment.strip():
            raise EditError({"comment": ["Say why the request is declined."]})
        _close_request(change, user, QuotaChangeStatus.DECLINED, comment)
    _record_notification(change)
    return change


def approve_for_gitops(change: QuotaChange, user: Any, *, comment: str = "") -> QuotaChange:
    """Approve a lead's request without writing it: status "approved, apply via GitOps".

    For a queue GPU Ledger does not write (read-only cluster, GitOps-owned object): the admin
    commits the previewed patch to the repository; the sync marks the change applied and
    observed once the live object carries its values. The lead is told, as for any decision.
    """
    if not can_apply(user):
        raise PermissionDenied("Deciding quota requests needs the apply_quota_change permission.")
    if change.status != QuotaChangeStatus.REQUESTED:
        raise EditError({"__all__": [f"This change is {change.get_status_display()}."]})
    _close_request(change, user, QuotaChangeStatus.APPROVED_GITOPS, comment)
    _record_notification(change)
    return change


def _close_request(change: QuotaChange, user: Any, status: str, comment: str) -> None:
    """Move a request to ``status`` once: a concurrent decision finds it no longer open."""
    updated = QuotaChange.objects.filter(pk=change.pk, status=QuotaChangeStatus.REQUESTED).update(
        status=status,
        decided_by=user,
        decided_at=timezone.now(),
        decision_comment=comment.strip(),
    )
    if not updated:
        raise EditError({"__all__": ["This request was decided meanwhile."]})
    change.refresh_from_db()


def _record_notification(change: QuotaChange) -> None:
    change.notify_error = notify_requester(change)
    change.save(update_fields=["notify_error", "updated_at"])


def notify_requester(change: QuotaChange) -> str:
    """Email the lead who asked for a change what became of it (Django's mail settings).

    Returns "" when the email went out (or nobody asked), else a sentence saying why the lead
    was not told, for the admin who decided."""
    lead = change.requested_by
    if lead is None:
        return ""
    if not lead.email:
        return f"{lead} has no email address: tell them yourself."
    subject = f"Quota request for {change.target_name}: {change.get_status_display()}"
    lines = [
        f"Your quota change request for {change.target_kind} {change.target_name} on cluster "
        f"{change.cluster.name} is now: {change.get_status_display()}.",
        "",
        f"Your reason: {change.reason}",
    ]
    if change.decision_comment:
        lines.append(f"Comment: {change.decision_comment}")
    if change.api_answer.get("message"):
        lines.append(f"Kubernetes answered: {change.api_answer['message']}")
    try:
        send_mail(subject, "\n".join(lines), None, [lead.email])
    except OSError as exc:
        logger.warning("quota change %s: could not email %s: %s", change.pk, lead.email, exc)
        return f"The email to {lead.email} could not be sent ({exc}): tell them yourself."
    return ""
