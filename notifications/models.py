"""Who hears about hoarding episodes, how, and what was done about them.

``Receiver`` (an email list, a signed webhook, a Slack incoming webhook, Alertmanagers) and
``Route`` (which rules, severities, teams and clusters go to which receiver) are set in the admin.
``Delivery`` is the outbox: one row per episode, receiver, event and sequence, created by the
scanner (``notifications.outbox``) and sent by the sender (``notifications.send``); its unique
constraint is what makes a re-evaluation, a doubled beat tick or two workers send nothing twice.
``DeliveryAttempt`` records every try. ``AlertContact`` holds a team's contacts and a
ClusterQueue's owners, the addresses email receivers write to. ``RemediationPolicy`` (per
ClusterQueue, off by default) and ``RemediationAction`` (the audit of every deactivation,
dry run and re-activation) live in the ``remediation`` app.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import models
from django.db.models import Q

from alerts.choices import Rule, Severity
from fleet.secrets import SecretError, read_secret, validate_secret_env_name
from notifications.choices import DeliveryEvent, DeliveryOutcome, ReceiverKind
from notifications.outbound import RefusedTarget, check_url

DEFAULT_RENOTIFY = timedelta(hours=24)


class Receiver(models.Model):
    """A destination for notifications: an email list, a webhook, a Slack webhook, Alertmanagers."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=ReceiverKind.choices)
    targets = models.TextField(
        blank=True,
        help_text=(
            "One per line. Email: extra addresses (the team's contacts and the queue's owners "
            "are added when the box below is ticked). Webhook and Slack: the URL. Alertmanager: "
            "each Alertmanager's base URL, e.g. http://alertmanager:9093."
        ),
    )
    include_owners = models.BooleanField(
        default=True,
        help_text="Email: also write to the team's contacts and leads and the queue's owners.",
    )
    url_secret_env = models.CharField(
        "URL variable",
        max_length=100,
        blank=True,
        validators=[validate_secret_env_name],
        help_text=(
            "Slack, and any webhook or Alertmanager URL that carries a token: the environment "
            "variable holding the URL (Alertmanager: URLs separated by spaces), e.g. "
            "GPULEDGER_SECRET_SLACK_VISION, set on every GPU Ledger process. The URL itself is "
            "never stored or shown. Leave the targets empty then."
        ),
    )
    secret_env = models.CharField(
        max_length=100,
        blank=True,
        validators=[validate_secret_env_name],
        help_text=(
            "Webhook: the environment variable holding the HMAC-SHA256 key that signs each body "
            "(X-GPULedger-Signature: sha256=<hex>), e.g. GPULEDGER_SECRET_WEBHOOK. Empty: unsigned."
        ),
    )
    enabled = models.BooleanField(default=True)
    last_refresh_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Alertmanager: when the open alerts were last re-sent.",
    )
    last_refresh_alerts = models.PositiveIntegerField(default=0)
    last_refresh_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The table it had in the alerts app, which the data stays in.
        db_table = "alerts_receiver"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"

    def target_list(self) -> list[str]:
        return [line.strip() for line in self.targets.splitlines() if line.strip()]

    def urls(self) -> list[str]:
        """The URLs to send to: from ``url_secret_env`` when named, else the targets.

        Raises ``SecretError`` naming the variable (never its value) when it cannot be read, and
        for a Slack receiver whose URL is still in the targets (it must be named by a variable).
        """
        if self.url_secret_env:
            return read_secret(self.url_secret_env).split()
        if self.kind == ReceiverKind.SLACK and self.target_list():
            raise SecretError(SLACK_SECRET_MESSAGE)
        return self.target_list()

    def clean(self) -> None:
        targets = self.target_list()
        if self.kind == ReceiverKind.EMAIL:
            if self.url_secret_env:
                raise ValidationError({"url_secret_env": "Email receivers take addresses."})
            for address in targets:
                try:
                    validate_email(address)
                except ValidationError as exc:
                    raise ValidationError({"targets": f"{address!r} is not an address"}) from exc
            if not targets and not self.include_owners:
                raise ValidationError({"targets": "Name an address or include the owners."})
            return
        self._clean_urls(targets)

    def _clean_urls(self, targets: list[str]) -> None:
        if self.kind == ReceiverKind.SLACK and targets:
            raise ValidationError({"targets": SLACK_SECRET_MESSAGE})
        if targets and self.url_secret_env:
            raise ValidationError({"targets": "Either the targets or the URL variable, not both."})
        for url in targets:
            if token_bearing(url):
                raise ValidationError(
                    {
                        "targets": "This URL carries a query string (a token?): put it in a "
                        "GPULEDGER_SECRET_ variable and name that in the URL variable."
                    }
                )
        field = "url_secret_env" if self.url_secret_env else "targets"
        if self.url_secret_env:
            try:
                targets = self.urls()
            except SecretError as exc:
                raise ValidationError({field: str(exc)}) from exc
        if not targets:
            raise ValidationError({field: "Give the URL to send to."})
        if self.kind in (ReceiverKind.WEBHOOK, ReceiverKind.SLACK) and len(targets) > 1:
            raise ValidationError({field: "One URL: make one receiver per webhook."})
        for url in targets:
            try:
                check_url(url)
            except RefusedTarget as exc:
                raise ValidationError({field: str(exc)}) from exc


SLACK_SECRET_MESSAGE = (
    "A Slack webhook URL is a secret: put it in a GPULEDGER_SECRET_ variable in the environment "
    "of every GPU Ledger process and name that in the URL variable; leave the targets empty."
)


def token_bearing(url: str) -> bool:
    """A URL whose query string or user info would put a credential in the database."""
    parts = urlsplit(url)
    return bool(parts.query) or "@" in parts.netloc


class Route(models.Model):
    """Which episodes go to a receiver: an empty filter matches everything."""

    name = models.CharField(max_length=100, blank=True)
    receiver = models.ForeignKey(Receiver, related_name="routes", on_delete=models.CASCADE)
    rules = models.JSONField(
        default=list,
        blank=True,
        help_text="Rules to send; none ticked = every rule.",
    )
    severities = models.JSONField(
        default=list,
        blank=True,
        help_text="Severities to send; none ticked = both. Critical only: warnings are not sent.",
    )
    teams = models.ManyToManyField(
        "quotas.Team",
        related_name="alert_routes",
        blank=True,
        help_text="Only episodes of these teams; none = every team (and episodes with no team).",
    )
    clusters = models.ManyToManyField(
        "fleet.Cluster",
        related_name="alert_routes",
        blank=True,
        help_text="Only episodes on these clusters; none = every cluster.",
    )
    renotify_interval = models.DurationField(
        default=DEFAULT_RENOTIFY,
        help_text="Re-send an open, unacknowledged episode at most this often (not Alertmanager).",
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The table it had in the alerts app, which the data stays in.
        db_table = "alerts_route"
        ordering = ["receiver", "id"]

    def __str__(self) -> str:
        return self.name or f"route {self.pk} → {self.receiver.name}"

    def clean(self) -> None:
        unknown = [r for r in self.rules or [] if r not in Rule.values]
        if unknown:
            raise ValidationError({"rules": f"unknown rules: {', '.join(map(str, unknown))}"})
        unknown = [s for s in self.severities or [] if s not in Severity.values]
        if unknown:
            raise ValidationError({"severities": f"unknown: {', '.join(map(str, unknown))}"})
        if self.renotify_interval is not None and self.renotify_interval < timedelta(minutes=5):
            raise ValidationError({"renotify_interval": "At least 5 minutes."})


class AlertContact(models.Model):
    """An address that receives a team's alert emails (a contact) or a ClusterQueue's (an owner)."""

    team = models.ForeignKey(
        "quotas.Team",
        related_name="alert_contacts",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
    )
    cluster_queue = models.ForeignKey(
        "quotas.ClusterQueue",
        related_name="alert_owners",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
    )
    email = models.EmailField()
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The table it had in the alerts app, which the data stays in.
        db_table = "alerts_alertcontact"
        ordering = ["email"]
        constraints = [
            models.CheckConstraint(
                condition=Q(team__isnull=False, cluster_queue__isnull=True)
                | Q(team__isnull=True, cluster_queue__isnull=False),
                name="alerts_alertcontact_team_xor_queue",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.email} ({self.team or self.cluster_queue})"


class Delivery(models.Model):
    """One notification of one episode event to one receiver: the outbox row and its result."""

    episode = models.ForeignKey(
        "alerts.Episode",
        related_name="deliveries",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        help_text="Empty for a test delivery.",
    )
    receiver = models.ForeignKey(Receiver, related_name="deliveries", on_delete=models.CASCADE)
    event = models.CharField(max_length=20, choices=DeliveryEvent.choices)
    sequence = models.PositiveIntegerField(
        default=0,
        help_text="0 for fired / escalated / resolved; the re-notification's number otherwise.",
    )
    severity = models.CharField(max_length=20, help_text="The episode's severity at the event.")
    outcome = models.CharField(
        max_length=20,
        choices=DeliveryOutcome.choices,
        default=DeliveryOutcome.PENDING,
    )
    attempts = models.PositiveIntegerField(default=0)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the sender tries next; empty once sent, failed or suppressed.",
    )
    sent_at = models.DateTimeField(null=True, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        related_name="+",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        help_text="Who asked for a test delivery.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The table it had in the alerts app, which the data stays in.
        db_table = "alerts_delivery"
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["episode", "receiver", "event", "sequence"],
                name="alerts_delivery_once",
            ),
        ]
        indexes = [
            # The sender: open deliveries due now, oldest first.
            models.Index(fields=["outcome", "next_attempt_at"], name="alerts_delivery_due"),
        ]

    def __str__(self) -> str:
        return f"{self.get_event_display()} → {self.receiver.name}"


class DeliveryAttempt(models.Model):
    """One try at sending a delivery: when, how it went, what the other end answered."""

    delivery = models.ForeignKey(Delivery, related_name="attempt_log", on_delete=models.CASCADE)
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField(default=0)
    outcome = models.CharField(max_length=20, choices=DeliveryOutcome.choices)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        # The table it had in the alerts app, which the data stays in.
        db_table = "alerts_deliveryattempt"
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["delivery", "number"],
                name="alerts_deliveryattempt_number",
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number}: {self.get_outcome_display()}"
