"""Admin: the service-level objective of each ClusterQueue is set here (admission records are
written by the sync and read on the pages)."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone

from servicelevels.models import QueueSLO
from servicelevels.objectives import latest_status


@admin.register(QueueSLO)
class QueueSLOAdmin(admin.ModelAdmin):
    """One objective per ClusterQueue, judged per UTC day: e.g. p95 wait <= 1800 s."""

    list_display = [
        "cluster_queue",
        "statistic",
        "max_wait_seconds",
        "min_admissions",
        "enabled",
        "last_judged_day",
    ]
    list_filter = ["enabled", "statistic", "cluster_queue__cluster"]
    search_fields = ["cluster_queue__name"]
    raw_id_fields = ["cluster_queue"]
    list_select_related = ["cluster_queue", "cluster_queue__cluster"]

    @admin.display(description="last judged day")
    def last_judged_day(self, obj: QueueSLO) -> str:
        found = latest_status(obj, timezone.now())
        if found is None:
            return "none judged in the last week"
        return f"{found.day:%Y-%m-%d}: {found.label}"
