"""Admin for remediation: the per-queue policies, the audit log, and re-activation by staff.

Re-activating (``spec.active: true``) is one POST to
``admin:remediation_remediationaction_reactivate`` from the episode page, or the "Re-activate"
action on workloads; it needs the ``remediation.add_remediationaction`` permission (superusers
have it).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from core.admin import ReadOnlyAdmin, ReadOnlyInline
from quotas.admin import WorkloadAdmin
from quotas.models import Workload
from remediation.apply import REACTIVATE_PERMISSION, reactivate
from remediation.choices import RemediationOutcome
from remediation.models import RemediationAction, RemediationPolicy


def _report(request: HttpRequest, action: RemediationAction) -> None:
    ref = f"{action.namespace}/{action.workload_name}"
    if action.outcome == RemediationOutcome.DONE:
        messages.success(request, f"{ref} re-activated (spec.active=true).")
    else:
        messages.error(request, f"{ref} could not be re-activated: {action.error}")


@admin.register(RemediationPolicy)
class RemediationPolicyAdmin(admin.ModelAdmin):
    list_display = ["cluster_queue", "mode", "grace_period", "dry_run", "updated_at"]
    list_filter = ["mode", "dry_run"]
    list_select_related = ["cluster_queue"]
    autocomplete_fields = ["cluster_queue"]
    search_fields = ["cluster_queue__name"]


ACTION_FIELDS = (
    "created_at",
    "kind",
    "outcome",
    "cluster",
    "namespace",
    "workload_name",
    "workload",
    "episode",
    "mode",
    "dry_run",
    "grace_period",
    "requested_by",
    "request",
    "status_code",
    "response",
    "error",
)


@admin.register(RemediationAction)
class RemediationActionAdmin(ReadOnlyAdmin):
    """The audit log: read-only."""

    superuser_may_delete = False

    list_display = [
        "created_at",
        "kind",
        "workload_ref",
        "cluster",
        "outcome",
        "dry_run",
        "mode",
        "requested_by",
        "status_code",
    ]
    list_filter = ["kind", "outcome", "dry_run", "cluster"]
    list_select_related = ["cluster", "requested_by"]
    search_fields = ["namespace", "workload_name"]
    date_hierarchy = "created_at"
    fields = ACTION_FIELDS
    readonly_fields = ACTION_FIELDS

    @admin.display(description="Workload")
    def workload_ref(self, obj: RemediationAction) -> str:
        return f"{obj.namespace}/{obj.workload_name}"

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "reactivate/<int:workload_id>/",
                self.admin_site.admin_view(require_POST(self.reactivate_view)),
                name="remediation_remediationaction_reactivate",
            )
        ]
        return own + super().get_urls()

    def reactivate_view(self, request: HttpRequest, workload_id: int) -> HttpResponse:
        """POST: re-activate the workload, then back to where the button was."""
        if not request.user.has_perm(REACTIVATE_PERMISSION):
            raise PermissionDenied
        workload = get_object_or_404(Workload, pk=workload_id)
        episode_id = request.POST.get("episode")
        episode = None
        if episode_id and episode_id.isdigit():
            from alerts.models import Episode

            episode = Episode.objects.filter(pk=int(episode_id), workload=workload).first()
        action = reactivate(workload.pk, request.user, episode=episode)
        _report(request, action)
        target = request.POST.get("next") or ""
        if not url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            target = reverse("admin:remediation_remediationaction_change", args=[action.pk])
        return HttpResponseRedirect(target)


class RemediationActionInline(ReadOnlyInline):
    model = RemediationAction
    fk_name = "workload"
    fields = ("created_at", "kind", "outcome", "dry_run", "mode", "requested_by", "error")
    verbose_name_plural = "remediation (deactivations, dry runs, re-activations)"


# The workload admin, with its remediation history and the re-activate action.
admin.site.unregister(Workload)


@admin.register(Workload)
class WorkloadWithRemediationAdmin(WorkloadAdmin):
    inlines = [*WorkloadAdmin.inlines, RemediationActionInline]
    actions = ["reactivate_workloads"]

    def has_reactivate_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(REACTIVATE_PERMISSION))

    @admin.action(description="Re-activate (spec.active=true)", permissions=["reactivate"])
    def reactivate_workloads(self, request: HttpRequest, queryset: QuerySet[Workload]) -> None:
        for workload in queryset:
            _report(request, reactivate(workload.pk, request.user))
