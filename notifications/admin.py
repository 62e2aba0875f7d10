"""Admin for notifications: receivers (with "send test"), routes, contacts, the delivery log."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from alerts.choices import Rule, Severity
from core.admin import ReadOnlyAdmin, ReadOnlyInline
from notifications.choices import DeliveryOutcome
from notifications.explain import failure_sentence
from notifications.messages import episode_path
from notifications.models import AlertContact, Delivery, DeliveryAttempt, Receiver, Route
from notifications.notify import queue_test
from notifications.send import deliver, retry_now
from notifications.transports import call_deadline


class RouteForm(forms.ModelForm):
    """Rules and severities as tick boxes (stored as lists; none ticked = all)."""

    rules = forms.MultipleChoiceField(
        choices=Rule.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every rule.",
    )
    severities = forms.MultipleChoiceField(
        choices=Severity.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: both. Critical only: warnings are not sent here.",
    )

    class Meta:
        model = Route
        fields = [
            "name",
            "receiver",
            "rules",
            "severities",
            "teams",
            "clusters",
            "renotify_interval",
            "enabled",
        ]


class RouteInline(admin.StackedInline):
    model = Route
    form = RouteForm
    extra = 0
    filter_horizontal = ["teams", "clusters"]


@admin.register(Receiver)
class ReceiverAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "enabled", "target_summary", "route_count", "refreshed"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "targets"]
    readonly_fields = ["last_refresh_at", "last_refresh_alerts", "last_refresh_error"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "name",
                    "kind",
                    "enabled",
                    "targets",
                    "url_secret_env",
                    "include_owners",
                    "secret_env",
                ]
            },
        ),
        (
            "Alertmanager refresh",
            {
                "fields": ["last_refresh_at", "last_refresh_alerts", "last_refresh_error"],
                "classes": ["collapse"],
            },
        ),
    ]
    inlines = [RouteInline]
    actions = ["send_test"]

    @admin.display(description="Targets")
    def target_summary(self, obj: Receiver) -> str:
        if obj.url_secret_env:
            return f"the URL in ${obj.url_secret_env}"
        targets = obj.target_list()
        if obj.kind == "email" and obj.include_owners:
            targets.append("+ team contacts and queue owners")
        return ", ".join(targets)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Receiver]:
        return super().get_queryset(request).annotate(route_total=Count("routes"))

    @admin.display(description="Routes", ordering="route_total")
    def route_count(self, obj: Receiver) -> int:
        return int(getattr(obj, "route_total", 0))

    @admin.display(description="Last Alertmanager refresh")
    def refreshed(self, obj: Receiver) -> str:
        if obj.last_refresh_at is None:
            return "—"
        suffix = f" (error: {obj.last_refresh_error})" if obj.last_refresh_error else ""
        return f"{obj.last_refresh_at:%Y-%m-%d %H:%M:%S} · {obj.last_refresh_alerts}{suffix}"

    @admin.action(description="Send a test notification")
    def send_test(self, request: HttpRequest, queryset: QuerySet[Receiver]) -> None:
        """Queue a test delivery per receiver and send it now, within the notification timeout;
        a transient failure stays in the outbox and is retried like any delivery."""
        now = timezone.now()
        for receiver in queryset:
            delivery = queue_test(receiver, now, request.user)
            delivery.receiver = receiver
            outcome = deliver(delivery, now, call_deadline(None), [])
            delivery.refresh_from_db()
            link = reverse("admin:notifications_delivery_change", args=[delivery.pk])
            if outcome == DeliveryOutcome.SENT:
                self.message_user(
                    request,
                    format_html('{}: test sent (<a href="{}">delivery</a>).', receiver.name, link),
                    messages.SUCCESS,
                )
            else:
                self.message_user(
                    request,
                    format_html(
                        '{} (<a href="{}">delivery</a>)',
                        failure_sentence(receiver, delivery),
                        link,
                    ),
                    messages.ERROR,
                )


@admin.register(Route)
class RouteAdmin(admin.ModelAdmin):
    form = RouteForm
    list_display = ["__str__", "receiver", "rule_list", "severity_list", "renotify_interval"]
    list_filter = ["receiver", "enabled"]
    list_select_related = ["receiver"]
    filter_horizontal = ["teams", "clusters"]

    @admin.display(description="Rules")
    def rule_list(self, obj: Route) -> str:
        return ", ".join(obj.rules) if obj.rules else "all"

    @admin.display(description="Severities")
    def severity_list(self, obj: Route) -> str:
        return ", ".join(obj.severities) if obj.severities else "all"


@admin.register(AlertContact)
class AlertContactAdmin(admin.ModelAdmin):
    list_display = ["email", "name", "team", "cluster_queue"]
    list_filter = ["team"]
    search_fields = ["email", "name"]
    autocomplete_fields = ["team", "cluster_queue"]
    list_select_related = ["team", "cluster_queue"]


ATTEMPT_FIELDS = ("number", "started_at", "duration_ms", "outcome", "status_code", "error")


class DeliveryAttemptInline(ReadOnlyInline):
    model = DeliveryAttempt
    fields = ATTEMPT_FIELDS


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    """The delivery log: read-only; "Retry now" puts failed or waiting deliveries back."""

    list_display = [
        "created_at",
        "event",
        "episode_link",
        "receiver",
        "outcome",
        "attempts",
        "status_code",
        "sent_at",
        "next_attempt_at",
        "short_error",
    ]
    list_filter = ["outcome", "event", "receiver__kind", "receiver"]
    list_select_related = ["receiver", "episode"]
    date_hierarchy = "created_at"
    inlines = [DeliveryAttemptInline]
    actions = ["retry"]
    readonly_fields = [
        "episode",
        "receiver",
        "event",
        "sequence",
        "severity",
        "outcome",
        "attempts",
        "status_code",
        "error",
        "next_attempt_at",
        "sent_at",
        "requested_by",
        "created_at",
        "updated_at",
    ]

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("notifications.change_delivery"))

    @admin.display(description="Episode")
    def episode_link(self, obj: Delivery) -> str:
        if obj.episode is None:
            return "(test)"
        return format_html('<a href="{}">{}</a>', episode_path(obj.episode), obj.episode)

    @admin.display(description="Error")
    def short_error(self, obj: Delivery) -> str:
        return obj.error[:120]

    @admin.action(description="Retry now", permissions=["retry"])
    def retry(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        count = retry_now(list(queryset), timezone.now())
        self.message_user(
            request,
            f"{count} deliveries put back in the outbox; they go out within "
            f"{settings.GPULEDGER_NOTIFY_SECONDS} s.",
            messages.SUCCESS,
        )
