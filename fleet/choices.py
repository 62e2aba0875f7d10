from django.db import models


class PodLabelStyle(models.TextChoices):
    """Which labels on DCGM series name the workload pod (docs/architecture.md "Upstream facts")."""

    AUTO = "auto", "Detect (exported_* when present, else plain)"
    EXPORTED = "exported", "exported_namespace / exported_pod (honor_labels: false)"
    PLAIN = "plain", "namespace / pod (honor_labels: true or direct scrape)"


class PrometheusAuth(models.TextChoices):
    NONE = "none", "None"
    BEARER = "bearer", "Bearer token"
    BASIC = "basic", "Basic auth"


class ActivitySource(models.TextChoices):
    """Which DCGM field a row's activity figure came from."""

    SM_ACTIVE = "sm_active", "DCGM_FI_PROF_SM_ACTIVE"
    GR_ENGINE_ACTIVE = "gr_engine_active", "DCGM_FI_PROF_GR_ENGINE_ACTIVE (fallback)"
    NONE = "none", "No telemetry"


class QuotaSource(models.TextChoices):
    """Which scheduler's objects a cluster's quota sync reads (docs/architecture.md
    "Quota sources"); "" detects it from the API server's discovery."""

    DETECT = "", "Detect (Kueue when served, else Volcano, else KAI, else GPU ResourceQuotas)"
    KUEUE = "kueue", "Kueue"
    VOLCANO = "volcano", "Volcano"
    KAI = "kai", "KAI Scheduler"
    RESOURCEQUOTA = "resourcequota", "ResourceQuota"


class IngestSource(models.TextChoices):
    DCGM = "dcgm", "Prometheus: DCGM + kube-state-metrics"
    # Whichever scheduler the cluster runs (QuotaSource): the sync of its queues and workloads.
    KUEUE = "kueue", "Kubernetes API: queues, workloads, Pods, Nodes"
    SIMULATION = "simulation", "Simulated fleet"
    ROLLUP = "rollup", "Hourly rollup"


class IngestStatus(models.TextChoices):
    RUNNING = "running", "Running"
    SUCCESS = "success", "Success"
    PARTIAL = "partial", "Partial (some records skipped)"
    FAILED = "failed", "Failed"
