"""Quota changes: the edit / request form of a ClusterQueue, the preview page (what-if, dry run,
GitOps owner, the patch) with Apply or Approve / Decline, the YAML download, and the worklist
and audit trail. The writes are ``quotas.writeback.service``'s; the 7-day utilization is the
read layer's (``ledger.quota_usage``)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from dashboard.access import allowed_team_ids, get_cluster_queue_for_user, refuse
from dashboard.decorators import dashboard_form, dashboard_page, int_param
from dashboard.frame import paginate
from ledger.quota_usage import queue_utilization
from quotas.access import leads_team, shown_preview
from quotas.choices import QuotaChangeStatus
from quotas.models import ClusterQueue, QuotaChange, Team
from quotas.writeback import service
from quotas.writeback.edits import EditError
from quotas.writeback.forms import submit_edit


def _leads(user: Any, queue: ClusterQueue) -> bool:
    return leads_team(user, queue.team_id)


def _get_change_for_user(request: HttpRequest, pk: int) -> QuotaChange:
    change = (
        QuotaChange.objects.select_related(
            "cluster", "cluster_queue", "cluster_queue__team", "requested_by", "decided_by"
        )
        .filter(pk=pk)
        .first()
    )
    if change is None:
        raise refuse()
    user = request.user
    if service.can_apply(user) or getattr(user, "is_staff", False):
        return change
    queue = change.cluster_queue
    if change.requested_by_id == user.pk or (queue is not None and _leads(user, queue)):
        return change
    raise refuse()  # the same 404 as a change that does not exist


def _shown_teams(request: HttpRequest) -> set[int] | None:
    """Whose queues a change's preview names for this user: all for quota admins."""
    return None if service.can_apply(request.user) else allowed_team_ids(request)


@dashboard_form
def quota_change_new(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    """Edit (admins with the permission) or request (the queue's team leads) a quota change."""
    queue = get_cluster_queue_for_user(request, cluster, name)
    applies = service.can_apply(request.user)
    if not applies and not _leads(request.user, queue):
        raise PermissionDenied("Only admins and the queue's team leads change its quota.")
    form, change = submit_edit(request, queue, request_only=not applies)
    if change is not None:
        return redirect("dashboard:quota-change-detail", change.pk)
    context = {
        "nav": "queues",
        "page_title": f"{'Change' if applies else 'Request a change of'} {queue.name}'s quota",
        "queue": queue,
        "form": form,
        "applies": applies,
    }
    return render(request, "dashboard/quota_change_form.html", context)


@dashboard_page(uses_range=False)
def quota_change_detail(request: HttpRequest, pk: int) -> HttpResponse:
    change = _get_change_for_user(request, pk)
    queue = change.cluster_queue
    context = {
        "nav": "queues",
        "page_title": f"Quota change #{change.pk}: {change.target_kind} {change.target_name}",
        "change": change,
        "summary": shown_preview(change.preview, change.cluster_id, _shown_teams(request)),
        "cells": change.cells(),
        "utilization": queue_utilization(queue) if queue is not None else None,
        "can_apply": service.can_apply(request.user),
        "open": change.status == QuotaChangeStatus.PREVIEWED,
        "requested": change.status == QuotaChangeStatus.REQUESTED,
        # Read-only cluster or GitOps-owned queue: the patch is offered, Apply is not.
        "writable": service.writable(change),
    }
    return render(request, "dashboard/quota_change_detail.html", context)


@dashboard_form
def quota_change_apply(request: HttpRequest, pk: int) -> HttpResponse:
    """POST: apply a previewed change, or approve / decline a request."""
    change = _get_change_for_user(request, pk)  # 404 / 403 before anything else
    if request.method != "POST":
        return redirect("dashboard:quota-change-detail", pk)
    if not service.can_apply(request.user):
        raise PermissionDenied("Applying quota changes needs the apply_quota_change permission.")
    action = request.POST.get("action", "apply")
    comment = request.POST.get("comment", "")[:2000]
    try:
        if action == "decline":
            change = service.decide(change, request.user, approve=False, comment=comment)
        elif action == "approve_gitops":
            change = service.approve_for_gitops(change, request.user, comment=comment)
        elif not service.writable(change):
            raise EditError(
                {"__all__": ["This queue is not written from here: commit the patch below."]}
            )
        elif change.status == QuotaChangeStatus.REQUESTED:
            change = service.decide(change, request.user, approve=True, comment=comment)
        else:
            service.apply(change, request.user)
    except EditError as exc:
        messages.error(request, " ".join(m for ms in exc.errors.values() for m in ms))
    else:
        change.refresh_from_db()
        messages.info(request, f"Quota change #{change.pk}: {change.get_status_display()}.")
        if change.notify_error:
            messages.warning(request, f"The requester was not told: {change.notify_error}")
    return redirect("dashboard:quota-change-detail", pk)


@dashboard_page(uses_range=False)
def quota_change_patch(request: HttpRequest, pk: int) -> HttpResponse:
    """The change as a YAML document to commit to the repository that owns the queue."""
    change = _get_change_for_user(request, pk)
    text = str(change.preview.get("yaml") or "")
    if not text:
        # A change seen made elsewhere has no patch of ours: no empty file.
        raise Http404("This change has no patch: it was not made from GPU Ledger.")
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    filename = f"{change.target_kind.lower()}-{change.target_name}-quota-{change.pk}.yaml"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@dashboard_page(uses_range=False)
def quota_change_list(request: HttpRequest) -> HttpResponse:
    """Pending requests (for admins) and the audit trail, of one queue or team when asked."""
    changes = QuotaChange.objects.select_related(
        "cluster", "cluster_queue", "requested_by", "decided_by"
    )
    changes = service.changes_for(request.user, changes)
    queue_id = int_param(request, "queue")
    team = request.GET.get("team", "").strip()[:100]
    subject = ""
    # A filter names its queue or team only when the user may see it; any other id or name
    # (missing, or another team's) lists nothing under a neutral title, the same either way.
    allowed = _shown_teams(request)
    if queue_id is not None:
        changes = changes.filter(cluster_queue_id=queue_id)
        found = ClusterQueue.objects.filter(pk=queue_id).first()
        seen = found is not None and (allowed is None or found.team_id in allowed)
        subject = f"ClusterQueue {found.name}" if seen and found else "the queue asked for"
    if team:
        changes = changes.filter(cluster_queue__team__name=team)
        found_team = Team.objects.filter(name=team).first()
        seen = found_team is not None and (allowed is None or found_team.pk in allowed)
        subject = f"team {found_team.name}" if seen and found_team else "the team asked for"
    pending = list(changes.pending_requests()[:100]) if service.can_apply(request.user) else []
    page, page_query = paginate(request, changes)
    context = {
        "nav": "quota-changes",
        "page_title": f"Quota changes{' of ' + subject if subject else ''}",
        "pending": pending,
        "page_obj": page,
        "page_query": page_query,
        "can_apply": service.can_apply(request.user),
    }
    return render(request, "dashboard/quota_change_list.html", context)
