from django.contrib import admin

from core.admin import CollectorOwnedAdmin
from fleet.models import (
    Allocation,
    Cluster,
    CollectionCursor,
    Gpu,
    GpuUsage,
    HourlyRollup,
    IngestRun,
    Node,
)


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "prometheus_url", "kube_context", "collect_enabled"]
    search_fields = ["name", "display_name"]
    fieldsets = [
        (None, {"fields": ["name", "display_name", "collect_enabled", "sync_enabled"]}),
        (
            "Prometheus",
            {
                "fields": [
                    "prometheus_url",
                    "prometheus_auth",
                    "prometheus_username",
                    "prometheus_secret_env",
                    "prometheus_ca_bundle",
                    "prometheus_verify_tls",
                    "prometheus_headers",
                    "prometheus_timeout_seconds",
                    "pod_label_style",
                ]
            },
        ),
        ("Kubernetes API", {"fields": ["kube_context", "kube_in_cluster"]}),
    ]


@admin.register(Node)
class NodeAdmin(CollectorOwnedAdmin):
    list_display = ["name", "cluster", "gpu_product", "flavor", "gpu_capacity", "deleted_at"]
    list_filter = ["cluster", "flavor", "gpu_product"]
    search_fields = ["name"]


@admin.register(Gpu)
class GpuAdmin(CollectorOwnedAdmin):
    list_display = ["host", "index", "gi_id", "mig_profile", "model_name", "uuid", "time_sliced"]
    list_filter = ["cluster", "model_name", "time_sliced"]
    search_fields = ["host", "uuid"]
    list_select_related = ["node"]


@admin.register(Allocation)
class AllocationAdmin(CollectorOwnedAdmin):
    list_display = ["namespace", "pod", "node_name", "gpus", "workload", "started_at", "ended_at"]
    list_filter = ["cluster", "namespace"]
    search_fields = ["pod", "namespace"]
    list_select_related = ["workload"]
    raw_id_fields = ["workload", "node", "gpu_devices"]


@admin.register(GpuUsage)
class GpuUsageAdmin(CollectorOwnedAdmin):
    list_display = [
        "window_end",
        "gpu_key",
        "namespace",
        "pod",
        "gpus",
        "activity",
        "activity_source",
        "shared",
    ]
    list_filter = ["cluster", "allocated", "activity_source", "shared"]
    search_fields = ["pod", "namespace", "gpu_key"]
    date_hierarchy = "window_end"
    show_full_result_count = False
    raw_id_fields = ["gpu", "workload", "local_queue", "cluster_queue", "team"]


@admin.register(HourlyRollup)
class HourlyRollupAdmin(CollectorOwnedAdmin):
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


@admin.register(IngestRun)
class IngestRunAdmin(CollectorOwnedAdmin):
    list_display = [
        "started_at",
        "cluster",
        "source",
        "status",
        "window_end",
        "rows_written",
        "skipped",
        "nonfinite_skipped",
    ]
    list_filter = ["source", "status", "cluster"]
    date_hierarchy = "started_at"


@admin.register(CollectionCursor)
class CollectionCursorAdmin(CollectorOwnedAdmin):
    list_display = ["cluster", "source", "last_window_end", "claimed_by", "claimed_until"]
