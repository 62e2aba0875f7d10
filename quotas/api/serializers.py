"""Serializers of the quotas API: teams and Kueue objects."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from fleet.models import Cluster
from quotas.access import hide_queue_path, sees_team
from quotas.models import (
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    Team,
    TeamNamespace,
    Workload,
    WorkloadTransition,
)
from quotas.now import Demand, queues_now, quota_gpus


class BriefTeamSerializer(serializers.ModelSerializer):
    class Meta:
        model = Team
        fields = ["id", "name", "display_name"]


class BriefClusterQueueSerializer(serializers.ModelSerializer):
    class Meta:
        model = ClusterQueue
        fields = ["id", "name"]


class BriefLocalQueueSerializer(serializers.ModelSerializer):
    class Meta:
        model = LocalQueue
        fields = ["id", "namespace", "name"]


class TeamNamespaceSerializer(serializers.ModelSerializer):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )

    class Meta:
        model = TeamNamespace
        fields = ["cluster", "namespace"]


class TeamSerializer(serializers.ModelSerializer):
    namespaces = TeamNamespaceSerializer(many=True, read_only=True)
    cluster_queues = BriefClusterQueueSerializer(many=True, read_only=True)

    class Meta:
        model = Team
        fields = [
            "id",
            "name",
            "display_name",
            "cost_center",
            "namespaces",
            "cluster_queues",
            "created_at",
            "updated_at",
        ]


class CohortSerializer(serializers.ModelSerializer):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    cluster_queues = BriefClusterQueueSerializer(many=True, read_only=True)

    class Meta:
        model = Cohort
        fields = [
            "id",
            "cluster",
            "name",
            "parent_name",
            "implicit",
            "scheduler",
            "fair_weight",
            "weighted_share",
            "resource_groups",
            "cluster_queues",
            "observed_at",
            "deleted_at",
        ]


class ClusterQueueQuotaSerializer(serializers.ModelSerializer):
    class Meta:
        model = ClusterQueueQuota
        fields = [
            "flavor_name",
            "resource",
            "position",
            "nominal",
            "borrowing_limit",
            "lending_limit",
        ]


class ClusterQueueUsageSerializer(serializers.ModelSerializer):
    """The latest sample of one flavor × resource: the queue's current usage."""

    class Meta:
        model = ClusterQueueSample
        fields = [
            "flavor_name",
            "resource",
            "sampled_at",
            "total",
            "reserved",
            "borrowed",
            "lent",
            "nominal",
            "borrowing_limit",
            "lending_limit",
            "pending_demand",
            "pending_workloads",
            "admitted_workloads",
        ]


class QueueNowSerializer(serializers.Serializer):
    """GPUs of the queue now, summed over its flavors: the queue page's "now" figures
    (``quotas.now``; docs/architecture.md "Figures")."""

    sampled_at = serializers.DateTimeField(
        allow_null=True,
        help_text="The newest of the queue samples borrowed and lent come from; null when the "
        "queue has no fresh sample.",
    )
    total = serializers.FloatField(
        help_text="GPUs admitted (quota) to the queue's workloads holding quota; MIG at slices/7."
    )
    borrowed = serializers.FloatField(
        allow_null=True,
        help_text="GPUs above nominal, from the cohort (fresh queue samples; null without).",
    )
    lent = serializers.FloatField(
        allow_null=True,
        help_text="Unused quota in use by other cohort members (fresh queue samples; null "
        "without).",
    )
    nominal = serializers.FloatField(
        help_text="Nominal GPU quota of the queue's spec; MIG quota at slices/7."
    )
    pending = serializers.FloatField(help_text="GPUs requested by pending workloads.")


class ClusterQueueSerializer(serializers.ModelSerializer):
    """A ClusterQueue with its quotas and its usage now (``quotas.now``). ``usage`` lists the
    newest sample of each flavor × resource no older than the freshness limit (none when the
    sync stopped); ``gpus_now`` counts admitted and pending GPUs from the queue's workloads, as
    the pages do, and takes borrowed and lent from those samples. The view passes the
    workloads' sums in the context (``admitted_now``, ``pending_now``: queue id → ``Demand``)."""

    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    team = BriefTeamSerializer(read_only=True, allow_null=True)
    quotas = ClusterQueueQuotaSerializer(many=True, read_only=True)
    usage = serializers.SerializerMethodField()
    gpus_now = serializers.SerializerMethodField()

    class Meta:
        model = ClusterQueue
        fields = [
            "id",
            "cluster",
            "name",
            "cohort_name",
            "scheduler",
            "team",
            "quotas",
            "usage",
            "gpus_now",
            "queueing_strategy",
            "stop_policy",
            "borrow_within_cohort",
            "reclaim_within_cohort",
            "within_cluster_queue",
            "fair_weight",
            "weighted_share",
            "pending_workloads",
            "reserving_workloads",
            "admitted_workloads",
            "active",
            "observed_at",
            "deleted_at",
        ]

    @extend_schema_field(ClusterQueueUsageSerializer(many=True))
    def get_usage(self, obj: ClusterQueue) -> list[dict[str, Any]]:
        samples = getattr(obj, "latest_samples", None)
        if samples is None:
            samples = []
        return ClusterQueueUsageSerializer(samples, many=True).data  # type: ignore[return-value]

    @extend_schema_field(QueueNowSerializer())
    def get_gpus_now(self, obj: ClusterQueue) -> dict[str, Any]:
        found = queues_now(getattr(obj, "latest_samples", None) or []).get(obj.pk)
        admitted = self.context.get("admitted_now", {}).get(obj.pk, Demand())
        pending = self.context.get("pending_now", {}).get(obj.pk, Demand())
        now = {
            "sampled_at": found.sampled_at if found else None,
            "total": admitted.gpus,
            "borrowed": found.borrowed if found else None,
            "lent": found.lent if found else None,
            "nominal": sum(quota_gpus(quota) for quota in obj.quotas.all()),
            "pending": pending.gpus,
        }
        return QueueNowSerializer(now).data  # type: ignore[return-value]


class LocalQueueSerializer(serializers.ModelSerializer):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    cluster_queue = BriefClusterQueueSerializer(read_only=True, allow_null=True)

    class Meta:
        model = LocalQueue
        fields = [
            "id",
            "cluster",
            "namespace",
            "name",
            "cluster_queue",
            "cluster_queue_name",
            "pending_workloads",
            "reserving_workloads",
            "admitted_workloads",
            "observed_at",
            "deleted_at",
        ]


class WorkloadTransitionSerializer(serializers.ModelSerializer):
    """A transition; the preemptor's queue path (in ``message`` too) only when the preemptor is
    known and its team visible to the user (``quotas.access``; the view's ``allowed``)."""

    class Meta:
        model = WorkloadTransition
        fields = ["kind", "at", "reason", "message", "preemptor_path", "requeue_at"]

    def to_representation(self, instance: WorkloadTransition) -> dict[str, Any]:
        data = super().to_representation(instance)
        preemptor = instance.preemptor
        queue = preemptor.cluster_queue if preemptor is not None else None
        if not sees_team(self.context.get("allowed", set()), queue.team_id if queue else None):
            data["message"] = hide_queue_path(instance.message, instance.preemptor_path)
            data["preemptor_path"] = ""
        return data


class WorkloadSerializer(serializers.ModelSerializer):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    local_queue = BriefLocalQueueSerializer(read_only=True, allow_null=True)
    cluster_queue = BriefClusterQueueSerializer(read_only=True, allow_null=True)
    team = serializers.SerializerMethodField()
    transitions = WorkloadTransitionSerializer(many=True, read_only=True)

    class Meta:
        model = Workload
        fields = [
            "id",
            "cluster",
            "namespace",
            "name",
            "owner_kind",
            "owner_name",
            "queue_name",
            "local_queue",
            "cluster_queue",
            "team",
            "priority",
            "priority_class_name",
            "active",
            "requested_gpus",
            "admitted_gpus",
            "flavors",
            "state",
            "state_reason",
            "state_message",
            "quota_reserved_at",
            "admitted_at",
            "finished_at",
            "requeue_count",
            "borrowing",
            "borrowed_gpus",
            "observed_at",
            "deleted_at",
            "transitions",
        ]

    def get_team(self, obj: Workload) -> str | None:
        queue = obj.cluster_queue
        if queue is None or queue.team is None:
            return None
        return queue.team.name
