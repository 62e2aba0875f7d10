"""``/api/v1/quota-changes/``: the audit trail (GET) and the quota write-back service (POST).

POST runs ``quotas.writeback.service`` as the admin pages do: ``dry_run`` (the default) returns
the preview, the 7-day utilization (``ledger.quota_usage``) and the API server's ``dryRun=All``
answer; ``dry_run: false`` then applies it, which needs ``quotas.apply_quota_change``. A team
lead without it may POST for their own teams' queues: the change is recorded as a request for the
admins. API tokens (``Bearer glt_…``, any scope) never write: a write needs a signed-in user.

In ``changes`` an omitted ``borrowing_limit`` / ``lending_limit`` keeps the live limit and
``null`` removes it; unknown fields are a 400. ``POST {id}/apply/`` applies a previewed change (or
approves and applies a request) at the previewed ``resourceVersion``; a direct apply may carry
``resource_version``. A write that did not happen answers 409 with the change and its patch: a
conflict (the queue changed since; the live values are in ``api_answer.live``) or a refusal
(read-only cluster, GitOps-managed queue). See README "Quota changes over the API".
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import ApiViewMixin
from ledger.api import serializers
from ledger.quota_usage import queue_utilization
from quotas.access import leads_team, sees_team, visible_team_ids
from quotas.choices import QuotaChangeSource, QuotaChangeStatus
from quotas.models import ApiToken, ClusterQueue, Cohort, QuotaChange
from quotas.writeback import service
from quotas.writeback.edits import EditError

WRITE_REFUSED = (
    "Nothing was written: a conflict (the object changed since the preview or since the given "
    "resource_version; its live values are in api_answer.live) or a refusal (read-only cluster, "
    "GitOps-managed object). The body is the change with its patch (patch.yaml, patch.kubectl)."
)
# What became of a write -> the answer's HTTP status (docs/architecture.md "Quota write-back").
NOT_WRITTEN = {QuotaChangeStatus.CONFLICT, QuotaChangeStatus.REFUSED}


class QuotaChangeFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    cluster_queue = django_filters.CharFilter(field_name="target_name")
    status = django_filters.ChoiceFilter(choices=QuotaChangeStatus.choices)
    source = django_filters.ChoiceFilter(choices=QuotaChangeSource.choices)

    class Meta:
        model = QuotaChange
        fields = ["cluster", "cluster_queue", "status", "source"]


# The answers of a request that asked for a write which did not happen (``_answer``).
WRITE_ANSWERS = {
    409: OpenApiResponse(response=serializers.QuotaChangeSerializer, description=WRITE_REFUSED),
    502: OpenApiResponse(
        response=serializers.QuotaChangeSerializer,
        description="The Kubernetes API server failed the write (api_answer).",
    ),
}


class QuotaChangeViewSet(
    ApiViewMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = serializers.QuotaChangeSerializer
    filterset_class = QuotaChangeFilterSet
    ordering_fields = ["created_at", "target_name", "status"]
    ordering = ["-created_at", "-id"]

    def get_serializer_context(self) -> dict[str, Any]:
        # The teams whose queues a preview names (``quotas.access.shown_preview``).
        context = dict(super().get_serializer_context())
        user = self.request.user
        context["shown_teams"] = (
            None
            if getattr(self, "swagger_fake_view", False) or service.can_apply(user)
            else visible_team_ids(user)
        )
        return context

    def get_queryset(self) -> QuerySet[QuotaChange]:
        queryset = QuotaChange.objects.select_related("cluster", "requested_by", "decided_by")
        if getattr(self, "swagger_fake_view", False):  # the schema generator: no user
            return queryset.none()
        return service.changes_for(self.request.user, queryset)

    @extend_schema(
        request=serializers.QuotaChangeRequestSerializer,
        responses={
            201: serializers.QuotaChangeSerializer,
            400: OpenApiResponse(description="Invalid change or unknown field: field → reasons."),
            403: OpenApiResponse(description="No permission, or an API token."),
            404: OpenApiResponse(description="No such ClusterQueue."),
            **WRITE_ANSWERS,
        },
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if isinstance(request.auth, ApiToken):
            raise PermissionDenied("API tokens cannot change quotas; sign in.")
        data = serializers.QuotaChangeRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        if values["cohort"]:
            return self._create_for_cohort(request, values)
        queue = (
            ClusterQueue.objects.present()
            .select_related("cluster", "cohort")
            .filter(cluster__name=values["cluster"], name=values["cluster_queue"])
            .first()
        )
        applies = service.can_apply(request.user)
        # Another team's queue the user may not see is refused as a missing one: same status,
        # same body (docs/architecture.md "Refusals").
        if queue is None or not (
            applies or sees_team(visible_team_ids(request.user), queue.team_id)
        ):
            return Response(
                {"cluster_queue": ["No such ClusterQueue in this cluster, or not yours to see."]},
                status=status.HTTP_404_NOT_FOUND,
            )
        if not applies and not leads_team(request.user, queue.team_id):
            raise PermissionDenied("Only quota admins and the queue's team leads change quotas.")
        if not values["dry_run"] and not applies:
            raise PermissionDenied("Applying needs the apply_quota_change permission.")
        try:
            change = service.preview(
                cluster_queue=queue,
                changes=[dict(cell) for cell in values["changes"]],
                stop_policy=values["stop_policy"],
                reason=values["reason"],
                user=request.user,
                request_only=not applies,
            )
            if not values["dry_run"]:
                change = _apply_at(change, request.user, values["resource_version"])
        except EditError as exc:
            raise ValidationError(exc.errors) from None
        return _answer(
            self.get_serializer(change).data,
            change,
            status.HTTP_201_CREATED,
            utilization=queue_utilization(queue),
        )

    @extend_schema(
        request=serializers.QuotaChangeApplySerializer,
        responses={
            200: serializers.QuotaChangeSerializer,
            400: OpenApiResponse(description="The change is not open (already decided)."),
            403: OpenApiResponse(description="No apply_quota_change permission, or an API token."),
            404: OpenApiResponse(description="No such change (or not visible to you)."),
            **WRITE_ANSWERS,
        },
    )
    @action(detail=True, methods=["post"])
    def apply(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Apply a previewed change, or approve and apply a team lead's request, at the
        ``resourceVersion`` it was previewed at: 409 when the queue changed since."""
        if isinstance(request.auth, ApiToken):
            raise PermissionDenied("API tokens cannot change quotas; sign in.")
        change = self.get_object()
        if not service.can_apply(request.user):
            raise PermissionDenied("Applying needs the apply_quota_change permission.")
        data = serializers.QuotaChangeApplySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            if change.status == QuotaChangeStatus.REQUESTED:
                change = service.decide(
                    change, request.user, approve=True, comment=data.validated_data["comment"]
                )
            else:
                change = service.apply(change, request.user)
        except EditError as exc:
            raise ValidationError(exc.errors) from None
        return _answer(self.get_serializer(change).data, change, status.HTTP_200_OK)

    def _create_for_cohort(self, request: Request, values: dict[str, Any]) -> Response:
        """A Cohort's own quota: quota admins only (no team owns a cohort)."""
        cohort = (
            Cohort.objects.select_related("cluster")
            .filter(cluster__name=values["cluster"], name=values["cohort"], implicit=False)
            .first()
        )
        if cohort is None:
            return Response(
                {"cohort": ["No such explicit Cohort in this cluster."]},
                status=status.HTTP_404_NOT_FOUND,
            )
        if not service.can_apply(request.user):
            raise PermissionDenied(
                "Changing a Cohort's quota needs the apply_quota_change permission."
            )
        try:
            change = service.preview(
                cohort=cohort,
                changes=[dict(cell) for cell in values["changes"]],
                stop_policy=values["stop_policy"],
                reason=values["reason"],
                user=request.user,
            )
            if not values["dry_run"]:
                change = _apply_at(change, request.user, values["resource_version"])
        except EditError as exc:
            raise ValidationError(exc.errors) from None
        return _answer(self.get_serializer(change).data, change, status.HTTP_201_CREATED)


def _apply_at(change: QuotaChange, user: Any, resource_version: str) -> QuotaChange:
    """Apply ``change``; with ``resource_version`` the write is sent at the client's version,
    so the API server answers 409 if the object changed since the client read it."""
    if resource_version and resource_version != change.resource_version:
        change.resource_version = resource_version
        change.save(update_fields=["resource_version", "updated_at"])
    return service.apply(change, user)


def _answer(shown: Any, change: QuotaChange, ok_status: int, **extra: Any) -> Response:
    """The change as the API shows it (``shown``: the view's serializer data, whose preview names
    only what the user may see): ``ok_status`` unless a write was asked for and did not happen
    (409 with the patch) or failed upstream (502)."""
    body = dict(shown)
    body.update(extra)
    code = ok_status
    if change.status in NOT_WRITTEN:
        code = status.HTTP_409_CONFLICT
    elif change.status == QuotaChangeStatus.FAILED:
        code = status.HTTP_502_BAD_GATEWAY
    if code != ok_status:
        preview = change.preview or {}
        body["patch"] = {"yaml": preview.get("yaml", ""), "kubectl": preview.get("kubectl", "")}
    return Response(body, status=code)
