"""What Prometheus would answer the collector about the simulated fleet for one window.

DCGM ``avg_over_time`` / ``count_over_time`` vectors as dcgm-exporter labels them under the GPU
Operator (the workload pod in ``exported_namespace`` / ``exported_pod``, one series per holder of
a time-sliced GPU, MIG instances with ``GPU_I_PROFILE`` / ``GPU_I_ID``, no GPU_UTIL on MIG, no
SM_ACTIVE on the nodes that do not export it, nothing from a node whose exporter stopped), and the
kube-state-metrics GPU requests and ``kube_pod_labels`` of the Running pods. The ``simulate``
command hands them to the real ``fleet.ingest.build_window``.
"""

from __future__ import annotations

import math
import random

from core.timewindows import Window
from demo.simulation.scenario import (
    SimFleet,
    SimGpu,
    SimWorkload,
    local_queue_name,
    pod_uid,
    stable_uid,
)

SCRAPE_SECONDS = 15
DRIVER_VERSION = "580.95.05"


def _noise(seed: int, gpu: SimGpu, window: Window, salt: str) -> float:
    """Noise in [-1, 1], the same for one seed, GPU, window and metric."""
    rng = random.Random(f"{seed}/{gpu.uuid}/{gpu.gi_id}/{window.end.timestamp()}/{salt}")
    return rng.uniform(-1.0, 1.0)


def window_answers(fleet: SimFleet, window: Window) -> dict[str, list[dict]]:
    """The Prometheus answers the collector would get for ``window`` (vector result items).

    Keys: the DCGM metric keys of ``fleet.constants.DCGM_METRICS`` prefixed ``avg:`` and
    ``count:``, plus ``gpu_requests`` and ``pod_labels``.
    """
    ts = window.end.timestamp()
    samples = str(max(1, window.seconds // SCRAPE_SECONDS))
    answers: dict[str, list[dict]] = {"gpu_requests": [], "pod_labels": []}
    by_pod = {w.holder(pod): w for w in fleet.workloads if w.holding for pod in w.placement}
    for node in fleet.nodes:
        if not node.has_telemetry(window.end):
            continue
        exporter_pod = "nvidia-dcgm-exporter-" + stable_uid(fleet.seed, node.name)[:5]
        for gpu in node.gpus:
            holders = gpu.holders or [""]
            for holder in holders:
                labels = {
                    "gpu": str(gpu.index),
                    "UUID": gpu.uuid,
                    "pci_bus_id": gpu.pci_bus_id,
                    "device": f"nvidia{gpu.index}",
                    "modelName": gpu.model,
                    "Hostname": node.name,
                    "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
                    "container": "nvidia-dcgm-exporter",
                    "namespace": "gpu-operator",
                    "pod": exporter_pod,
                    "instance": f"{node.name}:9400",
                    "job": "nvidia-dcgm-exporter",
                }
                if gpu.profile:
                    labels["GPU_I_PROFILE"] = gpu.profile
                    labels["GPU_I_ID"] = gpu.gi_id
                workload = by_pod.get(holder)
                if holder and workload is not None:
                    namespace, pod = holder.split("/", 1)
                    labels["exported_namespace"] = namespace
                    labels["exported_pod"] = pod
                    labels["exported_container"] = "main"
                values = _gpu_values(fleet.seed, gpu, workload, window)
                for key, value in values.items():
                    if key == "sm_active" and not node.exports_sm_active:
                        continue
                    answers.setdefault(f"avg:{key}", []).append(
                        {"metric": dict(labels), "value": [ts, repr(value)]}
                    )
                    answers.setdefault(f"count:{key}", []).append(
                        {"metric": dict(labels), "value": [ts, samples]}
                    )
    for workload in fleet.workloads:
        if not workload.holding:
            continue
        for pod, gpus in workload.placement.items():
            uid = pod_uid(fleet.seed, workload.namespace, pod)
            ksm_resource = workload.resource.replace("nvidia.com/", "nvidia_com_")
            ksm_resource = ksm_resource.replace("-", "_").replace(".", "_")
            answers["gpu_requests"].append(
                {
                    "metric": {
                        "namespace": workload.namespace,
                        "pod": pod,
                        "uid": uid,
                        "resource": ksm_resource,
                        "node": gpus[0].node.name,
                    },
                    "value": [ts, str(workload.gpus_per_pod)],
                }
            )
            answers["pod_labels"].append(
                {
                    "metric": {
                        "__name__": "kube_pod_labels",
                        "namespace": workload.namespace,
                        "pod": pod,
                        "uid": uid,
                        "label_kueue_x_k8s_io_cluster_queue_name": workload.team,
                        "label_kueue_x_k8s_io_local_queue_name": local_queue_name(workload.team),
                    },
                    "value": [ts, "1"],
                }
            )
    return answers


def _gpu_values(seed: int, gpu: SimGpu, workload: SimWorkload | None, window: Window) -> dict:
    """What DCGM reports for one GPU over the window, from its workload's activity profile."""
    if workload is None:
        sm = 0.0
        util = 0.0
        fb = 0.0
        tensor = 0.0
    else:
        # A daily rhythm for serving, a slow drift for training, noise for everything.
        hour = window.end.hour + window.end.minute / 60
        rhythm = 1.0 + (0.25 * math.sin((hour - 9) / 24 * 2 * math.pi) if workload.gpu_util else 0)
        sm = workload.sm_active * rhythm * (1 + 0.08 * _noise(seed, gpu, window, "sm"))
        sm = min(1.0, max(0.0, sm))
        tensor = sm * workload.tensor_ratio
        base_util = workload.gpu_util if workload.gpu_util is not None else min(100.0, sm * 118)
        util = min(100.0, max(0.0, base_util + 3 * _noise(seed, gpu, window, "util")))
        fb = 18000.0 + 55000.0 * min(1.0, workload.sm_active + 0.3)
        if gpu.profile:
            fb = fb * gpu.slices / 7
    values = {
        "sm_active": round(sm, 6),
        "pipe_tensor_active": round(tensor, 6),
        "dram_active": round(sm * 0.55, 6),
        "gr_engine_active": round(min(1.0, sm * 1.08), 6),
        "fb_used": round(fb, 1),
    }
    if not gpu.profile:  # DCGM does not report GPU_UTIL on MIG instances.
        values["gpu_util"] = round(util, 1)
    return values


def kueue_answers(fleet: SimFleet, window: Window) -> dict[str, list[dict]]:
    """What Kueue's own metrics (``metrics.enableClusterQueueResources``) say at the window's
    end, as answers to ``quotas.constants.KUEUE_QUERIES``: each team's ClusterQueue quota
    (``+Inf`` for an unset limit), usage and reservation per GPU flavor (and per MIG resource
    of the MIG flavor), pending GPUs and
    workloads, admitted workloads, and its cohort."""
    from demo.simulation.scenario import MIG_QUOTA, TEAMS

    ts = window.end.timestamp()

    def item(labels: dict[str, str], value: float | str) -> dict:
        return {"metric": labels, "value": [ts, str(value)]}

    answers: dict[str, list[dict]] = {
        name: []
        for name in (
            "nominal",
            "borrowing_limit",
            "lending_limit",
            "usage",
            "reservation",
            "resource_pending",
            "pending_workloads",
            "admitted_workloads",
            "info",
        )
    }
    for team, (_namespace, cohort, quotas) in TEAMS.items():
        mine = [w for w in fleet.workloads if w.team == team and w.created <= fleet.now]
        for flavor, (nominal, borrow, lend) in quotas.items():
            labels = {"cluster_queue": team, "cohort": cohort, "flavor": flavor}
            held = fleet.held_gpus(team, flavor)
            answers["nominal"].append(item(labels, nominal))
            answers["borrowing_limit"].append(item(labels, "+Inf" if borrow is None else borrow))
            answers["lending_limit"].append(item(labels, "+Inf" if lend is None else lend))
            answers["usage"].append(item(labels, held))
            answers["reservation"].append(item(labels, held))
        if team == "platform":
            # The MIG quota, in instances per profile, as the ClusterQueue's spec and status.
            for resource, nominal in MIG_QUOTA.items():
                labels = {
                    "cluster_queue": team,
                    "cohort": cohort,
                    "flavor": "a100-mig",
                    "resource": resource,
                }
                held = sum(w.gpus for w in mine if w.holding and w.resource == resource)
                answers["nominal"].append(item(labels, nominal))
                answers["usage"].append(item(labels, held))
                answers["reservation"].append(item(labels, held))
        waiting = [w for w in mine if w.admitted_at is None and w.finished_at is None]
        pending_gpus = sum(w.gpus for w in waiting if w.resource == "nvidia.com/gpu")
        queue = {"cluster_queue": team}
        answers["resource_pending"].append(item(queue, pending_gpus))
        answers["pending_workloads"].append(item(queue, len(waiting)))
        answers["admitted_workloads"].append(item(queue, sum(1 for w in mine if w.holding)))
        answers["info"].append(
            item({"cluster_queue": team, "parent_cohort": cohort, "root_cohort": cohort}, 1)
        )
    return answers
