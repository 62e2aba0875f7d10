from django.contrib import admin

from core.admin import ReadOnlyAdmin
from fleet.models import Cluster, CollectionCursor, Gpu, IngestRun, Node


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
        ("Kubernetes API", {"fields": ["kube_context", "kube_in_cluster", "quota_source"]}),
        (
            "Quota write-back",
            {"fields": ["quota_write_enabled", "quota_write_gitops_allowed"]},
        ),
    ]


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ["name", "cluster", "gpu_product", "flavor", "gpu_capacity", "deleted_at"]
    list_filter = ["cluster", "flavor", "gpu_product"]
    search_fields = ["name"]


@admin.register(Gpu)
class GpuAdmin(ReadOnlyAdmin):
    list_display = ["host", "index", "gi_id", "mig_profile", "model_name", "uuid", "time_sliced"]
    list_filter = ["cluster", "model_name", "time_sliced"]
    search_fields = ["host", "uuid"]
    list_select_related = ["node"]


@admin.register(IngestRun)
class IngestRunAdmin(ReadOnlyAdmin):
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
class CollectionCursorAdmin(ReadOnlyAdmin):
    list_display = ["cluster", "source", "last_window_end", "claimed_by", "claimed_until"]
