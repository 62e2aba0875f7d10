from typing import Any, ClassVar, cast

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from core.admin import ReadOnlyAdmin, ReadOnlyInline
from core.quantity import display_quantity
from quotas.models import (
    Allocation,
    ApiToken,
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    QuotaChange,
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
    filter_horizontal = ["leads", "members"]
    inlines = [TeamNamespaceInline]


@admin.register(ResourceFlavor)
class ResourceFlavorAdmin(ReadOnlyAdmin):
    list_display = ["name", "cluster", "gpu_model", "deleted_at"]
    list_filter = ["cluster"]


class SyncedObjectAdmin(ReadOnlyAdmin):
    """A Kueue object the sync owns: it comes back on the next sync, so nobody deletes it here."""

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class QuotaEditedAdmin(SyncedObjectAdmin):
    """A synced object whose quotas users with ``quotas.apply_quota_change`` edit on its "Edit
    quotas" page (``<pk>/quotas/``), whose Save goes to the change's preview page."""

    # Which objects have an edit page (beyond the pk), and its title.
    edit_filter: ClassVar[dict[str, Any]] = {}
    edit_title = "Edit quotas of {name}"

    def get_urls(self) -> list[Any]:
        edit = self.admin_site.admin_view(self.edit_quotas_view)
        name = f"{self.opts.app_label}_{self.opts.model_name}_edit_quotas"
        return [path("<int:object_id>/quotas/", edit, name=name), *super().get_urls()]

    def edit_quotas_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        from quotas.writeback.forms import submit_edit
        from quotas.writeback.service import can_apply

        if not can_apply(request.user):
            raise PermissionDenied("Editing quotas needs the apply_quota_change permission.")
        found = self.model._default_manager.select_related("cluster")
        target = cast(
            ClusterQueue | Cohort, get_object_or_404(found, pk=object_id, **self.edit_filter)
        )
        form, change = submit_edit(request, target)
        if change is not None:
            return HttpResponseRedirect(reverse("dashboard:quota-change-detail", args=[change.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": target,
            "title": self.edit_title.format(name=target.name),
            "queue": target if isinstance(target, ClusterQueue) else None,
            "target": target,
            "form": form,
        }
        return TemplateResponse(request, "admin/quotas/clusterqueue/edit_quotas.html", context)


@admin.register(Cohort)
class CohortAdmin(QuotaEditedAdmin):
    """Explicit Cohorts with their own quota (v1beta2 ``spec.resourceGroups``, e.g. a shared
    pool) are edited like ClusterQueues: "Edit quotas" -> preview -> apply."""

    list_display = ["name", "cluster", "parent_name", "implicit", "weighted_share", "deleted_at"]
    list_filter = ["cluster", "implicit"]
    change_form_template = "admin/quotas/cohort/change_form.html"
    edit_filter = {"implicit": False}
    edit_title = "Edit the own quota of cohort {name}"

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        from quotas.writeback.service import can_apply

        cohort = Cohort.objects.filter(pk=object_id).first()
        editable = bool(cohort and not cohort.implicit and cohort.resource_groups)
        extra = {**(extra_context or {}), "can_edit_quotas": editable and can_apply(request.user)}
        return super().change_view(request, object_id, form_url, extra)


QUOTA_INLINE_FIELDS = ("flavor_name", "resource", "nominal_quota", "borrowing", "lending")


class ClusterQueueQuotaInline(ReadOnlyInline):
    """Quotas as Kubernetes quantities (``16``, ``64Gi``), not stored decimals."""

    model = ClusterQueueQuota
    fields = QUOTA_INLINE_FIELDS

    @admin.display(description="nominal quota")
    def nominal_quota(self, obj: ClusterQueueQuota) -> str:
        return display_quantity(obj.nominal, obj.resource)

    @admin.display(description="borrowing limit")
    def borrowing(self, obj: ClusterQueueQuota) -> str:
        return display_quantity(obj.borrowing_limit, obj.resource) or "unset"

    @admin.display(description="lending limit")
    def lending(self, obj: ClusterQueueQuota) -> str:
        return display_quantity(obj.lending_limit, obj.resource) or "unset"


@admin.register(ClusterQueue)
class ClusterQueueAdmin(QuotaEditedAdmin):
    """Synced fields are read-only; users with ``quotas.apply_quota_change`` edit the quotas on
    the "Edit quotas" page, whose Save goes to the preview (``quotas.writeback``)."""

    change_form_template = "admin/quotas/clusterqueue/change_form.html"
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

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        from quotas.writeback.service import can_apply

        extra = {
            **(extra_context or {}),
            "can_edit_quotas": can_apply(request.user),
            "quota_history_url": f"{reverse('dashboard:quota-change-list')}?queue={object_id}",
        }
        return super().change_view(request, object_id, form_url, extra)


@admin.register(QuotaChange)
class QuotaChangeAdmin(ReadOnlyAdmin):
    """The audit trail: read-only. Pending team-lead requests: filter on status "Requested"."""

    superuser_may_delete = False

    list_display = [
        "created_at",
        "target_name",
        "cluster",
        "status",
        "source",
        "requested_by",
        "decided_by",
        "field_manager",
        "preview_link",
    ]
    list_filter = ["status", "source", "cluster", "target_kind"]
    search_fields = ["target_name", "reason", "requested_by__username", "field_manager"]
    date_hierarchy = "created_at"
    list_select_related = ["cluster", "requested_by", "decided_by"]

    @admin.display(description="page")
    def preview_link(self, obj: QuotaChange) -> str:
        url = reverse("dashboard:quota-change-detail", args=[obj.pk])
        label = "Decide" if obj.status == "requested" else "Open"
        return format_html('<a href="{}">{}</a>', url, label)


@admin.register(LocalQueue)
class LocalQueueAdmin(ReadOnlyAdmin):
    list_display = ["namespace", "name", "cluster_queue_name", "pending_workloads", "deleted_at"]
    list_filter = ["cluster", "namespace"]
    search_fields = ["name", "namespace"]


@admin.register(WorkloadPriorityClass)
class WorkloadPriorityClassAdmin(ReadOnlyAdmin):
    list_display = ["name", "value", "cluster"]


TRANSITION_INLINE_FIELDS = ("at", "kind", "reason", "message", "preemptor", "requeue_at")


class WorkloadTransitionInline(ReadOnlyInline):
    model = WorkloadTransition
    fk_name = "workload"
    fields = TRANSITION_INLINE_FIELDS


@admin.register(Workload)
class WorkloadAdmin(ReadOnlyAdmin):
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
class WorkloadTransitionAdmin(ReadOnlyAdmin):
    list_display = ["at", "workload", "kind", "reason"]
    list_filter = ["kind"]
    date_hierarchy = "at"
    list_select_related = ["workload"]
    raw_id_fields = ["workload", "preemptor"]


@admin.register(ClusterQueueSample)
class ClusterQueueSampleAdmin(ReadOnlyAdmin):
    list_display = ["sampled_at", "cluster_queue", "flavor_name", "total", "borrowed", "lent"]
    list_filter = ["flavor_name"]
    date_hierarchy = "sampled_at"
    list_select_related = ["cluster_queue"]


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
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
