"""Read-only quotas API: teams, cohorts, ClusterQueues, LocalQueues, workloads.

Visibility follows quotas/access.py: staff and finance see everything; a team lead sees the
teams, ClusterQueues, LocalQueues and workloads of the teams they lead; cohorts are fleet-level
aggregates and visible to every signed-in user.
"""

from __future__ import annotations

import logging

from django.db.models import Prefetch, Q, QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse
from rest_framework import viewsets

from core.api import (
    ApiViewMixin,
    parameter_error_response_schema,
)
from quotas.access import visible_team_ids
from quotas.api import filtersets, serializers
from quotas.models import (
    ClusterQueue,
    Cohort,
    LocalQueue,
    Team,
    TeamNamespace,
    Workload,
    WorkloadTransition,
)
from quotas.now import newest_samples

logger = logging.getLogger(__name__)

PARAMETER_ERROR = OpenApiResponse(
    response=parameter_error_response_schema(),
    description="A bad parameter: its name → the reasons.",
)


class TeamViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.TeamSerializer
    filterset_class = filtersets.TeamFilterSet
    ordering_fields = ["name", "cost_center", "created_at"]
    ordering = ["name"]

    def get_queryset(self) -> QuerySet[Team]:
        queryset = Team.objects.prefetch_related(
            Prefetch("namespaces", queryset=TeamNamespace.objects.select_related("cluster")),
            "cluster_queues",
        )
        allowed = visible_team_ids(self.request.user)
        return queryset if allowed is None else queryset.filter(id__in=allowed)


class CohortViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.CohortSerializer
    filterset_class = filtersets.CohortFilterSet
    ordering_fields = ["name", "observed_at"]
    ordering = ["cluster__name", "name"]

    def get_queryset(self) -> QuerySet[Cohort]:
        return Cohort.objects.select_related("cluster").prefetch_related("cluster_queues")


class ClusterQueueViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.ClusterQueueSerializer
    filterset_class = filtersets.ClusterQueueFilterSet
    ordering_fields = ["name", "cohort_name", "pending_workloads", "admitted_workloads"]
    ordering = ["cluster__name", "name"]

    def get_queryset(self) -> QuerySet[ClusterQueue]:
        # "Now" as the pages see it (quotas.now): the newest fresh sample of every resource.
        newest = newest_samples(Q(), timezone.now(), resource=None)
        queryset = ClusterQueue.objects.select_related("cluster", "team").prefetch_related(
            "quotas",
            Prefetch("samples", queryset=newest, to_attr="latest_samples"),
        )
        allowed = visible_team_ids(self.request.user)
        return queryset if allowed is None else queryset.filter(team_id__in=allowed)


class LocalQueueViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.LocalQueueSerializer
    filterset_class = filtersets.LocalQueueFilterSet
    ordering_fields = ["namespace", "name", "pending_workloads", "admitted_workloads"]
    ordering = ["cluster__name", "namespace", "name"]

    def get_queryset(self) -> QuerySet[LocalQueue]:
        queryset = LocalQueue.objects.select_related("cluster", "cluster_queue")
        allowed = visible_team_ids(self.request.user)
        return queryset if allowed is None else queryset.filter(cluster_queue__team_id__in=allowed)


class WorkloadViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.WorkloadSerializer
    filterset_class = filtersets.WorkloadFilterSet
    ordering_fields = [
        "namespace",
        "name",
        "state",
        "priority",
        "requested_gpus",
        "admitted_at",
        "finished_at",
        "observed_at",
    ]
    ordering = ["cluster__name", "namespace", "name"]

    def get_queryset(self) -> QuerySet[Workload]:
        queryset = Workload.objects.select_related(
            "cluster", "local_queue", "cluster_queue__team"
        ).prefetch_related(
            Prefetch("transitions", queryset=WorkloadTransition.objects.order_by("at", "kind"))
        )
        allowed = visible_team_ids(self.request.user)
        return queryset if allowed is None else queryset.filter(cluster_queue__team_id__in=allowed)
