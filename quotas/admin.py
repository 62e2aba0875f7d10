from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from core.admin import CollectorOwnedAdmin
from quotas.models import (
    Allocation,
    ApiToken,
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Team,
    TeamNamespace,
    Workload,
    WorkloadPriorityClass,
    WorkloadTransition,
)


class TeamNamespaceInline(admin.TabularInline):
    model = TeamNamespace
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "cost_center"]
    search_fields = ["name", "display_name", "cost_center"]
    filter_horizontal = ["leads"]
    inlines = [TeamNamespaceInline]


@admin.register(ResourceFlavor)
class ResourceFlavorAdmin(CollectorOwnedAdmin):
    list_display = ["name", "cluster", "gpu_model", "deleted_at"]
    list_filter = ["cluster"]


@admin.register(Cohort)
class CohortAdmin(CollectorOwnedAdmin):
    list_display = ["name", "cluster", "parent_name", "implicit", "weighted_share", "deleted_at"]
    list_filter = ["cluster", "implicit"]


QUOTA_INLINE_FIELDS = ("flavor_name", "resource", "nominal", "borrowing_limit", "lending_limit")


class ClusterQueueQuotaInline(admin.TabularInline):
    model = ClusterQueueQuota
    extra = 0
    fields = QUOTA_INLINE_FIELDS
    readonly_fields = QUOTA_INLINE_FIELDS

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False


@admin.register(ClusterQueue)
class ClusterQueueAdmin(CollectorOwnedAdmin):
    list_display = [
        "name",
        "cluster",
        "cohort_name",
        "team",
        "admitted_workloads",
        "pending_workloads",
        "weighted_share",
        "deleted_at",
    ]
    list_filter = ["cluster", "cohort_name", "team"]
    search_fields = ["name"]
    list_select_related = ["cluster", "team"]
    inlines = [ClusterQueueQuotaInline]


@admin.register(LocalQueue)
class LocalQueueAdmin(CollectorOwnedAdmin):
    list_display = ["namespace", "name", "cluster_queue_name", "pending_workloads", "deleted_at"]
    list_filter = ["cluster", "namespace"]
    search_fields = ["name", "namespace"]


@admin.register(WorkloadPriorityClass)
class WorkloadPriorityClassAdmin(CollectorOwnedAdmin):
    list_display = ["name", "value", "cluster"]


TRANSITION_INLINE_FIELDS = ("at", "kind", "reason", "message", "preemptor", "requeue_at")


class WorkloadTransitionInline(admin.TabularInline):
    model = WorkloadTransition
    fk_name = "workload"
    extra = 0
    fields = TRANSITION_INLINE_FIELDS
    readonly_fields = TRANSITION_INLINE_FIELDS

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False


@admin.register(Workload)
class WorkloadAdmin(CollectorOwnedAdmin):
    list_display = [
        "name",
        "namespace",
        "cluster_queue",
        "state",
        "requested_gpus",
        "admitted_gpus",
        "borrowing",
        "priority",
    ]
    list_filter = ["cluster", "state", "borrowing", "cluster_queue"]
    search_fields = ["name", "namespace", "owner_name"]
    list_select_related = ["cluster_queue"]
    inlines = [WorkloadTransitionInline]


@admin.register(WorkloadTransition)
class WorkloadTransitionAdmin(CollectorOwnedAdmin):
    list_display = ["at", "workload", "kind", "reason"]
    list_filter = ["kind"]
    date_hierarchy = "at"
    list_select_related = ["workload"]
    raw_id_fields = ["workload", "preemptor"]


@admin.register(ClusterQueueSample)
class ClusterQueueSampleAdmin(CollectorOwnedAdmin):
    list_display = ["sampled_at", "cluster_queue", "flavor_name", "total", "borrowed", "lent"]
    list_filter = ["flavor_name"]
    date_hierarchy = "sampled_at"
    list_select_related = ["cluster_queue"]


@admin.register(Allocation)
class AllocationAdmin(CollectorOwnedAdmin):
    list_display = ["namespace", "pod", "node_name", "gpus", "workload", "started_at", "ended_at"]
    list_filter = ["cluster", "namespace"]
    search_fields = ["pod", "namespace"]
    list_select_related = ["workload"]
    raw_id_fields = ["workload", "node", "gpu_devices"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """A new token's key is shown once, on the page that answers the "Add" form; only its
    SHA-256 is kept. The key is never put in a message (messages travel in a signed, readable
    cookie) nor in the session.
    """

    list_display = ["name", "user", "scope", "prefix", "created_at", "last_used_at", "expires_at"]
    list_filter = ["scope"]
    search_fields = ["name", "user__username", "prefix"]
    list_select_related = ["user"]
    raw_id_fields = ["user"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]

    def save_model(self, request: HttpRequest, obj: ApiToken, form, change: bool) -> None:  # type: ignore[no-untyped-def]
        if not change:
            key = ApiToken.generate_key()
            obj.set_key(key)
            # Kept on this request only, for response_add below.
            request._new_api_token_key = key  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)

    def response_add(self, request: HttpRequest, obj: ApiToken, post_url_continue=None):  # type: ignore[no-untyped-def]
        key = getattr(request, "_new_api_token_key", None)
        if key is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "API token created",
            "token": obj,
            "key": key,
            "changelist_url": reverse("admin:quotas_apitoken_changelist"),
        }
        response = TemplateResponse(request, "admin/quotas/apitoken/created.html", context)
        # The key must not stay in any cache between here and the admin's browser.
        response["Cache-Control"] = "no-store"
        return response
