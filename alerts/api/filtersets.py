"""Query parameters of GET /api/v1/alerts/."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from alerts.choices import Rule, Severity
from alerts.models import Episode
from core.api import UtcIsoDateTimeFilter

STATES = (("open", "Open"), ("resolved", "Resolved"))


class EpisodeFilterSet(django_filters.FilterSet):
    rule = django_filters.MultipleChoiceFilter(choices=Rule.choices)
    severity = django_filters.ChoiceFilter(choices=Severity.choices)
    state = django_filters.ChoiceFilter(
        choices=STATES,
        method="filter_state",
        help_text="open: fired and not resolved; resolved: fired and resolved.",
    )
    team = django_filters.CharFilter(field_name="team__name", help_text="Team name.")
    cluster_queue = django_filters.CharFilter(
        field_name="cluster_queue__name", help_text="ClusterQueue name."
    )
    cluster = django_filters.CharFilter(field_name="cluster__name", help_text="Cluster name.")
    namespace = django_filters.CharFilter()
    start = UtcIsoDateTimeFilter(
        method="filter_start",
        help_text="Episodes still open at or resolved after this instant (overlap with start/end).",
    )
    end = UtcIsoDateTimeFilter(
        method="filter_end", help_text="Episodes that started before this instant."
    )

    class Meta:
        model = Episode
        fields = ["rule", "severity", "state", "team", "cluster_queue", "cluster", "namespace"]

    def filter_state(self, queryset: QuerySet[Episode], name: str, value: str) -> QuerySet[Episode]:
        if value == "open":
            return queryset.filter(resolved_at__isnull=True)
        return queryset.filter(resolved_at__isnull=False)

    def filter_start(
        self, queryset: QuerySet[Episode], name: str, value: object
    ) -> QuerySet[Episode]:
        return queryset.filter(Q(resolved_at__isnull=True) | Q(resolved_at__gt=value))

    def filter_end(
        self, queryset: QuerySet[Episode], name: str, value: object
    ) -> QuerySet[Episode]:
        return queryset.filter(started_at__lt=value)
