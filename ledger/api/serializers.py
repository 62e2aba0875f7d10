"""Chargeback and allocation bodies, for the OpenAPI schema only.

The bodies themselves are built by ledger/chargeback.py and ledger/opencost.py.
"""

from __future__ import annotations

from rest_framework import serializers


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
