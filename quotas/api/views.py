"""Read-only quotas API: teams, cohorts, ClusterQueues, LocalQueues, workloads.

Visibility is quotas/access.py's policy, asked once per request (``TeamScoped.allowed``): staff
and finance see everything; a team lead the teams, ClusterQueues, LocalQueues and workloads of
the teams they lead (of every team with ``GPULEDGER_TEAM_VISIBILITY=public``). Cohorts are
fleet-level and visible to every signed-in user, listing only the member queues the user may
see; a transition's message names no preemptor queue the user may not see.
"""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Any

from django.db.models import Prefetch, Q, QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse
from rest_framework import viewsets
from rest_framework.serializers import BaseSerializer

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
from quotas.now import holding_demand, newest_samples, pending_gpus

logger = logging.getLogger(__name__)

PARAMETER_ERROR = OpenApiResponse(
    response=parameter_error_response_schema(),
    description="A bad parameter: its name → the reasons.",
)


class TeamScoped:
    """The policy's answer for this request, computed once, and handed to the serializers."""

    request: Any

    @cached_property
    def allowed(self) -> set[int] | None:
        return visible_team_ids(self.request.user)

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "allowed": self.allowed}  # type: ignore[misc]


class TeamViewSet(TeamScoped, ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.TeamSerializer
    filterset_class = filtersets.TeamFilterSet
    ordering_fields = ["name", "cost_center", "created_at"]
    ordering = ["name"]

    def get_queryset(self) -> QuerySet[Team]:
        queryset = Team.objects.prefetch_related(
            Prefetch("namespaces", queryset=TeamNamespace.objects.select_related("cluster")),
            "cluster_queues",
        )
        allowed = self.allowed
        return queryset if allowed is None else queryset.filter(id__in=allowed)


class CohortViewSet(TeamScoped, ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.CohortSerializer
    filterset_class = filtersets.CohortFilterSet
    ordering_fields = ["name", "observed_at"]
    ordering = ["cluster__name", "name"]

    def get_queryset(self) -> QuerySet[Cohort]:
        members = ClusterQueue.objects.order_by("name")
        if self.allowed is not None:
            members = members.filter(team_id__in=self.allowed)
        return Cohort.objects.select_related("cluster").prefetch_related(
            Prefetch("cluster_queues", queryset=members)
        )


class ClusterQueueViewSet(TeamScoped, ApiViewMixin, viewsets.ReadOnlyModelViewSet):
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
        allowed = self.allowed
        return queryset if allowed is None else queryset.filter(team_id__in=allowed)

    def get_serializer(self, *args: Any, **kwargs: Any) -> BaseSerializer[Any]:
        """The serializer, with the admitted and pending GPUs now of the queues it writes
        (``quotas.now``: two queries for a page of queues)."""
        if args:
            queues = args[0] if kwargs.get("many") else [args[0]]
            queue_filter = Q(cluster_queue_id__in=[queue.pk for queue in queues])
            context = kwargs.setdefault("context", self.get_serializer_context())
            context["admitted_now"] = holding_demand(queue_filter, "cluster_queue_id")
            context["pending_now"] = pending_gpus(queue_filter, "cluster_queue_id")
        return super().get_serializer(*args, **kwargs)


class LocalQueueViewSet(TeamScoped, ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.LocalQueueSerializer
    filterset_class = filtersets.LocalQueueFilterSet
    ordering_fields = ["namespace", "name", "pending_workloads", "admitted_workloads"]
    ordering = ["cluster__name", "namespace", "name"]

    def get_queryset(self) -> QuerySet[LocalQueue]:
        queryset = LocalQueue.objects.select_related("cluster", "cluster_queue")
        allowed = self.allowed
        return queryset if allowed is None else queryset.filter(cluster_queue__team_id__in=allowed)


class WorkloadViewSet(TeamScoped, ApiViewMixin, viewsets.ReadOnlyModelViewSet):
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
            Prefetch(
                "transitions",
                queryset=WorkloadTransition.objects.select_related(
                    "preemptor__cluster_queue"
                ).order_by("at", "kind"),
            )
        )
        allowed = self.allowed
        return queryset if allowed is None else queryset.filter(cluster_queue__team_id__in=allowed)
