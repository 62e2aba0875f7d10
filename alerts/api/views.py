"""GET /api/v1/alerts/ and POST /api/v1/alerts/{id}/acknowledge/.

Visibility follows quotas/access.py: staff and finance see every episode, a team lead those of
the teams they lead. Pending episodes (not yet past their duration) are never listed.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from alerts.actions import acknowledge
from alerts.api import filtersets, serializers
from alerts.models import Episode, EpisodeQuerySet
from alerts.permissions import may_acknowledge
from core.api import ApiViewMixin, parameter_error_response_schema
from quotas.access import visible_team_ids

PARAMETER_ERROR = OpenApiResponse(
    response=parameter_error_response_schema(),
    description="A bad parameter: its name → the reasons.",
)


def visible_episodes(user: object) -> EpisodeQuerySet:
    """Fired episodes ``user`` may see."""
    queryset = Episode.objects.fired()
    allowed = visible_team_ids(user)
    return queryset if allowed is None else queryset.filter(team_id__in=allowed)


@extend_schema(responses={200: serializers.EpisodeSerializer, 400: PARAMETER_ERROR})
class EpisodeViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    """Hoarding alert episodes, newest first (``ordering=-idle_gpu_hours`` for the costliest)."""

    serializer_class = serializers.EpisodeSerializer
    filterset_class = filtersets.EpisodeFilterSet
    ordering_fields = ["started_at", "fired_at", "resolved_at", "idle_gpu_hours", "cost", "gpus"]
    ordering = ["-started_at", "id"]

    def get_queryset(self) -> QuerySet[Episode]:
        return visible_episodes(self.request.user).with_subjects().select_related("acknowledged_by")

    @extend_schema(
        request=serializers.AcknowledgeSerializer,
        responses={200: serializers.EpisodeSerializer},
    )
    @action(detail=True, methods=["post"])
    def acknowledge(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Acknowledge the episode (who and when are recorded, with the comment)."""
        episode = self.get_object()
        if not may_acknowledge(request.user, episode):
            raise PermissionDenied(
                "Only the team's leads and people given the permission acknowledge its alerts."
            )
        form = serializers.AcknowledgeSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        acknowledge(episode, request.user, form.validated_data["comment"])
        return Response(self.get_serializer(episode).data)
