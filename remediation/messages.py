"""What a remediation delivery tells its receivers: the action's sentence and JSON document.

Registered with ``notifications.details`` for the ``remediation`` event
(``RemediationConfig.ready``), so the sender, which sits below this app, can describe the
action without reading its rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from notifications.choices import DeliveryEvent
from notifications.details import EventDetails
from notifications.messages import iso
from remediation.choices import RemediationKind, RemediationOutcome
from remediation.models import RemediationAction

if TYPE_CHECKING:
    from notifications.models import Delivery


def action_for(delivery: Delivery) -> RemediationAction | None:
    """The deactivation or notice a remediation delivery announces (the newest not failed)."""
    if delivery.event != DeliveryEvent.REMEDIATION or delivery.episode_id is None:
        return None
    return (
        RemediationAction.objects.filter(
            episode_id=delivery.episode_id,
            kind__in=[RemediationKind.DEACTIVATE, RemediationKind.NOTIFY],
        )
        .exclude(outcome=RemediationOutcome.FAILED)
        .order_by("-created_at")
        .first()
    )


def details(delivery: Delivery) -> EventDetails | None:
    action = action_for(delivery)
    if action is None:
        return None
    return EventDetails(
        key="remediation",
        document=remediation_document(action),
        sentence=remediation_sentence(action),
    )


def remediation_document(action: RemediationAction) -> dict[str, Any]:
    return {
        "kind": action.kind,
        "outcome": action.outcome,
        "dry_run": action.dry_run,
        "policy": action.mode,
        "at": iso(action.created_at),
        "status_code": action.status_code,
    }


def remediation_sentence(action: RemediationAction) -> str:
    ref = f"{action.namespace}/{action.workload_name}"
    if action.kind == RemediationKind.NOTIFY:
        return (
            f"Workload {ref} stayed critical past its grace period; its ClusterQueue's policy "
            "is notify-only, so nothing was changed."
        )
    if action.outcome == RemediationOutcome.DRY_RUN:
        return f"Dry run: workload {ref} would have been deactivated (spec.active=false)."
    return (
        f"Workload {ref} was deactivated (spec.active=false): Kueue evicts it and releases its "
        "quota. Staff can re-activate it from the episode page."
    )
