"""The ledger before the install: a real Prometheus holding four hours of DCGM,
kube-state-metrics and Kueue series, an API server holding the Kueue objects at "now", then
``sync_cluster`` and ``collect_metrics --start --end``; the chargeback API must give every
queue, cohort, namespace and workload the GPU-hours of the scenario, computed here from the
scenario's own definition (never from the code under test).

Scenario (minutes from START = NOW - 4 h; every event on a 5-minute boundary; 3 nodes x 8 H100):

  cohort research: team-a (nominal 8, no limits), team-b (nominal 8, lendingLimit 6)
  standalone:      solo   (nominal 4)
  train   ns-a  team-a  Job train, 3 pods x 4 GPUs, running [0, 60), finished at 60: team-a
                        borrows 4 (team-b lends them)                               SM 0.9
  sweep   ns-b  team-b  Job sweep, 1 pod x 4, running [0, 60), preempted at 60, waits
                        [60, 150), admitted again, a new pod runs [150, 240). The first pod is
                        gone from the API server: only kube-state-metrics history knows it,
                        and only through kube_pod_info{created_by_*} (no kube_pod_owner)     SM 0.6
  gang    ns-b  team-b  Job gang, 2 pods x 4, admitted at 60 (holds quota) but its pods are
                        Pending with node="" until 120, running [120, 240)             SM 0.3
                        team-b then uses 12 > 8 during [150, 240): borrows 4, team-a lends
  big     ns-a  team-a  Job big, 1 pod x 16, created at 180, waits until now (only waited)
  solo    ns-s  solo    Job solo, 1 pod x 2, running [0, 240)                           SM 0.1
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from core.timewindows import hour_floor
from fleet.models import Cluster
from ledger.collector import Collector
from ledger.models import HourlyRollup
from ledger.rollup import roll_up_range
from quotas.choices import SampleSource
from quotas.models import ClusterQueueSample
from quotas.sync import sync_cluster
from tests.kube_api_server import KIND_TO_PLURAL, FakeKubeAPI
from tests.prometheus_server import (
    OpenMetricsWriter,
    PrometheusServer,
    copy_tsdb,
    create_blocks,
)

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW_SECONDS = 300
SCRAPE = 60
# Samples sit 30 s before each minute: a window (T - 300 s, T] sees exactly the state of its
# own five minutes, and a pod or gauge that stopped is out of the 5-minute lookback by the next
# window's end.
OFFSET = 30
NOW = hour_floor(timezone.now() - timedelta(minutes=3))
START = NOW - timedelta(hours=4)
KUEUE_API = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"
TOLERANCE = 0.005


def minute(m: float) -> datetime:
    return START + timedelta(minutes=m)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def uid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts)))


@dataclass
class Pod:
    name: str
    gpus: int
    node: str
    running: tuple[float, float]  # minutes
    pending: tuple[float, float] | None = None  # Pending with node="" (holds nothing)

    @property
    def uid(self) -> str:
        return uid("pod", self.name)


@dataclass
class Job:
    key: str
    namespace: str
    queue: str
    local_queue: str
    gpus: int
    sm: float
    created: float
    waits: list[tuple[float, float | None]]  # minutes; None = until now
    admitted: list[tuple[float, float | None]]  # quota held
    pods: list[Pod] = field(default_factory=list)
    finished: float | None = None
    requeued: float | None = None
    accumulated: int = 0

    @property
    def job_uid(self) -> str:
        return uid("job", self.namespace, self.key)

    @property
    def workload(self) -> str:
        return f"job-{self.key}-{self.job_uid[:5]}"


QUEUES = {
    # name: (cohort, nominal, borrowing limit, lending limit, namespace, local queue)
    "team-a": ("research", 8, None, None, "ns-a", "lq-a"),
    "team-b": ("research", 8, None, 6, "ns-b", "lq-b"),
    "solo": ("", 4, None, None, "ns-s", "lq-s"),
}
JOBS = [
    Job("train", "ns-a", "team-a", "lq-a", 12, 0.9, 0, [], [(0, 60)], finished=60,
        pods=[Pod(f"train-{i}", 4, f"node-{i % 3}", (0, 60)) for i in range(3)]),
    Job("sweep", "ns-b", "team-b", "lq-b", 4, 0.6, 0, [(60, 150)], [(0, 60), (150, None)],
        requeued=60, accumulated=3600,
        pods=[Pod("sweep-first", 4, "node-1", (0, 60)),
              Pod("sweep-again", 4, "node-2", (150, 240))]),
    Job("gang", "ns-b", "team-b", "lq-b", 8, 0.3, 60, [], [(60, None)],
        pods=[Pod(f"gang-{i}", 4, f"node-{i}", (120, 240), pending=(60, 120)) for i in (0, 1)]),
    Job("big", "ns-a", "team-a", "lq-a", 16, 0.0, 180, [(180, None)], []),
    Job("solo", "ns-s", "solo", "lq-s", 2, 0.1, 0, [], [(0, None)],
        pods=[Pod("solo-0", 2, "node-0", (0, 240))]),
]  # fmt: skip


# --- ground truth, from the scenario alone ------------------------------------------------------


def overlap(span: tuple[float, float | None], lo: float, hi: float) -> float:
    first, last = span
    last = 240 if last is None else last
    return max(0.0, min(last, hi) - max(first, lo)) / 60  # hours


def queue_usage(queue: str, at: float) -> int:
    return sum(
        job.gpus
        for job in JOBS
        if job.queue == queue and any(s <= at < (240 if e is None else e) for s, e in job.admitted)
    )


def truth(lo: float = 0, hi: float = 240) -> dict[tuple[str, str], dict[str, float]]:
    """(group_by, group) -> figures over minutes [lo, hi)."""
    found: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def add(job: Job | None, queue: str, figure: str, value: float) -> None:
        cohort = QUEUES[queue][0] or "(no cohort)"
        keys = [("cluster_queue", queue), ("cohort", cohort)]
        if job is not None:
            keys += [("namespace", job.namespace), ("workload", f"{job.namespace}/{job.workload}")]
        for key in keys:
            found[key][figure] += value

    for job in JOBS:
        for key in (("namespace", job.namespace), ("workload", f"{job.namespace}/{job.workload}")):
            found[key]["allocated_gpu_hours"] += 0.0
        for pod in job.pods:
            held = overlap(pod.running, lo, hi) * pod.gpus
            add(job, job.queue, "allocated_gpu_hours", held)
            add(job, job.queue, "active_gpu_hours", held * job.sm)
        for wait in job.waits:
            add(job, job.queue, "pending_gpu_hours", overlap(wait, lo, hi) * job.gpus)
    for queue, (cohort, nominal, *_limits) in QUEUES.items():
        add(None, queue, "nominal_gpu_hours", nominal * (hi - lo) / 60)
        for m in range(int(lo), int(hi), 5):
            used = queue_usage(queue, m)
            add(None, queue, "borrowed_gpu_hours", max(0, used - nominal) * 5 / 60)
            if not cohort:
                continue
            # Lending, by the rule the README states: what members borrow is placed on members'
            # unused lendable quota in proportion (no cohort pool here).
            members = [q for q, v in QUEUES.items() if v[0] == cohort]
            to_place = sum(max(0, queue_usage(q, m) - QUEUES[q][1]) for q in members)
            lendable = {}
            for q in members:
                unused = max(0, QUEUES[q][1] - queue_usage(q, m))
                limit = QUEUES[q][3]
                lendable[q] = unused if limit is None else min(unused, limit)
            pool = sum(lendable.values())
            if to_place and pool:
                share = min(1.0, to_place / pool)
                add(None, queue, "lent_gpu_hours", lendable[queue] * share * 5 / 60)
    return found


# --- Prometheus history -------------------------------------------------------------------------


def sample_times() -> Iterator[tuple[float, float]]:
    """(minute, unix time) of every scrape: 30 s before each minute of the history."""
    for m in range(1, 241):
        yield m - 0.5, (minute(m) - timedelta(seconds=OFFSET)).timestamp()


def write_history(path: Path) -> None:
    nodes = {f"node-{i}": [uid("gpu", str(i), str(g)) for g in range(8)] for i in range(3)}
    placed: dict[str, list[tuple[str, int]]] = {}
    # Each pod takes the first free GPUs of its node over its whole life (no overlaps here).
    used: dict[str, list[tuple[tuple[float, float], int]]] = defaultdict(list)
    for job in JOBS:
        for pod in job.pods:
            taken = []
            for index in range(8):
                if len(taken) == pod.gpus:
                    break
                if all(
                    not (pod.running[0] < span[1] and span[0] < pod.running[1]) or index != gpu
                    for span, gpu in used[pod.node]
                ):
                    taken.append(index)
            for index in taken:
                used[pod.node].append((pod.running, index))
            placed[pod.name] = [(pod.node, index) for index in taken]
    job_of = {pod.name: job for job in JOBS for pod in job.pods}

    def alive(span: tuple[float, float] | None, at: float) -> bool:
        return span is not None and span[0] <= at < span[1]

    with OpenMetricsWriter(path) as out:
        out.family("DCGM_FI_PROF_SM_ACTIVE")
        for at, ts in sample_times():
            for node, uuids in nodes.items():
                for index, gpu_uuid in enumerate(uuids):
                    labels = {"Hostname": node, "UUID": gpu_uuid, "gpu": str(index),
                              "modelName": "NVIDIA H100 80GB HBM3"}  # fmt: skip
                    holder = next(
                        (
                            name
                            for name, spots in placed.items()
                            if (node, index) in spots
                            and alive(
                                next(p for p in job_of[name].pods if p.name == name).running, at
                            )
                        ),
                        None,
                    )
                    value = 0.0
                    if holder is not None:
                        job = job_of[holder]
                        labels |= {"exported_namespace": job.namespace, "exported_pod": holder,
                                   "exported_container": "main"}  # fmt: skip
                        value = job.sm
                    out.sample(labels, value, ts)
        pods = [(job, pod) for job in JOBS for pod in job.pods]
        out.family("kube_pod_container_resource_requests")
        for at, ts in sample_times():
            for job, pod in pods:
                if alive(pod.running, at) or alive(pod.pending, at):
                    out.sample({"namespace": job.namespace, "pod": pod.name, "uid": pod.uid,
                                "container": "main", "resource": "nvidia_com_gpu",
                                "unit": "integer"}, pod.gpus, ts)  # fmt: skip
        out.family("kube_pod_info")
        for at, ts in sample_times():
            for job, pod in pods:
                if alive(pod.running, at) or alive(pod.pending, at):
                    node = pod.node if alive(pod.running, at) else ""
                    out.sample({"namespace": job.namespace, "pod": pod.name, "uid": pod.uid,
                                "node": node, "created_by_kind": "Job",
                                "created_by_name": job.key}, 1, ts)  # fmt: skip
        out.family("kube_pod_status_phase")
        for at, ts in sample_times():
            for job, pod in pods:
                for phase, span in (("Running", pod.running), ("Pending", pod.pending)):
                    if alive(span, at):
                        out.sample({"namespace": job.namespace, "pod": pod.name, "uid": pod.uid,
                                    "phase": phase}, 1, ts)  # fmt: skip
        out.family("kube_pod_owner")
        for at, ts in sample_times():
            for job, pod in pods:
                if pod.name == "sweep-first":
                    continue  # no owner series: kube_pod_info's created_by must stand in
                if alive(pod.running, at) or alive(pod.pending, at):
                    out.sample({"namespace": job.namespace, "pod": pod.name, "uid": pod.uid,
                                "owner_kind": "Job", "owner_name": job.key,
                                "owner_is_controller": "true"}, 1, ts)  # fmt: skip
        write_kueue(out)


def write_kueue(out: OpenMetricsWriter) -> None:
    def gauge(name: str, value: Callable[[str, float], float], per_flavor: bool = True) -> None:
        out.family(name)
        for at, ts in sample_times():
            for queue, (cohort, *_rest) in QUEUES.items():
                labels = {"cluster_queue": queue, "replica_role": "leader"}
                if per_flavor:
                    labels |= {"cohort": cohort, "flavor": "h100", "resource": GPU}
                out.sample(labels, value(queue, at), ts)
                if per_flavor:
                    # A follower replica's stale view: must be ignored.
                    out.sample(labels | {"replica_role": "follower"}, 999, ts)

    inf = float("inf")
    gauge("kueue_cluster_queue_nominal_quota", lambda q, at: QUEUES[q][1])
    gauge(
        "kueue_cluster_queue_borrowing_limit",
        lambda q, at: inf if QUEUES[q][2] is None else QUEUES[q][2],
    )
    gauge(
        "kueue_cluster_queue_lending_limit",
        lambda q, at: inf if QUEUES[q][3] is None else QUEUES[q][3],
    )
    gauge("kueue_cluster_queue_resource_usage", lambda q, at: queue_usage(q, at))
    gauge("kueue_cluster_queue_resource_reservation", lambda q, at: queue_usage(q, at))
    gauge(
        "kueue_admitted_active_workloads",
        lambda q, at: sum(
            1
            for j in JOBS
            if j.queue == q and any(s <= at < (240 if e is None else e) for s, e in j.admitted)
        ),
        per_flavor=False,
    )
    out.family("kueue_cluster_queue_info")
    for _at, ts in sample_times():
        for queue, (cohort, *_rest) in QUEUES.items():
            out.sample({"cluster_queue": queue, "parent_cohort": cohort, "root_cohort": cohort,
                        "replica_role": "leader"}, 1, ts)  # fmt: skip


# --- the API server at "now" --------------------------------------------------------------------


def condition(kind: str, status: str, reason: str, at: float) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": reason,
            "lastTransitionTime": iso(minute(at)), "observedGeneration": 1}  # fmt: skip


def workload_object(job: Job, at: float = 239.5) -> dict[str, Any]:
    """The Workload as the API server shows it at minute ``at``."""
    count = 1 if job.key in ("sweep", "big", "solo") else len(job.pods)
    per_pod = job.gpus // count
    conditions = []
    status: dict[str, Any] = {}
    spans = [(s, 240 if e is None else e) for s, e in job.admitted if s <= at]
    finished = job.finished is not None and job.finished <= at
    holding = any(s <= at < e for s, e in spans)
    if spans and (holding or finished):
        since = spans[-1][0]
        conditions += [
            condition("QuotaReserved", "True", "QuotaReserved", since),
            condition("Admitted", "True", "Admitted", since),
        ]
        status["admission"] = {
            "clusterQueue": job.queue,
            "podSetAssignments": [{"name": "main", "count": count, "flavors": {GPU: "h100"},
                                   "resourceUsage": {GPU: str(job.gpus)}}],
        }  # fmt: skip
    elif spans:
        # Evicted and waiting again: Kueue keeps the eviction's conditions.
        evicted = spans[-1][1]
        conditions += [
            condition("QuotaReserved", "False", "Pending", evicted),
            condition("Admitted", "False", "NoReservation", evicted),
            condition("Evicted", "True", "Preempted", evicted),
            condition("Preempted", "True", "InCohortReclamation", evicted),
        ]
    else:
        conditions.append(condition("QuotaReserved", "False", "Pending", job.created))
    if job.requeued is not None and job.requeued <= at:
        conditions.append(condition("Requeued", "True", "Preempted", job.requeued))
        status["accumulatedPastExecutionTimeSeconds"] = job.accumulated
        if holding:
            # Re-admitted: Kueue set Evicted/Preempted back to False at the re-admission.
            since = spans[-1][0]
            conditions += [
                condition("Evicted", "False", "QuotaReserved", since),
                condition("Preempted", "False", "QuotaReserved", since),
            ]
    if finished:
        conditions.append(condition("Finished", "True", "Succeeded", job.finished or 0))
    status["conditions"] = conditions
    return {
        "apiVersion": KUEUE_API,
        "kind": "Workload",
        "metadata": {
            "name": job.workload,
            "namespace": job.namespace,
            "uid": uid("wl", job.key),
            "creationTimestamp": iso(minute(job.created)),
            "labels": {"kueue.x-k8s.io/job-uid": job.job_uid},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job.key,
                    "uid": job.job_uid,
                    "controller": True,
                }
            ],
        },  # fmt: skip
        "spec": {
            "active": True,
            "queueName": job.local_queue,
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "main",
                                    "resources": {
                                        "requests": {GPU: str(per_pod)},
                                        "limits": {GPU: str(per_pod)},
                                    },
                                }
                            ]
                        }
                    },
                }
            ],
        },  # fmt: skip
        "status": status,
    }


def queue_object(name: str, at: float = 239.5) -> dict[str, Any]:
    cohort, nominal, borrowing, lending, namespace, _ = QUEUES[name]
    resource: dict[str, Any] = {"name": GPU, "nominalQuota": str(nominal)}
    if borrowing is not None:
        resource["borrowingLimit"] = str(borrowing)
    if lending is not None:
        resource["lendingLimit"] = str(lending)
    used = queue_usage(name, at)
    borrowed = str(max(0, used - nominal))
    usage = [
        {"name": "h100", "resources": [{"name": GPU, "total": str(used), "borrowed": borrowed}]}
    ]
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [
            {"coveredResources": [GPU], "flavors": [{"name": "h100", "resources": [resource]}]}
        ],
    }  # fmt: skip
    if cohort:
        spec["cohortName"] = cohort
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": name, "uid": uid("cq", name), "creationTimestamp": iso(minute(-600))},
        "spec": spec,
        "status": {"flavorsUsage": usage, "flavorsReservation": usage},
    }


def local_queue_object(name: str) -> dict[str, Any]:
    _, _, _, _, namespace, local = QUEUES[name]
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {
            "name": local,
            "namespace": namespace,
            "uid": uid("lq", local),
            "creationTimestamp": iso(minute(-600)),
        },  # fmt: skip
        "spec": {"clusterQueue": name},
    }


def pod_object(job: Job, pod: Pod) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": job.namespace,
            "uid": pod.uid,
            "creationTimestamp": iso(minute(pod.running[0])),
            "labels": {
                "kueue.x-k8s.io/cluster-queue-name": job.queue,
                "kueue.x-k8s.io/local-queue-name": job.local_queue,
            },
            "annotations": {"kueue.x-k8s.io/workload": job.workload},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job.key,
                    "uid": job.job_uid,
                    "controller": True,
                }
            ],
        },  # fmt: skip
        "spec": {
            "nodeName": pod.node,
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {GPU: str(pod.gpus)}, "limits": {GPU: str(pod.gpus)}},
                }
            ],
        },  # fmt: skip
        "status": {"phase": "Running", "startTime": iso(minute(pod.running[0]))},
    }


def load_now(api: FakeKubeAPI, at: float = 239.5) -> None:
    """Serve the objects as they are at minute ``at`` (default: the last minute)."""
    objects = {
        "ResourceFlavor": [{"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
                            "metadata": {"name": "h100", "uid": uid("rf", "h100")},
                            "spec": {}}],
        "Cohort": [],
        "ClusterQueue": [queue_object(name, at) for name in QUEUES],
        "LocalQueue": [local_queue_object(name) for name in QUEUES],
        "Workload": [workload_object(job, at) for job in JOBS if job.created <= at],
        "WorkloadPriorityClass": [],
        "Pod": [pod_object(job, pod) for job in JOBS for pod in job.pods
                if pod.running[0] <= at < pod.running[1]],
        "Node": [],
    }  # fmt: skip
    for kind, items in objects.items():
        store = api._stores[KIND_TO_PLURAL[kind]]
        with api._lock:
            store.objects.clear()
            store.encoded.clear()
        api.load(kind, items)


# --- the test -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def history_tsdb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("history")
    openmetrics = work / "history.om"
    write_history(openmetrics)
    create_blocks(openmetrics, work / "pristine")
    return work / "pristine"


@pytest.fixture(scope="module")
def prometheus(
    history_tsdb: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    """One server for the module: the tests only read the history. It runs on a copy, since
    Prometheus compacts the imported blocks in place a minute after it starts."""
    server = PrometheusServer(copy_tsdb(history_tsdb, tmp_path_factory.mktemp("tsdb") / "tsdb"))
    yield server.start()
    server.cleanup()


@pytest.fixture
def kube(make_kube_api: Callable[..., FakeKubeAPI]) -> FakeKubeAPI:
    """The API server holding the scenario's objects at "now"."""
    api = make_kube_api(load=False)
    load_now(api)
    return api


def backfill(prometheus: PrometheusServer, api: FakeKubeAPI, settings: Any) -> None:
    settings.GPULEDGER_COLLECT_SECONDS = WINDOW_SECONDS
    settings.PROMETHEUS_URL = ""
    call_command(
        "sync_cluster", "--cluster", "hist", "--create", "--kubeconfig", str(api.kubeconfig)
    )
    Cluster.objects.filter(name="hist").update(prometheus_url=prometheus.url)
    call_command(
        "collect_metrics", cluster="hist", start=iso(START), end=iso(NOW), no_progress=True
    )


def chargeback(group_by: str, **params: str) -> dict[tuple[str, str], dict[str, Any]]:
    cache.clear()
    client = APIClient()
    client.force_authenticate(User.objects.get_or_create(username="fin", is_staff=True)[0])
    response = client.get(
        "/api/v1/chargeback/",
        {"start": iso(START), "end": iso(NOW), "group_by": group_by, **params},
    )
    assert response.status_code == 200, response.content
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for row in response.json()["rows"]:
        period = row.get("period_start") or ""
        rows[(row["group"], period)] = row
    return rows


FIGURES = (
    "nominal_gpu_hours",
    "borrowed_gpu_hours",
    "lent_gpu_hours",
    "pending_gpu_hours",
    "allocated_gpu_hours",
    "active_gpu_hours",
)


def assert_close(got: dict[str, Any], want: dict[str, float], what: str) -> None:
    for figure in FIGURES:
        value = float(got.get(figure) or 0.0)
        expected = want.get(figure, 0.0)
        assert value == pytest.approx(expected, rel=TOLERANCE, abs=1e-6), (what, figure, got)


def test_a_backfilled_history_gives_every_group_its_true_gpu_hours(prometheus, kube, settings):
    backfill(prometheus, kube, settings)

    # Quota history before the install came from Kueue's metrics; the sync's own window won.
    samples = ClusterQueueSample.objects.filter(sampled_at__lte=NOW)
    assert samples.filter(source=SampleSource.METRICS).count() == 3 * 240 // 5
    expected = truth()
    for group_by in ("workload", "cluster_queue", "cohort", "namespace"):
        rows = chargeback(group_by)
        wanted = {key: figures for (scope, key), figures in expected.items() if scope == group_by}
        assert {key for key, _ in rows} == set(wanted), group_by
        for key, figures in wanted.items():
            assert_close(rows[(key, "")], figures, f"{group_by} {key}")
    # The standalone queue is "(no cohort)", never unattributed.
    assert "(unattributed)" not in {key for key, _ in chargeback("cohort")}


def test_per_hour_figures_are_true_too(prometheus, kube, settings):
    backfill(prometheus, kube, settings)

    for group_by in ("cluster_queue", "workload"):
        rows = chargeback(group_by, step="hour")
        for index in range(4):
            hour = START + timedelta(hours=index)
            expected = truth(index * 60, (index + 1) * 60)
            period = iso(hour)
            for (scope, key), figures in expected.items():
                if scope != group_by:
                    continue
                got = rows.get((key, period))
                if got is None:
                    assert not any(figures.values()), (group_by, key, period)
                    continue
                assert_close(got, figures, f"{group_by} {key} {period}")


def rollup_figures(cluster: str) -> dict[tuple[str, str, datetime], dict[str, float]]:
    found: dict[tuple[str, str, datetime], dict[str, float]] = defaultdict(
        lambda: dict.fromkeys(FIGURES, 0.0)
    )
    rows = HourlyRollup.objects.filter(cluster__name=cluster, hour__lt=NOW).values_list(
        "scope", "key", "hour", *FIGURES
    )
    for scope, key, hour, *values in rows:
        key = "(the cluster)" if scope == "fleet" else key
        for figure, value in zip(FIGURES, values, strict=True):
            found[(scope, key, hour)][figure] += value
    return found


def test_the_same_history_collected_live_gives_the_same_rollups(prometheus, kube, settings):
    # given: the backfill of a fresh install, as above
    backfill(prometheus, kube, settings)
    # and: the same history collected live, the API server showing each window's state; the
    # hour still being collected is re-rolled at most hourly (production: every 300 s), as the
    # rollups compared are those roll_up_range computes below from the rows collected
    settings.GPULEDGER_ROLLUP_SECONDS = 3600
    live = Cluster.objects.create(name="live", prometheus_url=prometheus.url)
    end = START
    while end < NOW:
        end += timedelta(seconds=WINDOW_SECONDS)
        at = end + timedelta(seconds=45)
        load_now(kube, (end - START).total_seconds() / 60 - 0.5)
        with time_machine.travel(at, tick=True):
            run = sync_cluster(live.pk, kubeconfig=str(kube.kubeconfig))
            assert run.status == "success", run.error
            Collector(live).run(now=at)
    with time_machine.travel(NOW + timedelta(minutes=1), tick=True):
        roll_up_range(live.pk, START, NOW)

    # then: the same figures for every group and hour
    backfilled, collected = rollup_figures("hist"), rollup_figures("live")
    only_live = sorted(set(collected) - set(backfilled))
    only_backfill = sorted(set(backfilled) - set(collected))
    assert (only_live, only_backfill) == ([], []), (only_live[:6], only_backfill[:6])
    for identity, figures in backfilled.items():
        for figure, value in figures.items():
            got = collected[identity][figure]
            assert got == pytest.approx(value, rel=TOLERANCE, abs=1e-6), (identity, figure)
    # and: live quota samples came from the API server, not the metrics
    assert not ClusterQueueSample.objects.filter(
        cluster_queue__cluster=live, source=SampleSource.METRICS
    ).exists()
    # and: deep-backfilled once older than the retention (no per-window rows), the same again
    deep_backfill(prometheus, kube, settings)
    deep = rollup_figures("deep")
    assert sorted(set(deep) ^ set(collected)) == []
    for identity, figures in collected.items():
        for figure, value in figures.items():
            got = deep[identity][figure]
            assert got == pytest.approx(value, rel=TOLERANCE, abs=1e-6), (identity, figure)


def deep_backfill(prometheus: PrometheusServer, api: FakeKubeAPI, settings: Any) -> str:
    """The same range two days later with one day of per-window retention: the deep path."""
    settings.GPULEDGER_COLLECT_SECONDS = WINDOW_SECONDS
    settings.GPULEDGER_USAGE_RETENTION_DAYS = 1
    load_now(api)
    deep = Cluster.objects.create(name="deep", prometheus_url=prometheus.url)
    run = sync_cluster(deep.pk, kubeconfig=str(api.kubeconfig))
    assert run.status == "success", run.error
    out = StringIO()
    with time_machine.travel(NOW + timedelta(days=2), tick=True):
        call_command(
            "collect_metrics", cluster="deep", start=iso(START), end=iso(NOW), no_progress=True,
            stdout=out,
        )  # fmt: skip
    return out.getvalue()
