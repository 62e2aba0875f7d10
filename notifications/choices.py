"""Choices of the notification models (``notifications.models``)."""

from django.db import models


class ReceiverKind(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook (signed JSON)"
    SLACK = "slack", "Slack-compatible incoming webhook"
    ALERTMANAGER = "alertmanager", "Prometheus Alertmanager (API v2)"


class DeliveryEvent(models.TextChoices):
    """What a notification tells: the episode fired, escalated, resolved, is still open, or the
    workload was (or would have been) deactivated; ``test`` is the admin's "send test"."""

    FIRED = "fired", "Fired"
    ESCALATED = "escalated", "Escalated"
    RESOLVED = "resolved", "Resolved"
    RENOTIFY = "renotify", "Still open (re-notification)"
    REMEDIATION = "remediation", "Remediation"
    TEST = "test", "Test"


class DeliveryOutcome(models.TextChoices):
    PENDING = "pending", "Pending"
    RETRYING = "retrying", "Failed, will retry"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed (gave up)"
    SUPPRESSED = "suppressed", "Not sent (silenced, exempt or disabled since)"


# Deliveries still to be sent (the outbox).
OPEN_OUTCOMES = (DeliveryOutcome.PENDING, DeliveryOutcome.RETRYING)
