"""The figures of a rollup row (docs/architecture.md "Figures") and the per-window sums they are
built from.

A row's GPU-hours are ``gpus × window seconds / 3600``:

- ``capacity_gpu_hours``: Σ ``capacity_gpus`` GPU-hours, on fleet, node and flavor rows only
  (MIG instances are already slices/7 on usage rows; the extra rows of a time-sliced GPU carry 0).
- ``allocated_gpu_hours``: allocated rows. ``telemetry_gpu_hours``: allocated rows whose
  ``activity`` is not null; ``active_gpu_hours`` = Σ activity × GPU-hours over those.
- ``idle_gpu_hours``: allocated rows with ``activity < GPULEDGER_IDLE_THRESHOLD``. A row without
  telemetry is "no data" and never idle.
- ``shared_gpu_hours``: allocated time-sliced rows. ``fallback_gpu_hours``: telemetry GPU-hours
  whose activity came from GR_ENGINE_ACTIVE.
- ``tensor_active_gpu_hours`` / ``tensor_covered_gpu_hours``: Σ PIPE_TENSOR_ACTIVE × GPU-hours /
  GPU-hours, over allocated rows that report it; ``gpu_util_gpu_hours`` /
  ``gpu_util_covered_gpu_hours`` likewise with GPU_UTIL / 100.
- ``busy_not_working_gpu_hours``: allocated GPU-hours with ``gpu_util >= GPULEDGER_BUSY_GPU_UTIL``
  (default 50) while ``sm_active < GPULEDGER_BUSY_SM_ACTIVE`` (default 0.2). Only SM_ACTIVE counts:
  a row whose activity came from GR_ENGINE_ACTIVE has no SM_ACTIVE and is never "busy but not
  working" (GR_ENGINE_ACTIVE, like GPU_UTIL, only says a kernel ran).
- ``peak_allocated_gpus``: the largest allocated GPUs of the row's group (and flavor / GPU model)
  in any one window of the hour. ``windows``: distinct windows rolled into the row; on rows that
  also carry queue samples, the larger of the usage and the sample window counts.
- ``nominal_gpu_hours``, ``borrowed_gpu_hours``, ``lent_gpu_hours``: Σ value ×
  ``window_seconds`` / 3600 over the ``nvidia.com/gpu`` samples (from the API server's status,
  or Kueue's metrics for windows the sync did not sample), on cluster_queue rows and summed to
  team (``ClusterQueue.team``), cohort (``ClusterQueue.cohort``; ``(no cohort)`` for a
  standalone queue), flavor and fleet rows. MIG quota resources are in MIG-instance units, not
  GPUs, and are left out. Namespace, local_queue, workload and node rows carry none of these:
  Kueue reports quota per ClusterQueue.
- ``pending_gpu_hours``: GPUs requested × hours waited, from each Workload's waiting intervals
  (``ledger.rollup.pending``), on workload, namespace, local_queue, cluster_queue, cohort, team,
  flavor and fleet rows alike.

The per-row rule of each usage figure is its entry in ``ledger.figures.FIGURES``. Both usage
paths first sum each window's rows into the ``f_…`` GPU columns of ``WINDOW_SUMS``
(one per usage figure), then sum those × the window's hours over the hour.
"""

from __future__ import annotations

from ledger.figures import FIGURES, Thresholds, thresholds

__all__ = [
    "QUOTA_FIGURES",
    "SAMPLE_FIGURES",
    "USAGE_FIGURES",
    "WINDOW_SUMS",
    "Thresholds",
    "thresholds",
]

# (usage figure, the per-window GPU sum it is the GPU-hours of), from the registry.
WINDOW_SUMS = tuple((figure.name, figure.column) for figure in FIGURES)
USAGE_FIGURES = tuple(figure for figure, _ in WINDOW_SUMS)
QUOTA_FIGURES = (
    "nominal_gpu_hours",
    "borrowed_gpu_hours",
    "lent_gpu_hours",
    "pending_gpu_hours",
)
# The quota figures summed from ClusterQueue samples; pending comes from waiting intervals.
SAMPLE_FIGURES = QUOTA_FIGURES[:3]
