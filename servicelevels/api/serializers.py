"""Admission records and queue-level rows, for the OpenAPI schema and the list's body."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from servicelevels.models import AdmissionRecord


class AdmissionSerializer(serializers.ModelSerializer[AdmissionRecord]):
    workload = serializers.SerializerMethodField(help_text="namespace/name")
    cluster = serializers.CharField(source="cluster.name")
    team = serializers.SerializerMethodField()
    wait_seconds = serializers.FloatField(allow_null=True, help_text="Queued until admitted.")
    running_delay_seconds = serializers.FloatField(
        allow_null=True, help_text="Admitted until the first pod Running."
    )

    class Meta:
        model = AdmissionRecord
        fields = [
            "workload",
            "cluster",
            "cluster_queue",
            "local_queue",
            "team",
            "priority_class",
            "gpus",
            "queued_at",
            "quota_reserved_at",
            "admitted_at",
            "running_at",
            "wait_seconds",
            "running_delay_seconds",
            "evicted_at",
            "eviction_reason",
            "preemption_reason",
            "preempted_by",
            "attempt",
            "source",
        ]
        extra_kwargs: dict[str, Any] = {}

    cluster_queue = serializers.CharField(source="cluster_queue_name")
    local_queue = serializers.SerializerMethodField(help_text="namespace/name, or null.")
    priority_class = serializers.CharField(source="priority_class_name")
    preempted_by = serializers.SerializerMethodField(
        help_text="The preempting workload as namespace/name, or null."
    )

    def get_workload(self, record: AdmissionRecord) -> str:
        return record.workload_path

    def get_team(self, record: AdmissionRecord) -> str | None:
        return record.team.name if record.team_id and record.team else None

    def get_local_queue(self, record: AdmissionRecord) -> str | None:
        if not record.local_queue_name:
            return None
        return f"{record.namespace}/{record.local_queue_name}"

    def get_preempted_by(self, record: AdmissionRecord) -> str | None:
        """The preemptor, only when the viewer may see its team (else null, as if unknown)."""
        if not record.preempted_by_path:
            return None
        allowed = self.context.get("allowed")
        if allowed is None:
            return record.preempted_by_path
        team_id = getattr(record, "preemptor_team_id", None)
        return record.preempted_by_path if team_id is not None and team_id in allowed else None


class LevelRowSerializer(serializers.Serializer):
    group = serializers.CharField()
    cluster = serializers.CharField()
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    admissions = serializers.IntegerField()
    wait_seconds_p50 = serializers.FloatField(allow_null=True)
    wait_seconds_p90 = serializers.FloatField(allow_null=True)
    wait_seconds_p95 = serializers.FloatField(allow_null=True)
    wait_seconds_max = serializers.FloatField(allow_null=True)
    wait_seconds_mean = serializers.FloatField(allow_null=True)
    running_delay_seconds_p50 = serializers.FloatField(allow_null=True)
    running_delay_seconds_p95 = serializers.FloatField(allow_null=True)
    pending_at_end = serializers.IntegerField(allow_null=True, help_text="null on metrics rows")
    oldest_pending_seconds = serializers.FloatField(allow_null=True)
    evictions = serializers.DictField(child=serializers.IntegerField(), help_text="reason -> n")
    preemptions = serializers.IntegerField()
    preemptions_by_reason = serializers.DictField(child=serializers.IntegerField())
    preemptions_by_queue = serializers.DictField(
        child=serializers.IntegerField(), help_text="preempting ClusterQueue -> n"
    )
    preempted_gpu_hours = serializers.FloatField(allow_null=True, help_text="null on metrics rows")
    # The metaclass moves declared fields out of the class, so this does not shadow Field.source.
    preemptions_made = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Metrics rows: the workloads this group's queues preempted, by reason "
        "(Kueue counts preemptions by the preempting queue); empty on records rows.",
    )
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=["records", "metrics"],
        help_text="records: the product's admission records; metrics: Kueue's histograms "
        "(bucket resolution), for hours before the install.",
    )


class QueueLevelsSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    group_by = serializers.CharField()
    step = serializers.CharField()
    count = serializers.IntegerField(help_text="Rows in all pages.")
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    rows = LevelRowSerializer(many=True, help_text="Ordered by cluster, group, then period.")
