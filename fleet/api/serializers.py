"""Serializers of the fleet API: clusters, nodes, GPUs and ingest runs (explicit fields)."""

from __future__ import annotations

from rest_framework import serializers

from core.errors import public_summary
from fleet.models import Cluster, Gpu, IngestRun, Node


class BriefNodeSerializer(serializers.ModelSerializer):
    class Meta:
        model = Node
        fields = ["id", "name"]


class ClusterSerializer(serializers.ModelSerializer):
    node_count = serializers.IntegerField(read_only=True, help_text="Nodes present now.")
    gpu_count = serializers.IntegerField(read_only=True, help_text="GPUs not retired.")

    class Meta:
        model = Cluster
        # Connection details (Prometheus auth, kube context) stay out of the API.
        fields = [
            "id",
            "name",
            "display_name",
            "collect_enabled",
            "sync_enabled",
            "node_count",
            "gpu_count",
            "created_at",
            "updated_at",
        ]


class NodeSerializer(serializers.ModelSerializer):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )

    class Meta:
        model = Node
        fields = [
            "id",
            "cluster",
            "name",
            "gpu_product",
            "node_pool",
            "flavor",
            "gpu_capacity",
            "gpu_allocatable",
            "mig_allocatable",
            "labels",
            "observed_at",
            "deleted_at",
        ]


class GpuSerializer(serializers.ModelSerializer):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    node = BriefNodeSerializer(read_only=True, allow_null=True)
    fraction = serializers.FloatField(read_only=True, help_text="1, or slices/7 for MIG.")

    class Meta:
        model = Gpu
        fields = [
            "id",
            "cluster",
            "node",
            "host",
            "uuid",
            "gi_id",
            "index",
            "model_name",
            "pci_bus_id",
            "mig_profile",
            "slices",
            "fraction",
            "time_sliced",
            "first_seen_at",
            "last_seen_at",
            "retired_at",
        ]


class IngestRunSerializer(serializers.ModelSerializer):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    error = serializers.SerializerMethodField(
        help_text="Full error for staff; for others its first line without hosts, URLs or paths."
    )

    def get_error(self, run: IngestRun) -> str:
        request = self.context.get("request")
        if request is not None and request.user.is_staff:
            return run.error
        return public_summary(run.error)

    class Meta:
        model = IngestRun
        fields = [
            "id",
            "cluster",
            "source",
            "status",
            "window_start",
            "window_end",
            "started_at",
            "finished_at",
            "records_read",
            "rows_written",
            "skipped",
            "nonfinite_skipped",
            "skip_reasons",
            "error",
        ]
