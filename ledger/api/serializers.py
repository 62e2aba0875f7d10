"""Chargeback and allocation bodies, for the OpenAPI schema only.

The bodies themselves are built by ``ledger.chargeback`` (``ledger/chargeback/report.py``) and
``ledger/opencost.py``.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from quotas.access import shown_preview
from quotas.models import QuotaChange


class CostSerializer(serializers.Serializer):
    allocated = serializers.FloatField()
    borrowing = serializers.FloatField()
    lending_credit = serializers.FloatField()
    total = serializers.FloatField()


class ChargebackFiguresSerializer(serializers.Serializer):
    capacity_gpu_hours = serializers.FloatField(
        required=False, help_text="On cluster, node and flavor rows."
    )
    allocated_gpu_hours = serializers.FloatField()
    active_gpu_hours = serializers.FloatField()
    idle_gpu_hours = serializers.FloatField()
    no_telemetry_gpu_hours = serializers.FloatField()
    utilization = serializers.FloatField(allow_null=True)
    telemetry_coverage = serializers.FloatField(allow_null=True)
    borrowed_gpu_hours = serializers.FloatField()
    lent_gpu_hours = serializers.FloatField()
    nominal_gpu_hours = serializers.FloatField()
    pending_gpu_hours = serializers.FloatField()
    cost = CostSerializer()


class ChargebackRowSerializer(ChargebackFiguresSerializer):
    group = serializers.CharField()
    cluster = serializers.CharField(allow_null=True)
    period_start = serializers.DateTimeField(required=False, help_text="When stepped.")
    priced = serializers.BooleanField(
        help_text="False when some of the row's charged GPU-hours had no rate card (cost 0.00)."
    )


class PricingSerializer(serializers.Serializer):
    complete = serializers.BooleanField(help_text="Every charged GPU-hour had a rate card.")
    rate_cards = serializers.IntegerField(help_text="Rate cards in the currency.")
    unpriced_rows = serializers.IntegerField()
    unpriced_gpu_hours = serializers.FloatField()
    note = serializers.CharField()


class ChargebackSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    group_by = serializers.CharField()
    step = serializers.CharField()
    currency = serializers.CharField()
    model = serializers.ChoiceField(choices=["usage", "quota"])
    pricing = PricingSerializer()
    rows = ChargebackRowSerializer(many=True)
    totals = ChargebackFiguresSerializer()


class AllocationWindowSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()


class GpuLedgerFiguresSerializer(ChargebackFiguresSerializer):
    telemetry_gpu_hours = serializers.FloatField()


class AllocationSerializer(serializers.Serializer):
    name = serializers.CharField()
    properties = serializers.DictField()
    window = AllocationWindowSerializer()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    minutes = serializers.FloatField()
    gpuCount = serializers.FloatField()
    gpuHours = serializers.FloatField()
    gpuRequestAverage = serializers.FloatField()
    gpuUsageAverage = serializers.FloatField()
    gpuEfficiency = serializers.FloatField()
    gpuCost = serializers.FloatField()
    totalCost = serializers.FloatField()
    gpuLedger = GpuLedgerFiguresSerializer()


class AllocationResponseSerializer(serializers.Serializer):
    code = serializers.IntegerField()
    status = serializers.CharField()
    # A field named ``data``: the serializer metaclass moves declared fields off the class, so
    # it does not shadow ``Serializer.data`` at runtime, but the stubs see the class attribute.
    data = serializers.ListField(child=serializers.DictField(child=AllocationSerializer()))  # type: ignore[assignment]


# --- quota changes ----------------------------------------------------------------------------


class StrictSerializer(serializers.Serializer):
    """A request body that names only known fields: a misspelt key (``borrowingLimit``,
    ``dryrun``) is a 400 naming it, not silently ignored."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {key: ["Unknown field."] for key in unknown}, code="unknown_field"
                )
        return super().to_internal_value(data)


LIMIT_HELP = (
    "A Kubernetes quantity; null or empty removes the limit (unlimited); omitted leaves the "
    "limit as it is now."
)


class QuotaCellSerializer(StrictSerializer):
    """One flavor x resource: Kubernetes quantities. An omitted limit stays as it is; a null
    (or empty) limit is removed."""

    flavor = serializers.CharField(max_length=253)
    resource = serializers.CharField(max_length=253)
    nominal = serializers.CharField(max_length=64)
    borrowing_limit = serializers.CharField(
        max_length=64, required=False, allow_blank=True, allow_null=True, help_text=LIMIT_HELP
    )
    lending_limit = serializers.CharField(
        max_length=64, required=False, allow_blank=True, allow_null=True, help_text=LIMIT_HELP
    )


class QuotaChangeRequestSerializer(StrictSerializer):
    """``POST /api/v1/quota-changes/``: one change of one ClusterQueue's quotas (or of a
    Cohort's own quota: give ``cohort`` instead of ``cluster_queue``)."""

    cluster = serializers.CharField(max_length=63)
    cluster_queue = serializers.CharField(
        max_length=253, required=False, allow_blank=True, default=""
    )
    cohort = serializers.CharField(max_length=253, required=False, allow_blank=True, default="")
    changes = QuotaCellSerializer(many=True, required=False, default=list)
    stop_policy = serializers.ChoiceField(
        choices=["None", "Hold", "HoldAndDrain"], required=False, allow_null=True, default=None
    )
    reason = serializers.CharField(max_length=2000)
    dry_run = serializers.BooleanField(
        default=True,
        help_text="True: preview and the API server's dryRun=All answer only. False: apply.",
    )
    resource_version = serializers.CharField(
        max_length=64,
        required=False,
        allow_blank=True,
        default="",
        help_text="With dry_run false: the metadata.resourceVersion the client read; the write "
        "is sent at it and answers 409 when the queue changed since.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if bool(attrs.get("cluster_queue")) == bool(attrs.get("cohort")):
            raise serializers.ValidationError(
                {"cluster_queue": ["Give either cluster_queue or cohort."]}
            )
        if attrs.get("resource_version") and attrs.get("dry_run", True):
            raise serializers.ValidationError(
                {"resource_version": ["Only a direct apply (dry_run false) carries one."]}
            )
        return attrs


class QuotaChangeApplySerializer(StrictSerializer):
    """``POST /api/v1/quota-changes/{id}/apply/``: apply a previewed change (or approve and
    apply a team lead's request) at the resourceVersion it was previewed at."""

    comment = serializers.CharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        default="",
        help_text="For a team lead's request: the comment emailed with the decision.",
    )


class QuotaChangeSerializer(serializers.ModelSerializer):
    """One entry of the audit trail."""

    cluster: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    decided_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = QuotaChange
        fields = [
            "id",
            "cluster",
            "target_kind",
            "target_name",
            "target_resource",
            "target_api_version",
            "source",
            "status",
            "reason",
            "before",
            "after",
            "stop_policy_before",
            "stop_policy_after",
            "preview",
            "dry_run",
            "resource_version",
            "applied_resource_version",
            "api_status",
            "api_answer",
            "field_manager",
            "gitops_owner",
            "requested_by",
            "decided_by",
            "decision_comment",
            "decided_at",
            "applied_at",
            "observed_at",
            "created_at",
        ]
        read_only_fields = fields

    def to_representation(self, instance: QuotaChange) -> dict[str, Any]:
        data = super().to_representation(instance)
        if "shown_teams" in self.context:
            data["preview"] = shown_preview(
                data["preview"], instance.cluster_id, self.context["shown_teams"]
            )
        return data
