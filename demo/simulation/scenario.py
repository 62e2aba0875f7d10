"""The simulated fleet's scenario: teams, queues, flavors, nodes, GPUs and the workload mix.

About 32 nodes × 8 GPUs, two cohorts, six teams:

* 16 H100 nodes, 15 A100 nodes, one A100 node in MIG mode (3g/2g/1g instances), one A100 GPU
  time-sliced between two notebook pods;
* a team (``nlp``) borrowing above its quota for hours with a large pre-training gang;
* (with two days or more) a low-priority ``speech`` job borrowing ``vision``'s idle quota,
  preempted when ``vision`` reclaims it, re-admitted when capacity frees;
* ``batch``'s A100 quota filled by a re-index gang while a dedup job waits hours for it (the
  day the demo's queue objective on ``batch`` is breached);
* an idle notebook holding an A100 for days, a serving deployment that is "busy but not working"
  (GPU_UTIL high, SM_ACTIVE low), two vLLM Deployments with serving metrics in ``ml-serving`` (one
  whose load passes its throughput knee every afternoon, one over-provisioned), a ghost
  reservation (admitted, no pods), a node whose dcgm-exporter stopped reporting, and A100 nodes
  that export GR_ENGINE_ACTIVE but not SM_ACTIVE;
* about 60 more jobs drawn from the seed: gang training, fine-tuning, eval and batch.

``SimFleet`` holds that world and where its clock stands; ``scheduler`` moves it forward, the
``prometheus`` and ``kubernetes`` renderers say what the upstreams would answer about it.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypedDict, Unpack

from core.timewindows import Window, floor_time, windows_between

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


# The namespace of the serving team's inference Deployments (``demo.simulation.serving``).
SERVING_NAMESPACE = TEAMS["serving"][0]


def stable_uid(seed: int, *parts: object) -> str:
    """A stable UUID for one simulated object of one seed."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpuledger-sim/{seed}/" + "/".join(map(str, parts))))


def pod_uid(seed: int, namespace: str, pod: str) -> str:
    """The UID of a pod, as the Pod object and kube-state-metrics both show it."""
    return stable_uid(seed, "pod", namespace, pod)


def local_queue_name(team: str) -> str:
    """Every team submits through one LocalQueue in its namespace."""
    return f"{team}-queue"


@dataclass(frozen=True)
class ServingDeployment:
    """A vLLM Deployment of the scenario and its load model (``demo.simulation.serving``)."""

    name: str
    replicas: int
    capacity: float  # output tokens/s one replica delivers at most
    peak: float  # offered output tokens/s of the whole deployment at the daily peak
    trough: float  # the quietest hour's share of the peak
    peak_hour: float  # UTC
    output_tokens: float = 250.0  # per request
    prompt_tokens: float = 600.0
    sm_active: float = 0.4  # what DCGM shows of its GPUs (the fleet's activity profile)

    def replica_set(self, seed: int) -> str:
        return f"{self.name}-{stable_uid(seed, 'rs', self.name)[:10].replace('-', '')}"

    def pod_names(self, seed: int) -> list[str]:
        return [
            f"{self.replica_set(seed)}-{stable_uid(seed, 'pod', self.name, n)[:5]}"
            for n in range(self.replicas)
        ]

    def offered(self, seed: int, hour: datetime) -> float:
        """Output tokens/s offered to the whole deployment in the hour starting at ``hour``."""
        at = hour.hour + 0.5
        bump = ((1 + math.cos(2 * math.pi * (at - self.peak_hour) / 24)) / 2) ** 2
        noise = random.Random(f"{seed}/{self.name}/{hour.isoformat()}").uniform(-0.04, 0.04)
        return self.peak * (self.trough + (1 - self.trough) * bump) * (1 + noise)


SERVING_DEPLOYMENTS: tuple[ServingDeployment, ...] = (
    ServingDeployment(
        "vllm-llama-8b",
        replicas=1,
        capacity=2400.0,
        peak=3600.0,
        trough=0.47,
        peak_hour=15.0,
        sm_active=0.55,
    ),  # fmt: skip
    ServingDeployment(
        "vllm-qwen-chat",
        replicas=4,
        capacity=1500.0,
        peak=3600.0,
        trough=0.1,
        peak_hour=10.0,
        sm_active=0.06,
    ),  # fmt: skip
)


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

    def holder(self, pod: str) -> str:
        """How a GPU lists this workload's pod among its holders."""
        return f"{self.namespace}/{pod}"

    def pod_names(self) -> list[str]:
        if self.owner_kind == "Pod":
            return [self.owner_name]
        suffix = self.key[5:10] if not self.attempt else f"{self.key[5:9]}{self.attempt}"
        return [f"{self.owner_name}-{i}-{suffix}" for i in range(self.pods)]


class SimFleet:
    """The scenario's nodes and workloads over ``[start, end]``, and where the clock stands."""

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

    def windows(self) -> Iterator[Window]:
        """Every collection window of the simulated period, oldest first."""
        yield from windows_between(self.start, self.end, self.step)

    def held_gpus(self, team: str, flavor: str) -> int:
        """GPUs the team's admitted, unfinished workloads hold in the flavor."""
        return sum(
            w.gpus for w in self.workloads if w.holding and w.team == team and w.flavor == flavor
        )

    def _gpu(self, node: SimNode, index: int, **kwargs: Unpack[SimGpuOptions]) -> SimGpu:
        bus = f"00000000:{0x1B + index * 0x18:02X}:00.0"
        gpu_uuid = "GPU-" + stable_uid(self.seed, node.name, index)[4:]
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
            key=stable_uid(self.seed, "workload", owner).replace("-", "")[:10],
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
        # The inference Deployments with serving metrics: a pod per replica, each its own Kueue
        # Workload (pod integration), as embedding-svc's; they fill the node embedding-svc uses.
        for deployment in SERVING_DEPLOYMENTS:
            for pod in deployment.pod_names(self.seed):
                self._add("serving", "Pod", pod, 1, 1, "h100", "prod-serving",
                          s - timedelta(days=2), ever, deployment.sm_active,
                          tensor_ratio=0.5)  # fmt: skip
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
        # batch's A100 quota (32, no borrowing) taken by a re-index gang: the dedup job that
        # arrives an hour later waits for quota until it ends (the queue's slow day).
        self._add("batch", "Job", "search-reindex", 3, 8, "a100", "batch-high",
                  s + timedelta(days=days * 0.25), 6, 0.64)  # fmt: skip
        self._add("batch", "Job", "corpus-dedup", 2, 8, "a100", "batch-high",
                  s + timedelta(days=days * 0.25, hours=1), 3, 0.58)  # fmt: skip
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
