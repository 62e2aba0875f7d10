"""Read-only fleet API. Fleet inventory is visible to every signed-in user (quotas/access.py:
fleet-level figures are not team detail)."""

from __future__ import annotations

from django.db.models import Func, IntegerField, OuterRef, QuerySet, Subquery
from rest_framework import viewsets

from core.api import ApiViewMixin
from fleet.api import filtersets, serializers
from fleet.models import Cluster, Gpu, IngestRun, Node


class ClusterViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.ClusterSerializer
    filterset_class = filtersets.ClusterFilterSet
    ordering_fields = ["name", "created_at"]
    ordering = ["name"]

    def get_queryset(self) -> QuerySet[Cluster]:
        # Subquery counts: two Count joins on one query would multiply each other.
        nodes = Node.objects.filter(cluster=OuterRef("pk"), deleted_at__isnull=True)
        gpus = Gpu.objects.filter(cluster=OuterRef("pk"), retired_at__isnull=True)
        return Cluster.objects.annotate(
            node_count=count_of(nodes),
            gpu_count=count_of(gpus),
        )


def count_of(queryset: QuerySet) -> Subquery:
    """``COUNT(*)`` of a correlated queryset as a scalar subquery."""
    counted = queryset.order_by().annotate(n=Func("pk", function="COUNT")).values("n")
    return Subquery(counted, output_field=IntegerField())


class NodeViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.NodeSerializer
    filterset_class = filtersets.NodeFilterSet
    ordering_fields = ["name", "gpu_capacity", "flavor", "observed_at"]
    ordering = ["cluster__name", "name"]

    def get_queryset(self) -> QuerySet[Node]:
        return Node.objects.select_related("cluster")


class GpuViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.GpuSerializer
    filterset_class = filtersets.GpuFilterSet
    ordering_fields = ["host", "index", "model_name", "last_seen_at"]
    ordering = ["cluster__name", "host", "index", "gi_id"]

    def get_queryset(self) -> QuerySet[Gpu]:
        return Gpu.objects.select_related("cluster", "node")


class IngestRunViewSet(ApiViewMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = serializers.IngestRunSerializer
    filterset_class = filtersets.IngestRunFilterSet
    ordering_fields = ["started_at", "finished_at", "source", "status"]
    ordering = ["-started_at"]

    def get_queryset(self) -> QuerySet[IngestRun]:
        return IngestRun.objects.select_related("cluster")
