"""Admin: episodes are read-mostly (acknowledge / silence from here too); thresholds,
exemptions and silences are edited here."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from alerts import permissions
from alerts.actions import acknowledge, silence
from alerts.models import AlertThreshold, Episode, Exemption, Silence
from alerts.thresholds import FIELDS as THRESHOLD_FIELDS

EPISODE_EDITABLE = ("ack_comment", "silenced_until")


@admin.register(Episode)
class EpisodeAdmin(admin.ModelAdmin):
    """Written by the evaluation; people only acknowledge, comment and silence."""

    list_display = [
        "rule",
        "severity",
        "subject_key",
        "started_at",
        "fired_at",
        "resolved_at",
        "idle_gpu_hours",
        "cost",
        "exempt",
        "acknowledged_by",
    ]
    list_filter = ["rule", "severity", "cluster", "exempt", "detected_live"]
    search_fields = ["subject_key", "namespace", "summary"]
    date_hierarchy = "started_at"
    show_full_result_count = False
    actions = ["acknowledge_selected", "silence_for_a_day"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Episode._meta.fields if f.name not in EPISODE_EDITABLE]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_acknowledge_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(permissions.ACKNOWLEDGE))

    def has_silence_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(permissions.SILENCE))

    @admin.action(description="Acknowledge the selected episodes", permissions=["acknowledge"])
    def acknowledge_selected(self, request: HttpRequest, queryset: QuerySet[Episode]) -> None:
        for episode in queryset:
            acknowledge(episode, request.user, "acknowledged in the admin")
        self.message_user(request, f"{queryset.count()} episodes acknowledged.", messages.SUCCESS)

    @admin.action(
        description="Silence the selected episodes' subjects for 24 hours", permissions=["silence"]
    )
    def silence_for_a_day(self, request: HttpRequest, queryset: QuerySet[Episode]) -> None:
        until = timezone.now() + timedelta(days=1)
        for episode in queryset:
            silence(episode, request.user, until, "silenced in the admin")
        self.message_user(request, f"{queryset.count()} subjects silenced.", messages.SUCCESS)


@admin.register(AlertThreshold)
class AlertThresholdAdmin(admin.ModelAdmin):
    """Empty fields inherit: LocalQueue → namespace → ClusterQueue → global → settings."""

    list_display = ["__str__", *THRESHOLD_FIELDS]
    list_filter = ["scope"]
    raw_id_fields = ["cluster_queue", "local_queue"]


@admin.register(Exemption)
class ExemptionAdmin(admin.ModelAdmin):
    list_display = ["kind", "describe", "cluster", "reason", "expires_at", "created_by"]
    list_filter = ["kind", "cluster"]
    search_fields = ["namespace", "label_key", "priority_class", "reason"]
    raw_id_fields = ["cluster_queue", "local_queue", "workload", "serving_workload"]
    readonly_fields = ["created_by"]

    def save_model(self, request: HttpRequest, obj: Exemption, form: Any, change: bool) -> None:
        if obj.created_by_id is None:
            obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)


@admin.register(Silence)
class SilenceAdmin(admin.ModelAdmin):
    list_display = ["__str__", "subject_key", "cluster", "team", "cluster_queue", "created_by"]
    list_filter = ["rule", "cluster"]
    raw_id_fields = ["cluster_queue", "team"]
    readonly_fields = ["created_by"]

    def save_model(self, request: HttpRequest, obj: Silence, form: Any, change: bool) -> None:
        if obj.created_by_id is None:
            obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
