"""DCGM series -> GPUs and (GPU, pod) series with their averaged metrics and sample counts.

A GPU is (host, UUID, GPU_I_ID); on MIG the instance's profile gives its share of the GPU. The
pod labels are the ``exported_*`` ones or the plain ones, by the answer's label style.
"""

from __future__ import annotations

from typing import Any

from core.mig import MIG_COMPUTE_SLICES, mig_slices
from fleet import constants as c
from fleet.choices import PodLabelStyle
from fleet.ingest.rows import GpuRow, IngestStats, WindowInput
from fleet.ingest.samples import label_sort_key, parse_samples
from fleet.models import gpu_key


def detect_label_style(items: list[dict]) -> str:
    """'exported' if any series has exported_pod/exported_namespace, else 'plain'."""
    for item in items:
        metric = item.get("metric") if isinstance(item, dict) else None
        if isinstance(metric, dict) and (
            c.LABEL_EXPORTED_POD in metric or c.LABEL_EXPORTED_NAMESPACE in metric
        ):
            return PodLabelStyle.EXPORTED
    return PodLabelStyle.PLAIN


def resolve_style(inp: WindowInput) -> str:
    """The window's label style: the cluster's setting, else detected from the DCGM answers."""
    if inp.label_style in (PodLabelStyle.EXPORTED, PodLabelStyle.PLAIN):
        return str(inp.label_style)
    for items in inp.dcgm_avg.values():
        if isinstance(items, list) and detect_label_style(items) == PodLabelStyle.EXPORTED:
            return PodLabelStyle.EXPORTED
    return PodLabelStyle.PLAIN


class DcgmSeries:
    """One (GPU, pod) series across the DCGM metrics of a window.

    A plain class with slots rather than a dataclass: a 50,000-GPU window makes 50,000 of these,
    and their construction showed in bench/ingest_pure.py's profile.
    """

    __slots__ = (
        "gpu",
        "namespace",
        "pod",
        "container",
        "values",
        "chosen",
        "counts",
        "count_chosen",
    )

    def __init__(self, gpu: str, namespace: str, pod: str, container: str) -> None:
        self.gpu = gpu
        self.namespace = namespace
        self.pod = pod
        self.container = container
        self.values: dict[str, float] = {}
        # metric key -> labels of the chosen item, kept to break ties between duplicates.
        self.chosen: dict[str, dict] = {}
        self.counts: dict[str, float] = {}
        self.count_chosen: dict[str, dict] = {}


def _register_gpu(
    metric: dict,
    key: str,
    host: str,
    uuid: str,
    gi_id: Any,
    stats: IngestStats,
    gpus: dict[str, GpuRow],
) -> bool:
    """Add the GPU a series names to ``gpus``; False after counting why it cannot be."""
    profile = ""
    slices = MIG_COMPUTE_SLICES
    if gi_id:
        profile = metric.get(c.LABEL_GPU_INSTANCE_PROFILE) or ""
        parsed = mig_slices(profile) if isinstance(profile, str) else None
        if parsed is None:
            stats.skip("invalid_mig_profile")
            return False
        slices = parsed
    index_label = metric.get(c.LABEL_GPU_INDEX)
    index = int(index_label) if isinstance(index_label, str) and index_label.isdigit() else 0
    gpus[key] = GpuRow(
        host=host,
        uuid=uuid,
        gi_id=str(gi_id),
        index=index,
        model_name=str(metric.get(c.LABEL_MODEL_NAME) or ""),
        pci_bus_id=str(metric.get(c.LABEL_PCI_BUS_ID) or ""),
        mig_profile=profile,
        slices=slices,
    )
    return True


def collect_dcgm(
    inp: WindowInput,
    style: str,
    stats: IngestStats,
) -> tuple[dict[str, GpuRow], dict[tuple[str, str, str], DcgmSeries]]:
    ns_label, pod_label, container_label = c.POD_LABELS_BY_STYLE[style]
    first_host, *other_hosts = c.LABEL_HOSTNAMES
    gpus: dict[str, GpuRow] = {}
    series: dict[tuple[str, str, str], DcgmSeries] = {}
    skip = stats.skip

    # Called once per item (250,000 for 50,000 GPUs x 5 metrics): one function, local names.
    def identify(metric: dict, register: bool) -> tuple[str, str, str] | None:
        """(GPU key, namespace, pod) of a series, registering a new GPU; None after counting
        why it was skipped. With ``register=False`` (sample counts) an unknown GPU is None
        without a count: counts attach to averages."""
        uuid = metric.get(c.LABEL_UUID)
        if not uuid or not isinstance(uuid, str):
            skip("missing_uuid")
            return None
        host = metric.get(first_host) or ""
        if not host:
            for name in other_hosts:
                host = metric.get(name) or ""
                if host:
                    break
        if not host or not isinstance(host, str):
            skip("missing_host")
            return None
        gi_id = metric.get(c.LABEL_GPU_INSTANCE_ID) or ""
        key = gpu_key(host, uuid, str(gi_id))
        if key not in gpus and (
            not register or not _register_gpu(metric, key, host, uuid, gi_id, stats, gpus)
        ):
            return None
        pod = metric.get(pod_label) or ""
        namespace = metric.get(ns_label) or ""
        if pod and not namespace:
            skip("pod_without_namespace")
            return None
        return key, str(namespace), str(pod)

    for metric_key in c.DCGM_METRICS:
        items = inp.dcgm_avg.get(metric_key) or []
        if not isinstance(items, list):
            skip("malformed_metric_result")
            continue
        stats.records_read += len(items)
        for metric, value in parse_samples(items, stats):
            ident = identify(metric, True)
            if ident is None:
                continue
            entry = series.get(ident)
            if entry is None:
                pod = ident[2]
                container = str(metric.get(container_label) or "") if pod else ""
                entry = series[ident] = DcgmSeries(ident[0], ident[1], pod, container)
            if not _first_of_duplicates(entry.chosen, metric_key, metric, stats):
                continue
            if value is None:
                entry.values.pop(metric_key, None)
            else:
                entry.values[metric_key] = value

    for metric_key, items in (inp.dcgm_count or {}).items():
        if metric_key not in c.DCGM_METRICS or not isinstance(items, list):
            skip("malformed_metric_result")
            continue
        stats.records_read += len(items)
        for metric, value in parse_samples(items, stats):
            if value is None:
                continue
            if value < 0:
                skip("negative_count")
                continue
            ident = identify(metric, False)
            if ident is None:
                continue
            entry = series.get(ident)
            if entry is None:
                # Samples counted but none averaged (all NaN): no telemetry, nothing to attach to.
                continue
            if _first_of_duplicates(entry.count_chosen, metric_key, metric, stats):
                entry.counts[metric_key] = value
    return gpus, series


def _first_of_duplicates(
    chosen: dict[str, dict], metric_key: str, metric: dict, stats: IngestStats
) -> bool:
    """Whether ``metric`` is the series kept for ``metric_key`` (then recorded in ``chosen``).
    Of two series for one GPU, pod and metric (two scrape jobs, a relabelled copy) the one whose
    sorted labels come first is kept, whatever the answer's order; each duplicate is counted."""
    previous = chosen.get(metric_key)
    if previous is not None:
        stats.skip("duplicate_series")
        if label_sort_key(metric) >= label_sort_key(previous):
            return False
    chosen[metric_key] = metric
    return True
