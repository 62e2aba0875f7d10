"""Serializers of the alerts API."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from alerts.models import Episode

# What the API shows of a serving_overprovisioned episode's evidence (alerts.overprovisioned).
SERVING_EVIDENCE = (
    "knee_per_replica",
    "knee_unit",
    "knee_hour",
    "knee_days",
    "fraction",
    "share_below",
    "below_hours",
    "judged_hours",
    "counted_days",
    "fire_after_days",
    "gpus_held",
    "flavor",
    "gpu_model",
)
SERVING_DAY = (
    "day",
    "status",
    "share_below",
    "judged_hours",
    "knee_per_replica",
    "gpu_hours",
    "wasted_gpu_hours",
)


class EpisodeSerializer(serializers.ModelSerializer):
    state = serializers.CharField(read_only=True, help_text="pending | open | resolved")
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    team = serializers.CharField(source="team.name", read_only=True, default=None)
    cluster_queue = serializers.CharField(source="cluster_queue.name", read_only=True, default=None)
    workload = serializers.SerializerMethodField(help_text='"namespace/name"')
    serving_workload = serializers.SerializerMethodField(
        help_text='The inference deployment of a serving_overprovisioned episode: "namespace/kind/'
        'name".'
    )
    serving_evidence = serializers.SerializerMethodField(
        help_text="A serving_overprovisioned episode's evidence: the knee per replica and its "
        "unit, the hours below half of it out of those judged, the days counted and each day's "
        "verdict; null for the other rules."
    )
    node = serializers.CharField(source="node.name", read_only=True, default=None)
    acknowledged_by = serializers.CharField(
        source="acknowledged_by.username", read_only=True, default=None
    )
    cost = serializers.DecimalField(max_digits=16, decimal_places=4, read_only=True)
    url = serializers.SerializerMethodField(help_text="The episode's page.")
    through = serializers.DateTimeField(
        source="ended.through",
        read_only=True,
        help_text="The end of the hours the ended_* figures count: the last hour that ended, "
        'or the episode\'s end (README "Which hours a range counts").',
    )
    ended_idle_gpu_hours = serializers.FloatField(
        source="ended.idle_gpu_hours",
        read_only=True,
        help_text="Wasted GPU-hours through `through`, as the pages count them.",
    )
    ended_cost = serializers.DecimalField(
        source="ended.cost",
        max_digits=16,
        decimal_places=4,
        read_only=True,
        help_text="Cost of `ended_idle_gpu_hours` under the rate card, as the pages price it.",
    )

    class Meta:
        model = Episode
        fields = [
            "id",
            "rule",
            "severity",
            "state",
            "cluster",
            "team",
            "cluster_queue",
            "namespace",
            "workload",
            "serving_workload",
            "node",
            "gpus",
            "gpu_uuids",
            "started_at",
            "fired_at",
            "escalated_at",
            "resolved_at",
            "idle_gpu_hours",
            "held_gpu_hours",
            "cost",
            "through",
            "ended_idle_gpu_hours",
            "ended_cost",
            "summary",
            "serving_evidence",
            "acknowledged_by",
            "acknowledged_at",
            "ack_comment",
            "silenced_until",
            "exempt",
            "exempt_reason",
            "detected_live",
            "url",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_workload(self, episode: Episode) -> str | None:
        workload = episode.workload
        return None if workload is None else f"{workload.namespace}/{workload.name}"

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_serving_workload(self, episode: Episode) -> str | None:
        serving = episode.serving_workload
        return None if serving is None else str(serving)

    @extend_schema_field(serializers.JSONField(allow_null=True))
    def get_serving_evidence(self, episode: Episode) -> dict[str, Any] | None:
        if episode.serving_workload_id is None:
            return None
        evidence = episode.evidence or {}
        return {
            **{key: evidence.get(key) for key in SERVING_EVIDENCE},
            "days": [
                {key: day.get(key) for key in SERVING_DAY}
                for day in evidence.get("days", [])
                if isinstance(day, dict)
            ],
        }

    @extend_schema_field(serializers.URLField())
    def get_url(self, episode: Episode) -> str:
        path = reverse("dashboard:episode-detail", args=[episode.pk])
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path


class AcknowledgeSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
