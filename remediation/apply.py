"""Giving back the GPUs of workloads that stay critical, per ClusterQueue policy.

Off unless a ClusterQueue's ``RemediationPolicy`` says otherwise
(docs/architecture.md "Notifications and remediation"):

- ``notify``: once a workload has stayed critical for the grace period after its owners were
  warned, the action is recorded and the owners are told it qualifies; nothing changes upstream.
- ``deactivate``: the same moment, the Workload is patched to ``spec.active: false`` (a JSON
  merge-patch through the official client, ``fieldManager=gpu-ledger``); Kueue evicts it, releases
  its quota and does not requeue it until it is active again. With ``dry_run`` (the default when a
  policy is created) the action is recorded with the PATCH it would have sent, and nothing is
  sent.

"Warned" is when the first notification at critical severity went out to any receiver, or the
escalation itself when no receiver routes the episode. Only ``idle_workload`` and
``ghost_reservation`` episodes of a known workload qualify: never an exempt or silenced episode,
never ``telemetry_missing`` (missing telemetry is not idleness), never twice for one episode (a
partial unique constraint on the action; a failed PATCH is tried again on later runs, at most
``MAX_FAILED_ATTEMPTS`` times). Every action is recorded (``RemediationAction``: the policy, when,
the request, the API's answer), shown on the episode page and the workload admin, and announced
to the episode's receivers (event ``remediation``). Staff re-activate a workload with one click
(``reactivate``: ``spec.active: true``, recorded with who did it).

RBAC: ``patch`` on ``workloads.kueue.x-k8s.io``, needed only once a queue deactivates for real.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import urllib3
from django.db import IntegrityError, transaction
from django.db.models import Min, Q
from kubernetes.client.exceptions import ApiException

from alerts.choices import Rule, Severity
from alerts.models import Episode, Silence
from core.deadlines import Deadline, cut_at
from fleet.models import Cluster
from notifications.choices import DeliveryEvent, DeliveryOutcome, ReceiverKind
from notifications.models import Delivery, Receiver
from notifications.outbox import silenced
from notifications.routing import load_routes, targets_for
from quotas.constants import KUEUE_GROUP
from quotas.kueue import REQUEST_DEADLINE_SECONDS, KubeError, KubeTimeout, KueueClient
from quotas.kueue.errors import map_api_exception
from remediation.choices import RemediationKind, RemediationMode, RemediationOutcome
from remediation.models import RemediationAction, RemediationPolicy

logger = logging.getLogger(__name__)

FIELD_MANAGER = "gpu-ledger"
# Who may re-activate a workload (staff with this permission; superusers have it).
REACTIVATE_PERMISSION = "remediation.add_remediationaction"
MERGE_PATCH = "application/merge-patch+json"
# Rules whose subject is one workload that deactivating would stop wasting GPUs.
REMEDIABLE_RULES = (Rule.IDLE_WORKLOAD, Rule.GHOST_RESERVATION)
# A PATCH that failed is tried again on later runs, this many times in all.
MAX_FAILED_ATTEMPTS = 3
CONNECT_TIMEOUT_SECONDS = 10.0
READ_TIMEOUT_SECONDS = 30.0


@dataclass
class RemediationResult:
    deactivated: int = 0
    dry_runs: int = 0
    notified: int = 0
    failed: int = 0


def patch_body(active: bool) -> dict[str, Any]:
    return {"spec": {"active": active}}


def patch_active(
    cluster: Cluster, namespace: str, name: str, active: bool, deadline: Deadline | None = None
) -> tuple[int, dict[str, Any]]:
    """Merge-patch a Workload's ``spec.active``; (HTTP status, the answer's essentials).

    Raises ``KubeError`` (``permanent`` for 4xx like 403 and 404) or ``KubeTimeout``.
    """
    what = f"PATCH workload {namespace}/{name}"
    client = KueueClient.for_cluster(cluster)
    try:
        version = client.discover(deadline=deadline).kueue_version
        if version is None:
            raise KubeError(f"{what}: the API server serves no Kueue version", 404, True)
        bound = Deadline(REQUEST_DEADLINE_SECONDS, "the request deadline").sooner(deadline)
        if bound.expired():
            raise KubeTimeout(
                f"{what}: not sent, {bound} had passed",
                deadline=bound,
                run_deadline=bound is deadline,
            )
        with cut_at(bound) as cut:
            try:
                with cut.attaching():
                    response: Any = client.custom.patch_namespaced_custom_object(
                        KUEUE_GROUP,
                        version,
                        namespace,
                        "workloads",
                        name,
                        patch_body(active),
                        field_manager=FIELD_MANAGER,
                        _content_type=MERGE_PATCH,
                        _preload_content=False,
                        _request_timeout=(CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS),
                    )
                status = int(response.status)
                data = response.data
                response.release_conn()
            except ApiException as exc:
                raise map_api_exception(exc, what) from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if cut.fired:
                    raise KubeTimeout(
                        f"{what}: no complete answer within {bound}",
                        deadline=bound,
                        run_deadline=bound is deadline,
                    ) from exc
                raise KubeError(f"{what}: {exc}", None, False, reason="Connection") from exc
    finally:
        client.close()
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise KubeError(f"{what}: answer is not JSON ({exc})", status, False) from exc
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    spec = doc.get("spec") if isinstance(doc, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    spec = spec if isinstance(spec, dict) else {}
    return status, {
        "kind": doc.get("kind") if isinstance(doc, dict) else None,
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "resourceVersion": meta.get("resourceVersion"),
        "spec.active": spec.get("active"),
    }


def _request_record(action: RemediationAction, active: bool) -> dict[str, Any]:
    return {
        "method": "PATCH",
        "resource": f"workloads.{KUEUE_GROUP}",
        "namespace": action.namespace,
        "name": action.workload_name,
        "fieldManager": FIELD_MANAGER,
        "contentType": MERGE_PATCH,
        "body": patch_body(active),
    }


def _apply_patch(action: RemediationAction, active: bool, deadline: Deadline | None) -> None:
    """Send the PATCH for ``action`` and record the answer on it (not saved)."""
    try:
        status, answer = patch_active(
            action.cluster, action.namespace, action.workload_name, active, deadline
        )
    except KubeError as exc:
        action.outcome = RemediationOutcome.FAILED
        action.status_code = exc.status
        action.error = exc.message
        action.response = {
            "status": "Failure",
            "code": exc.status,
            "reason": exc.reason,
            "message": exc.message,
        }
        logger.error("remediation %s failed: %s", action, exc.message)
        return
    action.outcome = RemediationOutcome.DONE
    action.status_code = status
    action.response = answer


def warned_at(episode: Episode) -> datetime | None:
    """When the owners were first told the episode is critical (else the escalation)."""
    first = (
        Delivery.objects.filter(
            episode=episode,
            severity=Severity.CRITICAL,
            outcome=DeliveryOutcome.SENT,
            event__in=[DeliveryEvent.FIRED, DeliveryEvent.ESCALATED, DeliveryEvent.RENOTIFY],
        )
        .aggregate(first=Min("sent_at"))
        .get("first")
    )
    return first or episode.escalated_at


def candidates(now: datetime) -> list[Episode]:
    """Open critical episodes of remediable rules under an active policy, not yet acted on."""
    done = RemediationAction.objects.filter(
        kind__in=[RemediationKind.DEACTIVATE, RemediationKind.NOTIFY]
    ).exclude(outcome=RemediationOutcome.FAILED)
    episodes = (
        Episode.objects.open()
        .filter(
            severity=Severity.CRITICAL,
            exempt=False,
            rule__in=REMEDIABLE_RULES,
            workload__isnull=False,
            workload__deleted_at__isnull=True,
            workload__active=True,
            cluster_queue__remediation_policy__mode__in=[
                RemediationMode.NOTIFY,
                RemediationMode.DEACTIVATE,
            ],
        )
        .exclude(pk__in=done.values("episode_id"))
        .exclude(Q(silenced_until__gt=now))
        .defer("evidence")
        .select_related("cluster", "workload", "cluster_queue__remediation_policy")
        .order_by("escalated_at", "pk")
    )
    silences = list(Silence.objects.filter(ends_at__gt=now))
    return [e for e in episodes if not silenced(e, now, silences)]


def remediate(now: datetime, deadline: Deadline) -> RemediationResult:
    """Apply every queue's policy to its critical workloads whose grace period is over."""
    result = RemediationResult()
    for episode in candidates(now):
        if deadline.expired():
            logger.warning("remediation: %s passed; the rest waits for the next run", deadline)
            break
        assert episode.cluster_queue is not None and episode.workload is not None
        policy: RemediationPolicy = episode.cluster_queue.remediation_policy
        warned = warned_at(episode)
        if warned is None or now < warned + policy.grace_period:
            continue
        failures = RemediationAction.objects.filter(
            episode=episode, outcome=RemediationOutcome.FAILED
        ).count()
        if failures >= MAX_FAILED_ATTEMPTS:
            continue
        action = _act(episode, policy, deadline)
        if action is None:
            continue
        if action.outcome == RemediationOutcome.FAILED:
            result.failed += 1
        elif action.kind == RemediationKind.NOTIFY:
            result.notified += 1
        elif action.outcome == RemediationOutcome.DRY_RUN:
            result.dry_runs += 1
        else:
            result.deactivated += 1
    return result


def _act(
    episode: Episode, policy: RemediationPolicy, deadline: Deadline
) -> RemediationAction | None:
    workload = episode.workload
    assert workload is not None
    kind = (
        RemediationKind.NOTIFY
        if policy.mode == RemediationMode.NOTIFY
        else RemediationKind.DEACTIVATE
    )
    action = RemediationAction(
        episode=episode,
        cluster=episode.cluster,
        workload=workload,
        namespace=workload.namespace,
        workload_name=workload.name,
        kind=kind,
        mode=policy.mode,
        dry_run=policy.dry_run and kind == RemediationKind.DEACTIVATE,
        grace_period=policy.grace_period,
        outcome=RemediationOutcome.PENDING,
    )
    if kind == RemediationKind.DEACTIVATE:
        action.request = _request_record(action, False)
    try:
        # The claim: the partial unique constraint lets one run act on an episode.
        with transaction.atomic():
            action.save()
    except IntegrityError:
        logger.info("remediation of episode %s: already under way elsewhere", episode.pk)
        return None
    if kind == RemediationKind.NOTIFY:
        action.outcome = RemediationOutcome.DONE
    elif action.dry_run:
        action.outcome = RemediationOutcome.DRY_RUN
    else:
        _apply_patch(action, False, deadline)
    action.save()
    if action.outcome != RemediationOutcome.FAILED:
        logger.warning(
            "remediation: %s of %s/%s (%s, policy %s%s)",
            action.kind,
            action.namespace,
            action.workload_name,
            action.outcome,
            policy.mode,
            ", dry run" if action.dry_run else "",
        )
        announce(action)
    return action


def announce(action: RemediationAction) -> int:
    """Queue a ``remediation`` delivery to each receiver of the episode (not Alertmanager, whose
    alert is about the episode, not the action)."""
    episode = action.episode
    if episode is None:
        return 0
    receiver_ids = {t.receiver.pk for t in targets_for(episode, load_routes())}
    receiver_ids |= set(
        Delivery.objects.filter(episode=episode)
        .exclude(event=DeliveryEvent.TEST)
        .values_list("receiver_id", flat=True)
    )
    receivers = Receiver.objects.filter(pk__in=receiver_ids, enabled=True).exclude(
        kind=ReceiverKind.ALERTMANAGER
    )
    created = Delivery.objects.bulk_create(
        [
            Delivery(
                episode=episode,
                receiver=receiver,
                event=DeliveryEvent.REMEDIATION,
                sequence=0,
                severity=episode.severity,
                next_attempt_at=action.created_at,
            )
            for receiver in receivers
        ],
        ignore_conflicts=True,
    )
    return len(created)


def reactivate(
    workload_id: int,
    user: Any,
    *,
    episode: Episode | None = None,
    deadline: Deadline | None = None,
) -> RemediationAction:
    """Staff's one click: ``spec.active: true`` on the workload, recorded with who asked."""
    from quotas.models import Workload

    workload = Workload.objects.select_related("cluster").get(pk=workload_id)
    action = RemediationAction(
        episode=episode,
        cluster=workload.cluster,
        workload=workload,
        namespace=workload.namespace,
        workload_name=workload.name,
        kind=RemediationKind.REACTIVATE,
        requested_by=user if getattr(user, "is_authenticated", False) else None,
        outcome=RemediationOutcome.PENDING,
    )
    action.request = _request_record(action, True)
    action.save()
    _apply_patch(action, True, deadline)
    action.save()
    logger.warning(
        "remediation: %s re-activated %s/%s (%s)",
        getattr(user, "username", "?"),
        action.namespace,
        action.workload_name,
        action.outcome,
    )
    return action


def actions_for_episode(episode: Episode) -> list[RemediationAction]:
    return list(
        RemediationAction.objects.filter(
            Q(episode=episode)
            | Q(
                workload_id=episode.workload_id,
                kind=RemediationKind.REACTIVATE,
                created_at__gte=episode.started_at,
            )
            if episode.workload_id
            else Q(episode=episode)
        )
        .select_related("requested_by")
        .order_by("created_at", "pk")
    )


def needs_reactivation(actions: list[RemediationAction]) -> bool:
    """Whether the newest effective action left the workload deactivated."""
    for action in reversed(actions):
        if action.outcome != RemediationOutcome.DONE:
            continue
        if action.kind == RemediationKind.DEACTIVATE:
            return True
        if action.kind == RemediationKind.REACTIVATE:
            return False
    return False
