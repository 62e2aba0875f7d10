"""Pure DCGM / kube-state-metrics ingest: Prometheus answers in, per-window rows out. No I/O.

The collector (``ledger.collector``) queries Prometheus for one aligned window and hands the
vector items to :func:`build_window`; :mod:`ledger.store` writes the :class:`WindowBatch`.

Rules (docs/architecture.md "Upstream facts" and docs/architecture.md "Figures"):

* A GPU is (host, UUID, GPU_I_ID). On MIG, ``UUID`` is the parent GPU's, so the GPU instance id
  is part of the key; a ``Ng.Mgb`` instance is N/7 of a GPU.
* The workload pod is named by ``exported_namespace/exported_pod/exported_container`` when
  Prometheus scraped with ``honor_labels: false`` (the plain labels then name the exporter pod),
  by plain ``namespace/pod/container`` otherwise. A series with no pod labels is an unallocated GPU.
* activity = SM_ACTIVE, else GR_ENGINE_ACTIVE; no sample is "no data" (None), never idle.
* Several pods on one GPU in a window (time-slicing, or one pod ending and the next starting):
  one row per pod, each with 1/n of the GPU, ``shared``; the physical capacity sits on the first
  row only, so neither capacity nor GPU-hours are double counted.
* Allocation = GPUs requested by Running pods (kube-state-metrics); ``node=""`` is pending and
  holds nothing. A pod with more GPUs requested than DCGM shows gets a row with ``gpu_key=""``
  for the rest (allocated, no telemetry). A pod on DCGM series but absent from the requests is
  still allocated: the exporter only labels a GPU with a pod the kubelet assigned it to, and
  kube-state-metrics is the side more often missing (scrape gaps, pods shorter than its scrape).
* Bad input (malformed items, NaN/±Inf, missing labels, duplicate series) is skipped, counted in
  :class:`IngestStats` and logged; it never raises. Only an unusable top-level payload raises
  :class:`IngestError`.

The package, by concept: ``rows`` (inputs, rows, stats), ``answers`` (the Prometheus envelope,
matrices), ``samples`` (vector items), ``dcgm`` (GPUs and their series, label style),
``kube_state`` (kube-state-metrics requests and pod labels) and ``window`` (``build_window``).
"""

from fleet.ingest.answers import IngestError, parse_query_response, split_matrix
from fleet.ingest.dcgm import detect_label_style
from fleet.ingest.rows import (
    GpuRow,
    IngestStats,
    PodAllocationRow,
    PodOwner,
    UsageRow,
    WindowBatch,
    WindowInput,
)
from fleet.ingest.window import build_window

__all__ = [
    "GpuRow",
    "IngestError",
    "IngestStats",
    "PodAllocationRow",
    "PodOwner",
    "UsageRow",
    "WindowBatch",
    "WindowInput",
    "build_window",
    "detect_label_style",
    "parse_query_response",
    "split_matrix",
]
