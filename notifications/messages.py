"""What a notification says, for each kind of receiver: pure functions, no I/O.

Every message is built when it is sent, from the episode as it is then: a retried "fired"
carries the newest figures, a "resolved" the resolution time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import unicodedata
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.urls import reverse

from notifications.choices import DeliveryEvent

if TYPE_CHECKING:
    from alerts.models import Episode
    from notifications.details import EventDetails

SIGNATURE_HEADER = "X-GPULedger-Signature"
EVENT_HEADER = "X-GPULedger-Event"
DELIVERY_HEADER = "X-GPULedger-Delivery"
PAYLOAD_VERSION = 1
# Alertmanager's alert names, one per rule (its convention is CamelCase).
ALERT_NAMES = {
    "idle_workload": "GpuIdleWorkload",
    "ghost_reservation": "GpuGhostReservation",
    "borrowing_while_idle": "GpuBorrowingWhileIdle",
    "telemetry_missing": "GpuTelemetryMissing",
    "queue_slo_breached": "GpuQueueSloBreached",
    "serving_overprovisioned": "GpuServingOverprovisioned",
}
# Words for each event in subjects and Slack lines.
EVENT_WORDS = {
    DeliveryEvent.FIRED: "Firing",
    DeliveryEvent.ESCALATED: "Escalated",
    DeliveryEvent.RESOLVED: "Resolved",
    DeliveryEvent.RENOTIFY: "Still firing",
    DeliveryEvent.REMEDIATION: "Remediation",
    DeliveryEvent.TEST: "Test",
}


def iso(moment: datetime | None) -> str | None:
    """RFC 3339 in UTC with a Z, as Alertmanager and most webhook consumers want it."""
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def episode_url(episode: Episode) -> str:
    """The episode page, absolute (``GPULEDGER_BASE_URL``): links in mail, chat and Alertmanager."""
    return settings.GPULEDGER_BASE_URL.rstrip("/") + episode_path(episode)


def episode_path(episode: Episode) -> str:
    return reverse("dashboard:episode-detail", args=[episode.pk])


def _name(obj: Any) -> str | None:
    """A related row's name, or None when the episode has none."""
    return str(obj.name) if obj is not None else None


def workload_ref(episode: Episode) -> str:
    workload = episode.workload
    return f"{workload.namespace}/{workload.name}" if workload is not None else ""


def serving_ref(episode: Episode) -> str:
    """``namespace/kind/name`` of the episode's inference deployment, or ""."""
    serving = episode.serving_workload
    return str(serving) if serving is not None else ""


def _number(value: Any) -> float | None:
    if value is None:
        return None
    return float(value) if not isinstance(value, Decimal) else float(round(value, 2))


def episode_document(episode: Episode) -> dict[str, Any]:
    """The episode as webhook consumers get it (the same fields as ``GET /api/v1/alerts/``)."""
    return {
        "id": episode.pk,
        "rule": episode.rule,
        "rule_display": episode.get_rule_display(),
        "severity": episode.severity,
        "state": episode.state,
        "summary": episode.summary,
        "cluster": episode.cluster.name,
        "team": _name(episode.team),
        "cluster_queue": _name(episode.cluster_queue),
        "namespace": episode.namespace or None,
        "workload": workload_ref(episode) or None,
        "serving_workload": serving_ref(episode) or None,
        "node": _name(episode.node),
        "gpus": episode.gpus,
        "gpu_uuids": list(episode.gpu_uuids or []),
        "started_at": iso(episode.started_at),
        "fired_at": iso(episode.fired_at),
        "escalated_at": iso(episode.escalated_at),
        "resolved_at": iso(episode.resolved_at),
        "idle_gpu_hours": _number(episode.idle_gpu_hours),
        "held_gpu_hours": _number(episode.held_gpu_hours),
        "cost": str(episode.cost) if episode.cost is not None else None,
        "currency": settings.GPULEDGER_CURRENCY,
        "acknowledged_by": episode.acknowledged_by.get_username()
        if episode.acknowledged_by is not None
        else None,
        "acknowledged_at": iso(episode.acknowledged_at),
        "url": episode_url(episode),
    }


def webhook_body(
    event: str,
    delivery_id: int,
    episode: Episode | None,
    now: datetime,
    details: EventDetails | None = None,
) -> bytes:
    """The JSON a webhook receives; signed as these exact bytes."""
    doc: dict[str, Any] = {
        "version": PAYLOAD_VERSION,
        "event": event,
        "delivery_id": delivery_id,
        "sent_at": iso(now),
        "episode": episode_document(episode) if episode is not None else None,
    }
    if event == DeliveryEvent.TEST:
        doc["message"] = "Test notification from GPU Ledger."
    if details is not None:
        doc[details.key] = details.document
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def signature(secret: str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of the body under the receiver's secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def headline(event: str, episode: Episode) -> str:
    """One line: what happened to what, e.g. "Firing (critical): Idle workload ml/train on east"."""
    if episode.workload is not None:
        subject = workload_ref(episode)
    elif episode.serving_workload is not None:
        subject = f"serving {serving_ref(episode)}"
    elif episode.cluster_queue is not None:
        subject = f"ClusterQueue {episode.cluster_queue.name}"
    elif episode.node is not None:
        subject = f"node {episode.node.name}"
    else:
        subject = episode.namespace
    word = EVENT_WORDS.get(DeliveryEvent(event), event)
    return (
        f"{word} ({episode.severity}): {episode.get_rule_display()} {subject} "
        f"on {episode.cluster.name}"
    ).replace("  ", " ")


def detail_lines(episode: Episode) -> list[str]:
    lines = [episode.summary] if episode.summary else []
    lines.append(f"Rule: {episode.get_rule_display()}, severity {episode.severity}")
    if episode.team is not None:
        lines.append(f"Team: {episode.team}")
    if episode.cluster_queue is not None:
        lines.append(f"ClusterQueue: {episode.cluster_queue.name}")
    if episode.workload is not None:
        lines.append(f"Workload: {workload_ref(episode)}")
    if episode.serving_workload is not None:
        lines.append(f"Serving deployment: {serving_ref(episode)}")
    if episode.node is not None:
        lines.append(f"Node: {episode.node.name}")
    lines.append(f"GPUs: {episode.gpus}")
    lines.append(f"Started: {iso(episode.started_at)}")
    if episode.fired_at:
        lines.append(f"Fired: {iso(episode.fired_at)}")
    if episode.escalated_at:
        lines.append(f"Escalated: {iso(episode.escalated_at)}")
    if episode.resolved_at:
        lines.append(f"Resolved: {iso(episode.resolved_at)}")
    if episode.idle_gpu_hours is not None:
        lines.append(f"Idle GPU-hours: {float(episode.idle_gpu_hours):.2f}")
    if episode.cost is not None:
        lines.append(f"Cost: {episode.cost:.2f} {settings.GPULEDGER_CURRENCY}")
    return lines


def email_message(
    event: str, episode: Episode | None, details: EventDetails | None = None
) -> tuple[str, str]:
    """(subject, plain-text body) of the notification email."""
    prefix = f"[{settings.SITE_NAME}] "
    if episode is None:
        return (
            prefix + "Test notification",
            "This is a test notification from GPU Ledger: this receiver works.\n",
        )
    lines = []
    extra = details.sentence if details is not None else ""
    if extra:
        lines += [extra, ""]
    lines += detail_lines(episode)
    lines += ["", f"Episode: {episode_url(episode)}", ""]
    return prefix + headline(event, episode), "\n".join(lines)


def slack_payload(
    event: str, episode: Episode | None, details: EventDetails | None = None
) -> dict[str, str]:
    """A Slack-compatible incoming-webhook body: ``{"text": …}`` with a link in Slack's syntax."""
    if episode is None:
        return {"text": "Test notification from GPU Ledger: this receiver works."}
    parts = [f"*{_slack_escape(headline(event, episode))}*"]
    if episode.summary:
        parts.append(_slack_escape(episode.summary))
    extra = details.sentence if details is not None else ""
    if extra:
        parts.append(_slack_escape(extra))
    parts.append(f"<{episode_url(episode)}|Open the episode>")
    return {"text": "\n".join(parts)}


def _slack_escape(text: str) -> str:
    # Slack's three control characters; everything else is literal.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plain(text: str) -> str:
    """``text`` without control characters: a line break, escape or tab (Unicode Cc) becomes a
    space, a format character (Cf: bidirectional overrides, zero-width) is dropped. Alertmanager
    labels and annotations carry names tenants chose; its templates and receivers print them."""
    return "".join(
        " " if unicodedata.category(ch) == "Cc" else ch
        for ch in text
        if unicodedata.category(ch) != "Cf"
    )


def alertmanager_labels(episode: Episode, severity: str) -> dict[str, str]:
    """The labels that identify the alert in Alertmanager (empty ones left out), plain text."""
    labels = {
        "alertname": ALERT_NAMES.get(episode.rule, episode.rule),
        "severity": severity,
        "cluster": episode.cluster.name,
        "team": _name(episode.team) or "",
        "cluster_queue": _name(episode.cluster_queue) or "",
        "namespace": episode.namespace,
        "workload": _name(episode.workload) or "",
        "node": _name(episode.node) or "",
    }
    serving = episode.serving_workload
    if serving is not None:
        labels["workload"] = serving.name
        labels["workload_kind"] = serving.kind
    uuids = list(episode.gpu_uuids or [])
    if episode.rule == "telemetry_missing" and episode.workload is None and len(uuids) == 1:
        # Per-GPU episodes on one node: the GPU tells them apart.
        labels["gpu"] = str(uuids[0])
    return {name: plain(value) for name, value in labels.items() if value}


def alertmanager_alerts(
    episode: Episode, now: datetime, resend_seconds: float, resends_ahead: int
) -> list[dict[str, Any]]:
    """The alerts to post for an episode now (Alertmanager API v2 ``postableAlerts``).

    While open: the current severity, ``endsAt`` a few resend intervals ahead, so the alert stays
    active while it is re-sent and expires by itself if GPU Ledger stops. Resolved: ``endsAt`` =
    the resolution time. An escalated episode also ends its warning alert (the label set differs)
    at the escalation.
    """
    annotations = {
        "summary": plain(episode.summary or headline(DeliveryEvent.FIRED, episode)),
        # One line per detail; a line break inside a tenant's name cannot forge another.
        "description": "\n".join(plain(line) for line in detail_lines(episode)),
        "episode_url": episode_url(episode),
    }
    starts = episode.fired_at or episode.started_at
    alerts = []
    if episode.escalated_at is not None and episode.severity == "critical":
        alerts.append(
            {
                "labels": alertmanager_labels(episode, "warning"),
                "annotations": annotations,
                "startsAt": iso(starts),
                "endsAt": iso(max(episode.escalated_at, starts)),
                "generatorURL": episode_url(episode),
            }
        )
        starts = max(episode.escalated_at, starts)
    ends = (
        episode.resolved_at
        if episode.resolved_at is not None
        else now + timedelta(seconds=resend_seconds * resends_ahead)
    )
    alerts.append(
        {
            "labels": alertmanager_labels(episode, episode.severity),
            "annotations": annotations,
            "startsAt": iso(starts),
            "endsAt": iso(max(ends, starts)),
            "generatorURL": episode_url(episode),
        }
    )
    return alerts


def alertmanager_test_alert(now: datetime, resend_seconds: float) -> list[dict[str, Any]]:
    return [
        {
            "labels": {"alertname": "GpuLedgerTest", "severity": "none"},
            "annotations": {"summary": "Test notification from GPU Ledger: this receiver works."},
            "startsAt": iso(now),
            "endsAt": iso(now + timedelta(seconds=resend_seconds)),
            "generatorURL": settings.GPULEDGER_BASE_URL,
        }
    ]
