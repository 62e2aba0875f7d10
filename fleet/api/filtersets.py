"""django-filter filtersets of the fleet API."""

from __future__ import annotations

import django_filters

from core.api import UtcIsoDateTimeFilter
from fleet.choices import IngestSource, IngestStatus
from fleet.models import Cluster, Gpu, IngestRun, Node


class ClusterFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter()

    class Meta:
        model = Cluster
        fields = ["name"]


class NodeFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name", help_text="Cluster name.")
    name = django_filters.CharFilter()
    flavor = django_filters.CharFilter()
    node_pool = django_filters.CharFilter()
    gpu_product = django_filters.CharFilter()
    present = django_filters.BooleanFilter(
        field_name="deleted_at", lookup_expr="isnull", help_text="Not deleted upstream."
    )

    class Meta:
        model = Node
        fields = ["cluster", "name", "flavor", "node_pool", "gpu_product", "present"]


class GpuFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name", help_text="Cluster name.")
    node = django_filters.CharFilter(field_name="node__name", help_text="Node name.")
    host = django_filters.CharFilter()
    uuid = django_filters.CharFilter()
    model_name = django_filters.CharFilter()
    mig_profile = django_filters.CharFilter()
    time_sliced = django_filters.BooleanFilter()
    retired = django_filters.BooleanFilter(
        field_name="retired_at", lookup_expr="isnull", exclude=True, help_text="Retired GPUs."
    )

    class Meta:
        model = Gpu
        fields = ["cluster", "node", "host", "uuid", "model_name", "mig_profile", "time_sliced"]


class IngestRunFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name", help_text="Cluster name.")
    source = django_filters.ChoiceFilter(choices=IngestSource.choices)
    status = django_filters.MultipleChoiceFilter(choices=IngestStatus.choices)
    since = UtcIsoDateTimeFilter(
        field_name="started_at", lookup_expr="gte", help_text="Started at or after (ISO 8601)."
    )

    class Meta:
        model = IngestRun
        fields = ["cluster", "source", "status", "since"]
