from django.contrib import admin

from core.admin import ReadOnlyAdmin
from ledger.models import HourlyRollup, PruneRun, RateCard, UsageHolding


@admin.register(UsageHolding)
class UsageHoldingAdmin(ReadOnlyAdmin):
    """Who held which GPU; the per-window figures (``GpuUsage``, a view with a composite key,
    which the admin cannot show) are on the GPU, node and workload pages."""

    list_display = [
        "last_window_end",
        "gpu_key",
        "namespace",
        "pod",
        "gpus",
        "shared",
        "first_window_end",
    ]
    list_filter = ["cluster", "allocated", "shared"]
    search_fields = ["pod", "namespace", "gpu_key"]
    date_hierarchy = "last_window_end"
    show_full_result_count = False
    raw_id_fields = ["gpu", "workload", "local_queue", "cluster_queue", "team"]


@admin.register(HourlyRollup)
class HourlyRollupAdmin(ReadOnlyAdmin):
    list_display = [
        "hour",
        "scope",
        "key",
        "flavor",
        "allocated_gpu_hours",
        "active_gpu_hours",
        "idle_gpu_hours",
        "borrowed_gpu_hours",
    ]
    list_filter = ["scope", "cluster", "flavor"]
    search_fields = ["key"]
    date_hierarchy = "hour"
    show_full_result_count = False
    raw_id_fields = ["team", "cluster_queue", "workload"]


@admin.register(RateCard)
class RateCardAdmin(admin.ModelAdmin):
    """Prices are effective-dated: add a card with a later date instead of editing a used one."""

    list_display = [
        "kind",
        "flavor",
        "gpu_model",
        "price_per_gpu_hour",
        "currency",
        "effective_from",
        "note",
    ]
    list_filter = ["kind", "currency", "flavor", "gpu_model"]
    search_fields = ["flavor", "gpu_model", "note"]
    date_hierarchy = "effective_from"


@admin.register(PruneRun)
class PruneRunAdmin(ReadOnlyAdmin):
    """The retention runs: when, how long, what they deleted and why one failed."""

    list_display = ["started_at", "finished_at", "succeeded", "rows_deleted"]
    list_filter = ["succeeded"]
    date_hierarchy = "started_at"
