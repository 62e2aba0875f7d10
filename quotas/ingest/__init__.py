"""Kueue, Pod and Node LIST payloads -> plain rows. Pure: no database, no network
(docs/conventions.md "Background work").

``snapshot_from_lists`` wraps raw LIST payloads; ``build_snapshot`` turns them into a ``KueueBatch``
of dataclass rows that ``quotas.store.write_snapshot`` upserts; ``build_queue_samples`` and
``cohort_totals`` derive per-window queue figures from a batch.

Both Kueue API versions are read per object by its ``apiVersion``
(docs/architecture.md "Upstream facts"): v1beta1 ``spec.cohort`` / ``priorityClassName`` +
``priorityClassSource`` / ``accumulatedPastExexcutionTimeSeconds`` (the typo is in the API) /
LocalQueue ``flavorUsage``; v1beta2 ``spec.cohortName`` / ``priorityClassRef`` /
``accumulatedPastExecutionTimeSeconds`` / ``flavorsUsage``. A malformed object (missing metadata or
name, wrong types, unknown apiVersion, unparsable quantity or time) is logged, counted in
``stats.skip_reasons`` and left out; the rest of the batch is kept.

The package, by concept (each module's docstring has the readings worth knowing):

* ``rows``: the raw snapshot, the dataclass rows and the batch that holds them;
* ``fields``: typed field readers, quantities and GPU equivalents, metadata, conditions;
* ``resources``: a pod's effective requests by the Kubernetes rule;
* ``queues``: ResourceFlavors, Cohorts, ClusterQueues, LocalQueues and the teams they make;
* ``workloads``: Workloads, their state and transitions, priority classes, borrowing;
* ``pods``: GPU pods joined to their Workload;
* ``nodes``: GPU Nodes and their flavor;
* ``samples``: per-window ClusterQueue samples, lending inference, cohort totals;
* ``snapshot``: LIST payloads -> snapshot -> batch.
"""

from quotas.ingest.fields import Malformed, gpu_equivalent, is_gpu_resource
from quotas.ingest.resources import pod_requests
from quotas.ingest.rows import (
    ClusterQueueRow,
    CohortRow,
    FlavorRow,
    IngestStats,
    KueueBatch,
    KueueSnapshot,
    LocalQueueRow,
    NodeRow,
    ObjectMeta,
    PodRow,
    PriorityClassRow,
    QueueSampleRow,
    QueueUsageRow,
    QuotaRow,
    TeamRow,
    TransitionRow,
    WorkloadRow,
)
from quotas.ingest.samples import build_gpu_queue_samples, build_queue_samples, cohort_totals
from quotas.ingest.snapshot import build_snapshot, snapshot_from_lists
from quotas.ingest.workloads import PENDING_STATES, parse_preemptor

__all__ = [
    "PENDING_STATES",
    "ClusterQueueRow",
    "CohortRow",
    "FlavorRow",
    "IngestStats",
    "KueueBatch",
    "KueueSnapshot",
    "LocalQueueRow",
    "Malformed",
    "NodeRow",
    "ObjectMeta",
    "PodRow",
    "PriorityClassRow",
    "QueueSampleRow",
    "QuotaRow",
    "TeamRow",
    "TransitionRow",
    "QueueUsageRow",
    "WorkloadRow",
    "build_gpu_queue_samples",
    "build_queue_samples",
    "build_snapshot",
    "cohort_totals",
    "gpu_equivalent",
    "is_gpu_resource",
    "parse_preemptor",
    "pod_requests",
    "snapshot_from_lists",
]
