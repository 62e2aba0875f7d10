from django.db import models


class RollupScope(models.TextChoices):
    """The groups hourly rollups are kept for (docs/architecture.md "Figures")."""

    FLEET = "fleet", "Fleet (cluster)"
    NODE = "node", "Node"
    FLAVOR = "flavor", "Resource flavor"
    TEAM = "team", "Team"
    COHORT = "cohort", "Cohort"
    CLUSTER_QUEUE = "cluster_queue", "ClusterQueue"
    LOCAL_QUEUE = "local_queue", "LocalQueue"
    NAMESPACE = "namespace", "Namespace"
    WORKLOAD = "workload", "Workload"


class RateKind(models.TextChoices):
    """What a rate card prices (README "Rate cards and chargeback models")."""

    ALLOCATED = "allocated", "Allocated (usage model) / nominal quota (quota model)"
    BORROWING = "borrowing", "Borrowed GPU-hours (quota model)"
    LENDING = "lending", "Lending credit per lent GPU-hour (quota model)"
