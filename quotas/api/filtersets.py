"""django-filter filtersets of the quotas API (query parameters of the list endpoints)."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from core.api import UtcIsoDateTimeFilter
from quotas.choices import WorkloadState
from quotas.models import ClusterQueue, Cohort, LocalQueue, Team, Workload


class TeamFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter()
    cost_center = django_filters.CharFilter()

    class Meta:
        model = Team
        fields = ["name", "cost_center"]


class CohortFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name", help_text="Cluster name.")
    name = django_filters.CharFilter()
    present = django_filters.BooleanFilter(
        field_name="deleted_at", lookup_expr="isnull", help_text="Not deleted upstream."
    )

    class Meta:
        model = Cohort
        fields = ["cluster", "name", "present"]


class ClusterQueueFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name", help_text="Cluster name.")
    name = django_filters.CharFilter()
    cohort = django_filters.CharFilter(field_name="cohort_name")
    team = django_filters.CharFilter(field_name="team__name", help_text="Team name.")
    present = django_filters.BooleanFilter(
        field_name="deleted_at", lookup_expr="isnull", help_text="Not deleted upstream."
    )

    class Meta:
        model = ClusterQueue
        fields = ["cluster", "name", "cohort", "team", "present"]


class LocalQueueFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name", help_text="Cluster name.")
    namespace = django_filters.CharFilter()
    name = django_filters.CharFilter()
    queue = django_filters.CharFilter(
        field_name="cluster_queue_name", help_text="ClusterQueue name."
    )
    team = django_filters.CharFilter(field_name="cluster_queue__team__name")
    present = django_filters.BooleanFilter(
        field_name="deleted_at", lookup_expr="isnull", help_text="Not deleted upstream."
    )

    class Meta:
        model = LocalQueue
        fields = ["cluster", "namespace", "name", "queue", "team", "present"]


class WorkloadFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name", help_text="Cluster name.")
    state = django_filters.MultipleChoiceFilter(choices=WorkloadState.choices)
    team = django_filters.CharFilter(
        field_name="cluster_queue__team__name", help_text="Team name (via the ClusterQueue)."
    )
    queue = django_filters.CharFilter(
        field_name="cluster_queue__name", help_text="ClusterQueue name."
    )
    local_queue = django_filters.CharFilter(field_name="queue_name", help_text="LocalQueue name.")
    namespace = django_filters.CharFilter()
    borrowing = django_filters.BooleanFilter()
    since = UtcIsoDateTimeFilter(
        method="filter_since",
        help_text=(
            "Workloads still around at or after this instant: not finished and not deleted "
            "before it (ISO 8601)."
        ),
    )

    class Meta:
        model = Workload
        fields = ["cluster", "state", "team", "queue", "local_queue", "namespace", "borrowing"]

    def filter_since(self, queryset: QuerySet, name: str, value: object) -> QuerySet:
        return queryset.filter(
            Q(finished_at__isnull=True) | Q(finished_at__gte=value),
            Q(deleted_at__isnull=True) | Q(deleted_at__gte=value),
        )
