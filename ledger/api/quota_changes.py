"""``/api/v1/quota-changes/``: the audit trail (GET) and the quota write-back service (POST).

POST runs ``quotas.writeback.service`` as the admin pages do: ``dry_run`` (the default) returns
the preview, the 7-day utilization (``ledger.quota_usage``) and the API server's ``dryRun=All``
answer; ``dry_run: false`` then applies it, which needs ``quotas.apply_quota_change``. A team
lead without it may POST for their own teams' queues: the change is recorded as a request for the
admins. API tokens (``Bearer glt_…``, any scope) never write: a write needs a signed-in user.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
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


class QuotaChangeFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    cluster_queue = django_filters.CharFilter(field_name="target_name")
    status = django_filters.ChoiceFilter(choices=QuotaChangeStatus.choices)
    source = django_filters.ChoiceFilter(choices=QuotaChangeSource.choices)

    class Meta:
        model = QuotaChange
        fields = ["cluster", "cluster_queue", "status", "source"]


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
            400: OpenApiResponse(description="Invalid change: field → reasons."),
            403: OpenApiResponse(description="No permission, or an API token."),
            404: OpenApiResponse(description="No such ClusterQueue."),
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
                change = service.apply(change, request.user)
        except EditError as exc:
            raise ValidationError(exc.errors) from None
        body = dict(self.get_serializer(change).data)
        body["utilization"] = queue_utilization(queue)
        return Response(body, status=status.HTTP_201_CREATED)

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
                change = service.apply(change, request.user)
        except EditError as exc:
            raise ValidationError(exc.errors) from None
        return Response(
            serializers.QuotaChangeSerializer(change).data, status=status.HTTP_201_CREATED
        )
