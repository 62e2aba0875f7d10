"""A simulated GPU fleet that speaks the real upstream formats (for the demo and tests).

The simulator plays a small Kueue: workloads arrive, are admitted against their ClusterQueue's
nominal quota plus what the cohort can lend, run on concrete GPUs, finish, and one of them is
preempted by a reclaiming queue and re-admitted later. At any moment it can render

* what Prometheus would answer for a collection window (DCGM ``avg_over_time`` / ``count_over_time``
  vectors, kube-state-metrics GPU requests of Running pods, ``kube_pod_labels``), and
* what the Kubernetes API server would LIST (v1beta2 Kueue objects, Pods, Nodes),

so the ``simulate`` command can hand them to the same pure ingest functions the collectors use.
Everything is deterministic for a seed and an end time. Nothing here touches the database.

The scenario (about 32 nodes × 8 GPUs, two cohorts, six teams):

* 16 H100 nodes, 15 A100 nodes, one A100 node in MIG mode (3g/2g/1g instances), one A100 GPU
  time-sliced between two notebook pods;
* a team (``nlp``) borrowing above its quota for hours with a large pre-training gang;
* (with two days or more) a low-priority ``speech`` job borrowing ``vision``'s idle quota,
  preempted when ``vision`` reclaims it, re-admitted when capacity frees;
* an idle notebook holding an A100 for days, a serving deployment that is "busy but not working"
  (GPU_UTIL high, SM_ACTIVE low), a ghost reservation (admitted, no pods), a node whose
  dcgm-exporter stopped reporting, and A100 nodes that export GR_ENGINE_ACTIVE but not SM_ACTIVE.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypedDict, Unpack

from core.timewindows import Window, floor_time, windows_between

SCRAPE_SECONDS = 15
DRIVER_VERSION = "580.95.05"
TEAM_LABEL = "gpuledger.io/team"
POOL_LABEL = "nodepool"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"
A100_PRODUCT = "NVIDIA-A100-SXM4-80GB"
H100_MODEL = "NVIDIA H100 80GB HBM3"
A100_MODEL = "NVIDIA A100-SXM4-80GB"

PRIORITY_CLASSES = {
    "prod-serving": 10000,
    "batch-high": 1000,
    "research-default": 500,
    "research-low": 100,
}

# team -> (namespace, cohort, {flavor: (nominal, borrowing limit, lending limit)})
TEAMS: dict[str, tuple[str, str, dict[str, tuple[int, int | None, int | None]]]] = {
    "nlp": ("nlp", "research", {"h100": (40, 24, 16), "a100": (24, 16, 8)}),
    "vision": ("vision", "research", {"h100": (24, 16, 8), "a100": (32, 16, 16)}),
    "speech": ("speech", "research", {"h100": (16, 16, 8), "a100": (16, 8, 8)}),
    "serving": ("ml-serving", "prod", {"h100": (40, 8, 8), "a100": (8, None, 4)}),
    "batch": ("ml-batch", "prod", {"h100": (8, 16, 4), "a100": (32, 0, 8)}),
    "platform": ("platform", "prod", {"a100": (8, 0, 4)}),
}
# The MIG flavor's quota, in MIG devices per profile (Kueue counts each resource separately).
MIG_QUOTA = {
    "nvidia.com/mig-1g.10gb": 16,
    "nvidia.com/mig-2g.20gb": 2,
    "nvidia.com/mig-3g.40gb": 14,
}


def _uid(seed: int, *parts: object) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpuledger-sim/{seed}/" + "/".join(map(str, parts))))


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class SimGpu:
    """A whole GPU or a MIG GPU instance as dcgm-exporter reports it."""

    node: SimNode
    index: int
    uuid: str
    pci_bus_id: str
    model: str
    gi_id: str = ""
    profile: str = ""
    time_sliced: bool = False
    holders: list[str] = field(default_factory=list)  # pod keys "ns/pod"

    @property
    def slices(self) -> int:
        return int(self.profile.split("g", 1)[0]) if self.profile else 7

    @property
    def resource(self) -> str:
        return f"nvidia.com/mig-{self.profile}" if self.profile else "nvidia.com/gpu"


class SimGpuOptions(TypedDict, total=False):
    """The optional :class:`SimGpu` fields, as keyword arguments."""

    gi_id: str
    profile: str
    time_sliced: bool
    holders: list[str]


@dataclass
class SimNode:
    name: str
    flavor: str
    product: str
    model: str
    pool: str
    exports_sm_active: bool = True
    telemetry_lost_at: datetime | None = None
    gpus: list[SimGpu] = field(default_factory=list)

    def has_telemetry(self, at: datetime) -> bool:
        return self.telemetry_lost_at is None or at <= self.telemetry_lost_at


@dataclass
class SimWorkload:
    """A Kueue Workload and its pods, with the activity profile its GPUs show."""

    key: str
    team: str
    owner_kind: str
    owner_name: str
    pods: int
    gpus_per_pod: int
    flavor: str
    priority_class: str
    created: datetime
    run_seconds: int
    sm_active: float
    tensor_ratio: float = 0.6
    gpu_util: float | None = None
    resource: str = "nvidia.com/gpu"
    ghost: bool = False
    time_slice_gpu: bool = False
    # Runtime state.
    admitted_at: datetime | None = None
    ran_seconds: int = 0
    finished_at: datetime | None = None
    history: list[dict] = field(default_factory=list)
    placement: dict[str, list[SimGpu]] = field(default_factory=dict)
    pod_started: dict[str, datetime] = field(default_factory=dict)
    evict_at: datetime | None = None
    evicted_by: SimWorkload | None = None
    # Bumped on eviction: the job controller re-creates its pods with new names and UIDs.
    attempt: int = 0

    @property
    def namespace(self) -> str:
        return TEAMS[self.team][0]

    @property
    def name(self) -> str:
        prefix = {"Job": "job", "JobSet": "jobset", "LeaderWorkerSet": "leaderworkerset"}.get(
            self.owner_kind, "pod"
        )
        return f"{prefix}-{self.owner_name}-{self.key[:5]}"

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod

    @property
    def holding(self) -> bool:
        return self.admitted_at is not None and self.finished_at is None

    def pod_names(self) -> list[str]:
        if self.owner_kind == "Pod":
            return [self.owner_name]
        suffix = self.key[5:10] if not self.attempt else f"{self.key[5:9]}{self.attempt}"
        return [f"{self.owner_name}-{i}-{suffix}" for i in range(self.pods)]


class FleetSimulator:
    """Plays the scenario forward window by window; see the module docstring."""

    def __init__(self, seed: int, end: datetime, days: float, step_seconds: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.step = step_seconds
        self.end = floor_time(end, step_seconds)
        self.start = self.end - timedelta(days=days)
        self.nodes: list[SimNode] = []
        self.workloads: list[SimWorkload] = []
        self.now = self.start
        # Set whenever a workload is admitted, evicted or finishes: the Kueue side changed.
        self.changed = True
        self._build_nodes()
        self._build_workloads()

    # --- Scenario -------------------------------------------------------------------------

    def _gpu(self, node: SimNode, index: int, **kwargs: Unpack[SimGpuOptions]) -> SimGpu:
        bus = f"00000000:{0x1B + index * 0x18:02X}:00.0"
        gpu_uuid = "GPU-" + _uid(self.seed, node.name, index)[4:]
        return SimGpu(
            node=node, index=index, uuid=gpu_uuid, pci_bus_id=bus, model=node.model, **kwargs
        )

    def _build_nodes(self) -> None:
        lost = self.end - timedelta(hours=36)
        for n in range(1, 17):
            node = SimNode(
                name=f"gpu-node-h100-{n:02d}",
                flavor="h100",
                product=H100_PRODUCT,
                model=H100_MODEL,
                pool="h100-a" if n <= 8 else "h100-b",
                telemetry_lost_at=lost if n == 1 else None,
            )
            node.gpus = [self._gpu(node, i) for i in range(8)]
            self.nodes.append(node)
        for n in range(1, 16):
            node = SimNode(
                name=f"gpu-node-a100-{n:02d}",
                flavor="a100",
                product=A100_PRODUCT,
                model=A100_MODEL,
                pool="a100",
                exports_sm_active=n <= 10,
            )
            node.gpus = [self._gpu(node, i, time_sliced=(n == 15 and i == 7)) for i in range(8)]
            self.nodes.append(node)
        mig = SimNode(
            name="gpu-node-a100-mig-01",
            flavor="a100-mig",
            product=A100_PRODUCT,
            model=A100_MODEL,
            pool="a100-mig",
        )
        layouts = [["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], ["1g.10gb"] * 7]
        layouts += [["3g.40gb", "3g.40gb"]] * 6
        for index, layout in enumerate(layouts):
            base = self._gpu(mig, index)
            for gi, profile in enumerate(layout, start=1):
                mig.gpus.append(
                    SimGpu(
                        node=mig,
                        index=index,
                        uuid=base.uuid,
                        pci_bus_id=base.pci_bus_id,
                        model=A100_MODEL,
                        gi_id=str(gi),
                        profile=profile,
                    )
                )
        self.nodes.append(mig)

    def _add(
        self,
        team: str,
        kind: str,
        owner: str,
        pods: int,
        per_pod: int,
        flavor: str,
        priority: str,
        created: datetime,
        hours: float,
        sm: float,
        **kw: object,
    ) -> SimWorkload:
        workload = SimWorkload(
            key=_uid(self.seed, "workload", owner).replace("-", "")[:10],
            team=team,
            owner_kind=kind,
            owner_name=owner,
            pods=pods,
            gpus_per_pod=per_pod,
            flavor=flavor,
            priority_class=priority,
            created=floor_time(created, self.step),
            run_seconds=int(hours * 3600),
            sm_active=sm,
            **kw,  # type: ignore[arg-type]
        )
        self.workloads.append(workload)
        return workload

    def _build_workloads(self) -> None:
        s, e = self.start, self.end
        days = (e - s).total_seconds() / 86400
        ever = 10 * 365.0
        # Long-running serving and the scripted cases first.
        self._add("serving", "LeaderWorkerSet", "vllm-llama70b-0", 2, 4, "h100", "prod-serving",
                  s - timedelta(days=3), ever, 0.38, gpu_util=96.0)  # fmt: skip
        self._add("serving", "LeaderWorkerSet", "vllm-llama70b-1", 2, 4, "h100", "prod-serving",
                  s - timedelta(days=3), ever, 0.34, gpu_util=95.0)  # fmt: skip
        for replica in ("k2xqp", "p8wzr", "t5mnb"):
            self._add("serving", "Pod", f"embedding-svc-7c9d8f6b5-{replica}", 1, 1, "h100",
                      "prod-serving", s - timedelta(days=2), ever, 0.09, gpu_util=88.0,
                      tensor_ratio=0.1)  # fmt: skip
        self._add("vision", "Pod", "notebook-dana-0", 1, 1, "a100", "research-default",
                  e - timedelta(days=min(3.0, days * 0.6)), ever, 0.0004, gpu_util=0.0,
                  tensor_ratio=0.0)  # fmt: skip
        for who in ("erin", "frank"):
            self._add("platform", "Pod", f"notebook-{who}-0", 1, 1, "a100", "research-default",
                      s + timedelta(hours=2), ever, 0.18, gpu_util=40.0,
                      time_slice_gpu=True)  # fmt: skip
        self._add("platform", "Job", "ci-gpu-test", 1, 1, "a100-mig", "batch-high",
                  s + timedelta(hours=1), ever, 0.13,
                  resource="nvidia.com/mig-1g.10gb")  # fmt: skip
        self._add("platform", "Job", "feature-extract", 1, 1, "a100-mig", "batch-high",
                  s + timedelta(hours=1), ever, 0.55,
                  resource="nvidia.com/mig-2g.20gb")  # fmt: skip
        self._add("platform", "Job", "embed-index", 2, 1, "a100-mig", "batch-high",
                  s + timedelta(hours=3), ever, 0.31,
                  resource="nvidia.com/mig-3g.40gb")  # fmt: skip
        # nlp borrows above its 40 H100 for most of a day with a 56-GPU pre-training gang.
        self._add("nlp", "JobSet", "llama-pretrain-70b", 7, 8, "h100", "research-default",
                  s + timedelta(days=days * 0.15), 18, 0.82, gpu_util=100.0)  # fmt: skip
        # speech borrows vision's idle H100s; vision reclaims them, speech comes back later.
        mid = s + timedelta(days=days * 0.55)
        speech = self._add("speech", "Job", "asr-finetune-xl", 3, 8, "h100", "research-low",
                           mid, 16, 0.71)  # fmt: skip
        vision = self._add("vision", "Job", "vit-huge-pretrain", 3, 8, "h100",
                           "research-default", mid + timedelta(hours=4), 6, 0.77)  # fmt: skip
        speech.evicted_by = vision
        # A ghost reservation: admitted an hour ago, its pods never started.
        self._add("platform", "Job", "backfill-embeddings", 1, 4, "a100", "batch-high",
                  e - timedelta(minutes=70), ever, 0.0, ghost=True)  # fmt: skip
        # The rest: a realistic mix of gang training, fine-tuning, eval and batch jobs.
        mix = [
            ("nlp", "h100", "research-default", ["bert-distill", "rlhf-reward", "tokenizer-bench"]),
            ("nlp", "a100", "research-low", ["eval-harness", "lora-sweep"]),
            ("vision", "a100", "research-default", ["detr-train", "sam-finetune", "clip-eval"]),
            ("vision", "h100", "research-low", ["diffusion-ablation"]),
            ("speech", "a100", "research-default", ["whisper-ft", "tts-train", "vad-eval"]),
            ("batch", "a100", "batch-high", ["nightly-eval", "ocr-finetune", "doc-embed"]),
            ("batch", "h100", "batch-high", ["nightly-train"]),
        ]
        count = 0
        while count < 60:
            team, flavor, priority, names = mix[count % len(mix)]
            base = names[self.rng.randrange(len(names))]
            pods = self.rng.choice([1, 1, 1, 2, 2, 4])
            per_pod = self.rng.choice([1, 2, 4, 8]) if pods == 1 else self.rng.choice([4, 8])
            created = s + timedelta(seconds=self.rng.uniform(0, (e - s).total_seconds() * 0.97))
            self._add(team, "Job", f"{base}-{count:02d}", pods, per_pod, flavor, priority,
                      created, self.rng.uniform(1.0, 20.0), self.rng.uniform(0.35, 0.92),
                      gpu_util=None)  # fmt: skip
            count += 1
        self.workloads.sort(key=lambda w: (w.created, w.key))

    # --- Scheduling -----------------------------------------------------------------------

    def _quota(self, team: str, flavor: str) -> tuple[int, int | None, int | None]:
        return TEAMS[team][2].get(flavor, (0, 0, 0))

    def _usage(self, team: str, flavor: str) -> int:
        return sum(
            w.gpus for w in self.workloads if w.holding and w.team == team and w.flavor == flavor
        )

    def _can_admit(self, workload: SimWorkload) -> bool:
        if workload.flavor == "a100-mig":
            free = self._free_gpus(workload)
            return free is not None
        team, flavor = workload.team, workload.flavor
        nominal, borrow_limit, _ = self._quota(team, flavor)
        used = self._usage(team, flavor)
        if used + workload.gpus > nominal:
            if borrow_limit is not None and used + workload.gpus - nominal > borrow_limit:
                return False
            cohort = TEAMS[team][1]
            lendable = 0
            for other, (_, other_cohort, quotas) in TEAMS.items():
                if other == team or other_cohort != cohort or flavor not in quotas:
                    continue
                o_nominal, _, o_lend = quotas[flavor]
                unused = max(0, o_nominal - self._usage(other, flavor))
                lendable += unused if o_lend is None else min(unused, o_lend)
            borrowed_now = sum(
                max(0, self._usage(o, flavor) - self._quota(o, flavor)[0])
                for o, (_, oc, _) in TEAMS.items()
                if oc == cohort and o != team
            )
            if used + workload.gpus - nominal > lendable - borrowed_now:
                return False
        return self._free_gpus(workload) is not None

    def _free_gpus(self, workload: SimWorkload) -> dict[str, list[SimGpu]] | None:
        """Concrete GPUs for each pod (packing pods onto as few nodes as possible), or None."""
        placement: dict[str, list[SimGpu]] = {}
        taken: set[int] = set()
        for pod in workload.pod_names():
            chosen: list[SimGpu] | None = None
            for node in self.nodes:
                if node.flavor != workload.flavor:
                    continue
                if workload.time_slice_gpu:
                    shared = [g for g in node.gpus if g.time_sliced and len(g.holders) < 2]
                    if shared:
                        chosen = shared[:1]
                        break
                    continue
                free = [
                    g
                    for g in node.gpus
                    if not g.holders
                    and not g.time_sliced
                    and id(g) not in taken
                    and g.resource == workload.resource
                ]
                if len(free) >= workload.gpus_per_pod:
                    chosen = free[: workload.gpus_per_pod]
                    break
            if chosen is None:
                return None
            taken.update(id(g) for g in chosen)
            placement[pod] = chosen
        return placement

    def _event(self, workload: SimWorkload, kind: str, at: datetime, **extra: str) -> None:
        workload.history.append({"kind": kind, "at": at, **extra})
        self.changed = True

    def _release(self, workload: SimWorkload) -> None:
        for pod, gpus in workload.placement.items():
            for gpu in gpus:
                key = f"{workload.namespace}/{pod}"
                if key in gpu.holders:
                    gpu.holders.remove(key)
        workload.placement = {}
        workload.pod_started = {}

    def advance(self, now: datetime) -> None:
        """Move the world to ``now``: finish, preempt, admit, start pods."""
        step = self.step
        for workload in self.workloads:
            if workload.holding and not workload.ghost and workload.pod_started:
                workload.ran_seconds += step
                if workload.ran_seconds >= workload.run_seconds:
                    workload.finished_at = now
                    self._event(workload, "finished", now)
                    self._release(workload)
        # Reclaim: the lender's job arrives and evicts the borrower holding its quota.
        for workload in self.workloads:
            victim_of = workload.evicted_by
            if (
                victim_of is not None
                and workload.holding
                and workload.evict_at is None
                and victim_of.created <= now
                and victim_of.admitted_at is None
            ):
                workload.evict_at = now
                workload.admitted_at = None
                self._event(workload, "evicted", now, preemptor=victim_of.key)
                self._release(workload)
                workload.attempt += 1
        pending = [
            w
            for w in self.workloads
            if w.created <= now and w.admitted_at is None and w.finished_at is None
        ]
        pending.sort(key=lambda w: (-PRIORITY_CLASSES[w.priority_class], w.created, w.key))
        for workload in pending:
            # A requeued workload waits out its backoff before it is considered again.
            if workload.evict_at is not None and now < workload.evict_at + timedelta(hours=1):
                continue
            if not self._can_admit(workload):
                continue
            placement = self._free_gpus(workload)
            if placement is None:
                continue
            workload.admitted_at = now
            self._event(workload, "admitted", now)
            if workload.ghost:
                continue
            workload.placement = placement
            for pod, gpus in placement.items():
                for gpu in gpus:
                    gpu.holders.append(f"{workload.namespace}/{pod}")
                workload.pod_started[pod] = now
        self.now = now

    def windows(self) -> Iterator[Window]:
        """Every collection window of the simulated period, oldest first."""
        yield from windows_between(self.start, self.end, self.step)

    # --- Prometheus answers ---------------------------------------------------------------

    def _noise(self, gpu: SimGpu, window: Window, salt: str) -> float:
        rng = random.Random(f"{self.seed}/{gpu.uuid}/{gpu.gi_id}/{window.end.timestamp()}/{salt}")
        return rng.uniform(-1.0, 1.0)

    def prometheus_window(self, window: Window) -> dict[str, list[dict]]:
        """The Prometheus answers the collector would get for ``window`` (vector result items).

        Keys: the DCGM metric keys of ``fleet.constants.DCGM_METRICS`` prefixed ``avg:`` and
        ``count:``, plus ``gpu_requests`` and ``pod_labels``.
        """
        ts = window.end.timestamp()
        samples = str(max(1, window.seconds // SCRAPE_SECONDS))
        answers: dict[str, list[dict]] = {"gpu_requests": [], "pod_labels": []}
        by_pod = {
            f"{w.namespace}/{pod}": w for w in self.workloads if w.holding for pod in w.placement
        }
        for node in self.nodes:
            if not node.has_telemetry(window.end):
                continue
            exporter_pod = "nvidia-dcgm-exporter-" + _uid(self.seed, node.name)[:5]
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
                    values = self._gpu_values(gpu, workload, window)
                    for key, value in values.items():
                        if key == "sm_active" and not node.exports_sm_active:
                            continue
                        answers.setdefault(f"avg:{key}", []).append(
                            {"metric": dict(labels), "value": [ts, repr(value)]}
                        )
                        answers.setdefault(f"count:{key}", []).append(
                            {"metric": dict(labels), "value": [ts, samples]}
                        )
        for workload in self.workloads:
            if not workload.holding:
                continue
            for pod, gpus in workload.placement.items():
                uid = _uid(self.seed, "pod", workload.namespace, pod)
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
                            "label_kueue_x_k8s_io_local_queue_name": f"{workload.team}-queue",
                        },
                        "value": [ts, "1"],
                    }
                )
        return answers

    def _gpu_values(self, gpu: SimGpu, workload: SimWorkload | None, window: Window) -> dict:
        if workload is None:
            sm = 0.0
            util = 0.0
            fb = 0.0
            tensor = 0.0
        else:
            # A daily rhythm for serving, a slow drift for training, noise for everything.
            hour = window.end.hour + window.end.minute / 60
            rhythm = 1.0 + (
                0.25 * math.sin((hour - 9) / 24 * 2 * math.pi) if workload.gpu_util else 0
            )
            sm = workload.sm_active * rhythm * (1 + 0.08 * self._noise(gpu, window, "sm"))
            sm = min(1.0, max(0.0, sm))
            tensor = sm * workload.tensor_ratio
            base_util = workload.gpu_util if workload.gpu_util is not None else min(100.0, sm * 118)
            util = min(100.0, max(0.0, base_util + 3 * self._noise(gpu, window, "util")))
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

    # --- Kubernetes API answers -----------------------------------------------------------

    def kube_lists(self, at: datetime) -> dict[str, dict]:
        """LIST payloads per ``quotas.ingest.snapshot_from_lists`` keyword, as of ``at``."""
        version = "kueue.x-k8s.io/v1beta2"

        def listing(kind: str, items: list[dict], api: str = version) -> dict:
            return {
                "apiVersion": api,
                "kind": f"{kind}List",
                "metadata": {"resourceVersion": str(int(at.timestamp()))},
                "items": items,
            }

        created = _iso(self.start - timedelta(days=30))
        flavors = [
            self._flavor("h100", {POOL_LABEL: "h100-a", GPU_PRODUCT_LABEL: H100_PRODUCT}, created),
            self._flavor("a100", {POOL_LABEL: "a100", GPU_PRODUCT_LABEL: A100_PRODUCT}, created),
            self._flavor("a100-mig", {POOL_LABEL: "a100-mig"}, created),
        ]
        # h100 nodes sit in two pools; the flavor selects on the product label only.
        flavors[0]["spec"]["nodeLabels"] = {GPU_PRODUCT_LABEL: H100_PRODUCT}
        cohorts = [
            {
                "apiVersion": version,
                "kind": "Cohort",
                "metadata": {
                    "name": name,
                    "uid": _uid(self.seed, "cohort", name),
                    "creationTimestamp": created,
                },  # fmt: skip
                "spec": {},
            }
            for name in ("research", "prod")
        ]
        queues = [self._cluster_queue(team, created) for team in TEAMS]
        local_queues = [self._local_queue(team, created) for team in TEAMS]
        priority = [
            {
                "apiVersion": version,
                "kind": "WorkloadPriorityClass",
                "metadata": {
                    "name": name,
                    "uid": _uid(self.seed, "wpc", name),
                    "creationTimestamp": created,
                },  # fmt: skip
                "value": value,
                "description": f"{name} priority",
            }
            for name, value in PRIORITY_CLASSES.items()
        ]
        workloads = [self._workload(w, at) for w in self.workloads if w.created <= at]
        pods = [
            self._pod(w, pod, gpus)
            for w in self.workloads
            if w.holding
            for pod, gpus in w.placement.items()
        ]
        nodes = [self._node(node, created) for node in self.nodes]
        return {
            "resource_flavors": listing("ResourceFlavor", flavors),
            "cohorts": listing("Cohort", cohorts),
            "cluster_queues": listing("ClusterQueue", queues),
            "local_queues": listing("LocalQueue", local_queues),
            "workloads": listing("Workload", workloads),
            "workload_priority_classes": listing("WorkloadPriorityClass", priority),
            "pods": listing("Pod", pods, api="v1"),
            "nodes": listing("Node", nodes, api="v1"),
        }

    def _flavor(self, name: str, labels: dict[str, str], created: str) -> dict:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {
                "name": name,
                "uid": _uid(self.seed, "flavor", name),
                "creationTimestamp": created,
            },  # fmt: skip
            "spec": {
                "nodeLabels": labels,
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],  # fmt: skip
            },
        }

    def _cluster_queue(self, team: str, created: str) -> dict:
        namespace, cohort, quotas = TEAMS[team]
        flavors = []
        usage = []
        for flavor, (nominal, borrow, lend) in quotas.items():
            resource: dict[str, str] = {"name": "nvidia.com/gpu", "nominalQuota": str(nominal)}
            if borrow is not None:
                resource["borrowingLimit"] = str(borrow)
            if lend is not None:
                resource["lendingLimit"] = str(lend)
            flavors.append({"name": flavor, "resources": [resource]})
            total = self._usage(team, flavor)
            usage.append(
                {
                    "name": flavor,
                    "resources": [
                        {
                            "name": "nvidia.com/gpu",
                            "total": str(total),
                            "borrowed": str(max(0, total - nominal)),
                        }
                    ],
                }
            )
        groups = [{"coveredResources": ["nvidia.com/gpu"], "flavors": flavors}]
        if team == "platform":
            mig_resources = [{"name": r, "nominalQuota": str(q)} for r, q in MIG_QUOTA.items()]
            groups.append(
                {
                    "coveredResources": list(MIG_QUOTA),
                    "flavors": [{"name": "a100-mig", "resources": mig_resources}],
                }
            )
            mig_usage: dict[str, int] = dict.fromkeys(MIG_QUOTA, 0)
            for w in self.workloads:
                if w.holding and w.team == team and w.resource in mig_usage:
                    mig_usage[w.resource] += w.gpus
            usage.append(
                {
                    "name": "a100-mig",
                    "resources": [
                        {"name": r, "total": str(v), "borrowed": "0"} for r, v in mig_usage.items()
                    ],
                }
            )
        mine = [w for w in self.workloads if w.team == team and w.created <= self.now]
        admitted = sum(1 for w in mine if w.holding)
        pending = sum(1 for w in mine if w.admitted_at is None and w.finished_at is None)
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {
                "name": team,
                "uid": _uid(self.seed, "cq", team),
                "creationTimestamp": created,
                "labels": {TEAM_LABEL: team},
            },
            "spec": {
                "cohortName": cohort,
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "preemption": {
                    "reclaimWithinCohort": "Any",
                    "withinClusterQueue": "LowerPriority",
                    "borrowWithinCohort": {"policy": "Never"},
                },
                "queueingStrategy": "BestEffortFIFO",
                "resourceGroups": groups,
                "stopPolicy": "None",
            },
            "status": {
                "admittedWorkloads": admitted,
                "reservingWorkloads": admitted,
                "pendingWorkloads": pending,
                "flavorsUsage": usage,
                "flavorsReservation": usage,
                "conditions": [
                    {
                        "type": "Active",
                        "status": "True",
                        "reason": "Ready",
                        "message": "Can admit new workloads",
                        "lastTransitionTime": created,
                    },
                ],  # fmt: skip
            },
        }

    def _local_queue(self, team: str, created: str) -> dict:
        namespace = TEAMS[team][0]
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {
                "name": f"{team}-queue",
                "namespace": namespace,
                "uid": _uid(self.seed, "lq", team),
                "creationTimestamp": created,
            },
            "spec": {"clusterQueue": team},
            "status": {},
        }

    def _conditions(self, workload: SimWorkload, at: datetime) -> list[dict]:
        """Kueue's conditions as of ``at``, with Kueue's own resets on re-admission."""
        conditions: dict[str, dict] = {}

        def put(kind: str, status: str, reason: str, message: str, when: datetime) -> None:
            conditions[kind] = {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": _iso(when),
            }

        cq = workload.team
        put("QuotaReserved", "False", "Pending", "insufficient unused quota", workload.created)
        for event in workload.history:
            when = event["at"]
            if when > at:
                break
            if event["kind"] == "admitted":
                put("QuotaReserved", "True", "QuotaReserved",
                    f"Quota reserved in ClusterQueue {cq}", when)  # fmt: skip
                put("Admitted", "True", "Admitted", "The workload is admitted", when)
                for kind in ("Evicted", "Preempted"):
                    if kind in conditions:
                        previous = conditions[kind]["message"]
                        put(kind, "False", "QuotaReserved", f"Previously: {previous}", when)
                if not workload.ghost:
                    ready = when + timedelta(seconds=self.step)
                    if ready <= at:
                        message = "All pods reached readiness and the workload is running"
                        put("PodsReady", "True", "Started", message, ready)
            elif event["kind"] == "evicted":
                preemptor = next(w for w in self.workloads if w.key == event["preemptor"])
                uid = _uid(self.seed, "wl", preemptor.key)
                job_uid = _uid(self.seed, "job", preemptor.key)
                message = (
                    f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to "
                    f"reclamation within the cohort; preemptor path: "
                    f"/{TEAMS[preemptor.team][1]}/{preemptor.team}; "
                    f"preemptee path: /{TEAMS[workload.team][1]}/{workload.team}"
                )
                put("Evicted", "True", "Preempted", message, when)
                put("Preempted", "True", "InCohortReclamation", message, when)
                put("QuotaReserved", "False", "Pending", "Preempted; waiting for quota", when)
                put("Admitted", "False", "NoReservation", "The workload has no reservation", when)
                put("PodsReady", "False", "WaitForStart", "Not all pods are ready", when)
                put("Requeued", "True", "Preempted", message, when)
            elif event["kind"] == "finished":
                put("Finished", "True", "Succeeded", "Job finished successfully", when)
                put("PodsReady", "False", "PodsCompleted", "Pods completed", when)
        return list(conditions.values())

    def _workload(self, workload: SimWorkload, at: datetime) -> dict:
        uid = _uid(self.seed, "wl", workload.key)
        job_uid = _uid(self.seed, "job", workload.key)
        owner_api = {
            "Job": "batch/v1",
            "JobSet": "jobset.x-k8s.io/v1alpha2",
            "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
            "Pod": "v1",
        }[workload.owner_kind]
        if workload.owner_kind == "Pod":
            job_uid = _uid(self.seed, "pod", workload.namespace, workload.owner_name)
        resources = {
            "cpu": str(12 * workload.gpus_per_pod),
            workload.resource: str(workload.gpus_per_pod),
        }
        pod_set = {
            "name": "main",
            "count": workload.pods,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "nvcr.io/nvidia/pytorch:25.08-py3",
                            "resources": {
                                "requests": resources,
                                "limits": {workload.resource: str(workload.gpus_per_pod)},
                            },
                        },
                    ],  # fmt: skip
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 30,
                }
            },
        }
        status: dict = {"conditions": self._conditions(workload, at)}
        holding = workload.admitted_at is not None and workload.admitted_at <= at
        finished = workload.finished_at is not None and workload.finished_at <= at
        if holding or finished:
            total = {"cpu": str(12 * workload.gpus), workload.resource: str(workload.gpus)}
            status["admission"] = {
                "clusterQueue": workload.team,
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": workload.pods,
                        "flavors": {"cpu": workload.flavor, workload.resource: workload.flavor},
                        "resourceUsage": total,
                    }
                ],
            }
        if workload.evict_at is not None and workload.evict_at <= at:
            status["requeueState"] = {
                "count": 1,
                "requeueAt": _iso(workload.evict_at + timedelta(hours=1)),
            }
            status["accumulatedPastExecutionTimeSeconds"] = int(
                (workload.evict_at - (workload.history[0]["at"])).total_seconds()
            )
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": workload.name,
                "namespace": workload.namespace,
                "uid": uid,
                "creationTimestamp": _iso(workload.created),
                "labels": {"kueue.x-k8s.io/job-uid": job_uid},
                "ownerReferences": [
                    {
                        "apiVersion": owner_api,
                        "kind": workload.owner_kind,
                        "name": workload.owner_name,
                        "uid": job_uid,
                        "controller": True,
                    },
                ],  # fmt: skip
            },
            "spec": {
                "active": True,
                "podSets": [pod_set],
                "priority": PRIORITY_CLASSES[workload.priority_class],
                "priorityClassRef": {
                    "group": "kueue.x-k8s.io",
                    "kind": "WorkloadPriorityClass",
                    "name": workload.priority_class,
                },
                "queueName": f"{workload.team}-queue",
            },
            "status": status,
        }

    def _pod(self, workload: SimWorkload, pod: str, gpus: list[SimGpu]) -> dict:
        uid = _uid(self.seed, "pod", workload.namespace, pod)
        job_uid = _uid(self.seed, "job", workload.key)
        owner = (
            []
            if workload.owner_kind == "Pod"
            else [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": workload.owner_name,
                    "uid": job_uid,
                    "controller": True,
                }
            ]  # fmt: skip
        )
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod,
                "namespace": workload.namespace,
                "uid": uid,
                "labels": {
                    "kueue.x-k8s.io/cluster-queue-name": workload.team,
                    "kueue.x-k8s.io/local-queue-name": f"{workload.team}-queue",
                    "kueue.x-k8s.io/podset": "main",
                },
                "annotations": {"kueue.x-k8s.io/workload": workload.name},
                "ownerReferences": owner,
                "creationTimestamp": _iso(workload.pod_started[pod]),
            },
            "spec": {
                "nodeName": gpus[0].node.name,
                "containers": [
                    {
                        "name": "main",
                        "resources": {
                            "requests": {workload.resource: str(workload.gpus_per_pod)},
                            "limits": {workload.resource: str(workload.gpus_per_pod)},
                        },
                    },
                ],  # fmt: skip
            },
            "status": {"phase": "Running", "startTime": _iso(workload.pod_started[pod])},
        }

    def _node(self, node: SimNode, created: str) -> dict:
        whole = [g for g in node.gpus if not g.profile]
        capacity: dict[str, str] = {"cpu": "224", "memory": "2064Gi", "pods": "110"}
        capacity["nvidia.com/gpu"] = str(len(whole) + sum(1 for g in whole if g.time_sliced))
        for gpu in node.gpus:
            if gpu.profile:
                key = f"nvidia.com/mig-{gpu.profile}"
                capacity[key] = str(int(capacity.get(key, "0")) + 1)
        labels = {
            "kubernetes.io/hostname": node.name,
            POOL_LABEL: node.pool,
            GPU_PRODUCT_LABEL: node.product,
            "nvidia.com/gpu.count": str(len({g.index for g in node.gpus})),
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node.name,
                "uid": _uid(self.seed, "node", node.name),
                "labels": labels,
                "creationTimestamp": created,
            },  # fmt: skip
            "spec": {},
            "status": {"capacity": capacity, "allocatable": dict(capacity)},
        }
