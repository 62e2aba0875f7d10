"""Benchmark: a full Kueue sync of a 50,000-workload cluster, then an incremental one.

Usage (DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/gpuledger_bench_sync):
    .venv/bin/python bench/sync.py [--small] [--scale 1.0] [--keep] [--scheduler volcano|kai]

The fake API server (tests/kube_api_server.py) runs in a child process, so the figures are the
sync's own: it serves 1,000 ClusterQueues in 10 cohorts, 1,000 LocalQueues, 50,000 Workloads
(10 admitted, 15 pending and 25 finished per queue), 20,000 GPU pods and 6,250 GPU nodes, shaped
like the fixtures (managedFields included, as real API servers send them). Prints:

* the full sync (discovery, paginated LISTs, build, one write transaction, queue samples): seconds
  and the process's peak RSS (targets <= 60 s, <= 1.5 GB);
* a second full sync with nothing changed (steady state of the 30 s beat);
* an incremental sync: 100 pending workloads get admitted upstream, the WATCH delivers them and
  the changed rows are written (target <= 2 s from the change to the committed write).

``--scheduler volcano`` serves the same fleet as a Volcano cluster instead
(``bench/_sync_volcano.py``: 1,000 leaf queues under 10 parent queues under ``root``, 50,000
PodGroups, 20,000 GPU pods, the same nodes, no Kueue API): the sync reads it through the
translation of ``quotas.sources``, and the incremental step moves 100 Pending PodGroups to
Inqueue with their queues' counts. ``--scheduler kai`` likewise as a KAI Scheduler cluster
(``bench/_sync_kai.py``: 1,000 leaf queues under 10 department queues; the incremental step
allocates 100 pending PodGroups).

The database is dropped and re-created (it only holds benchmark data); --keep reuses it.
"""

from __future__ import annotations

import argparse
import copy
import gc
import multiprocessing
import os
import random
import resource
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpuledger_bench_sync")
# Production settings (DEBUG off); a throwaway key, long enough for their check.
os.environ.setdefault("SECRET_KEY", "bench-sync-not-a-secret-" + "x" * 32)

COHORTS = 10
QUEUES = 1000
ADMITTED, PENDING, FINISHED = 10, 15, 25  # per queue: 50 workloads
PODS_PER_WORKLOAD = 2
GPUS_PER_POD = 2
NODES = 6250
CHANGED = 100
NOW = "2026-08-22T12:00:00Z"


def prepare_database(url: str, keep: bool) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and not keep:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            exists = None
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def migrate(call_command: Any) -> None:
    """migrate; while the project apps have no migration files yet, create every table the way
    pytest's --no-migrations does (syncdb for all apps, so foreign keys to auth resolve)."""
    from django.apps import apps
    from django.conf import settings
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    if not {app for app, _ in loader.disk_migrations} >= {"fleet", "quotas"}:
        settings.MIGRATION_MODULES = {app.label: None for app in apps.get_app_configs()}
    call_command("migrate", run_syncdb=True, verbosity=0)


def managed_fields(manager: str) -> list[dict[str, Any]]:
    """A realistic managedFields entry: what kubectl and controllers leave on every object."""
    return [
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}, "f:ownerReferences": {}},
                "f:spec": {f"f:field{i}": {} for i in range(12)},
                "f:status": {"f:conditions": {".": {}, 'k:{"type":"Ready"}': {}}},
            },
            "manager": manager,
            "operation": "Update",
            "time": NOW,
        }
    ]


def uid(kind: str, index: int) -> str:
    return f"{abs(hash(kind)) % 0xFFFFFFFF:08x}-0000-4000-8000-{index:012d}"


def generate(api: Any, scale: float, seed: int, scheduler: str = "kueue") -> dict[str, int]:
    """Fill the server with the benchmark fleet; returns object counts."""
    queues = max(COHORTS, int(QUEUES * scale))
    nodes = max(10, int(NODES * scale))
    source = source_fleet(scheduler)
    if source is not None:
        counts = source.generate(api, queues, nodes, managed_fields, uid)
    else:
        counts = _generate_kueue(api, queues, nodes, seed)
    node_objs = _nodes(nodes)
    api.load("Node", node_objs)
    return {**counts, "Node": len(node_objs)}


def source_fleet(scheduler: str) -> Any:
    """The module generating a quota source's fleet (``bench/_sync_<scheduler>.py``); None for
    Kueue's own, generated here."""
    if scheduler == "volcano":
        import _sync_volcano

        return _sync_volcano
    if scheduler == "kai":
        import _sync_kai

        return _sync_kai
    return None


def _generate_kueue(api: Any, queues: int, nodes: int, seed: int) -> dict[str, int]:
    from tests.kube_api_server import fixture_items

    rng = random.Random(seed)
    api.load("ResourceFlavor", fixture_items("ResourceFlavor"))
    api.load("WorkloadPriorityClass", fixture_items("WorkloadPriorityClass"))
    api.load("Cohort", _cohorts(fixture_items("Cohort")[1]))
    workloads = {w["metadata"]["name"]: w for w in fixture_items("Workload")}
    templates = _Templates(
        cluster_queue=fixture_items("ClusterQueue")[0],
        local_queue=fixture_items("LocalQueue")[0],
        admitted=workloads["job-llama-pretrain-8b-fbe70"],
        pending=workloads["job-llama-eval-70b-755d0"],
        finished=workloads["job-tokenizer-bench-22ed4"],
        pod=fixture_items("Pod")[0],
    )
    cq_objs, lq_objs, wl_objs, pod_objs = [], [], [], []
    for q in range(queues):
        cq, lq = _queues(templates, q)
        cq_objs.append(cq)
        lq_objs.append(lq)
        for w in range(ADMITTED + PENDING + FINISHED):
            wl, state = _workload(templates, q, w, rng)
            wl_objs.append(wl)
            if state == "admitted":
                pod_objs.extend(_pods(templates.pod, wl, q * 100 + w, nodes))
    api.load("ClusterQueue", cq_objs)
    api.load("LocalQueue", lq_objs)
    api.load("Workload", wl_objs)
    api.load("Pod", pod_objs)
    return {"ClusterQueue": len(cq_objs), "Workload": len(wl_objs), "Pod": len(pod_objs)}


def _nodes(nodes: int) -> list[dict[str, Any]]:
    images = [
        {
            "names": [
                f"nvcr.io/nvidia/image-{i}@sha256:{i:064x}",
                f"nvcr.io/nvidia/image-{i}:25.0{i % 9}",
            ],
            "sizeBytes": 1_000_000_000 + i,
        }
        for i in range(12)
    ]
    return [_node(n, images) for n in range(nodes)]


@dataclass(frozen=True)
class _Templates:
    """The fixture objects every generated object is copied from."""

    cluster_queue: dict[str, Any]
    local_queue: dict[str, Any]
    admitted: dict[str, Any]
    pending: dict[str, Any]
    finished: dict[str, Any]
    pod: dict[str, Any]


def _cohorts(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            **copy.deepcopy(template),
            "metadata": {
                "name": f"cohort-{c:02d}",
                "uid": uid("cohort", c),
                "creationTimestamp": "2026-06-02T09:10:00Z",
            },
        }
        for c in range(COHORTS)
    ]


def _queues(templates: _Templates, q: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Queue ``q``'s ClusterQueue (every fifth borrows above nominal) and its LocalQueue."""
    cq_name, namespace = f"cq-{q:04d}", f"team-{q:04d}"
    gpu_nominal = ADMITTED * PODS_PER_WORKLOAD * GPUS_PER_POD
    borrowing = q % 5 == 0  # every fifth queue runs one workload above nominal
    cq = copy.deepcopy(templates.cluster_queue)
    cq["metadata"].update(
        name=cq_name,
        uid=uid("cq", q),
        labels={"gpuledger.io/team": f"team-{q % 200:03d}"},
    )
    cq["spec"]["cohortName"] = f"cohort-{q % COHORTS:02d}"
    cq["spec"]["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    h100 = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]
    h100["nominalQuota"] = str(gpu_nominal - (4 if borrowing else 0))
    for usage_key in ("flavorsUsage", "flavorsReservation"):
        cq["status"][usage_key][0]["resources"][2].update(
            total=str(gpu_nominal), borrowed="4" if borrowing else "0"
        )
    cq["status"].update(
        pendingWorkloads=PENDING, reservingWorkloads=ADMITTED, admittedWorkloads=ADMITTED
    )
    cq["metadata"]["managedFields"] = managed_fields("kueue")
    lq = copy.deepcopy(templates.local_queue)
    lq["metadata"].update(name="queue", namespace=namespace, uid=uid("lq", q))
    lq["spec"]["clusterQueue"] = cq_name
    return cq, lq


def _workload(
    templates: _Templates, q: int, w: int, rng: random.Random
) -> tuple[dict[str, Any], str]:
    """Workload ``w`` of queue ``q``: admitted, pending or finished by its place in the queue."""
    index = q * 100 + w
    if w < ADMITTED:
        template, state = templates.admitted, "admitted"
    elif w < ADMITTED + PENDING:
        template, state = templates.pending, "pending"
    else:
        template, state = templates.finished, "finished"
    wl = copy.deepcopy(template)
    job, job_uid = f"job-{index:07d}", uid("job", index)
    wl["metadata"].update(
        name=f"job-{job}-{index % 99991:05x}",
        namespace=f"team-{q:04d}",
        uid=uid("wl", index),
        creationTimestamp=f"2026-08-2{rng.randint(0, 1)}T{rng.randint(0, 23):02d}:00:00Z",
        labels={"kueue.x-k8s.io/job-uid": job_uid},
        managedFields=managed_fields("kueue"),
    )
    wl["metadata"].pop("resourceVersion", None)
    wl["metadata"]["ownerReferences"][0].update(name=job, uid=job_uid)
    wl["spec"]["queueName"] = "queue"
    pod_set = wl["spec"]["podSets"][0]
    pod_set["count"] = PODS_PER_WORKLOAD
    container = pod_set["template"]["spec"]["containers"][0]
    for section in ("requests", "limits"):
        container["resources"][section]["nvidia.com/gpu"] = str(GPUS_PER_POD)
    if state != "pending":
        assignment = wl["status"]["admission"]["podSetAssignments"][0]
        assignment["count"] = PODS_PER_WORKLOAD
        assignment["resourceUsage"]["nvidia.com/gpu"] = str(PODS_PER_WORKLOAD * GPUS_PER_POD)
        wl["status"]["admission"]["clusterQueue"] = f"cq-{q:04d}"
        for cond in wl["status"]["conditions"]:
            if cond["type"] in ("QuotaReserved", "Admitted"):
                cond["lastTransitionTime"] = f"2026-08-22T08:{w:02d}:00Z"
    return wl, state


def _pods(
    template: dict[str, Any], wl: dict[str, Any], index: int, nodes: int
) -> list[dict[str, Any]]:
    """The running pods of admitted workload ``wl`` (number ``index``), four to a node."""
    job, job_uid = f"job-{index:07d}", uid("job", index)
    cq_name = wl["status"]["admission"]["clusterQueue"]
    pods = []
    for p in range(PODS_PER_WORKLOAD):
        pod = copy.deepcopy(template)
        pod_index = index * PODS_PER_WORKLOAD + p
        pod["metadata"].update(
            name=f"{job}-{p}-{pod_index % 99991:05x}",
            namespace=wl["metadata"]["namespace"],
            uid=uid("pod", pod_index),
            annotations={
                "kueue.x-k8s.io/workload": wl["metadata"]["name"],
                "batch.kubernetes.io/job-completion-index": str(p),
            },
            managedFields=managed_fields("kubelet"),
        )
        pod["metadata"].pop("resourceVersion", None)
        pod["metadata"]["labels"].update(
            {
                "kueue.x-k8s.io/cluster-queue-name": cq_name,
                "kueue.x-k8s.io/local-queue-name": "queue",
                "job-name": job,
            }
        )
        pod["metadata"]["ownerReferences"][0].update(name=job, uid=job_uid)
        pod["spec"]["nodeName"] = f"gpu-node-{(pod_index // 4) % nodes:05d}"
        for section in ("requests", "limits"):
            pod["spec"]["containers"][0]["resources"][section]["nvidia.com/gpu"] = str(GPUS_PER_POD)
        pods.append(pod)
    return pods


def _node(n: int, images: list[dict[str, Any]]) -> dict[str, Any]:
    """GPU node ``n``: every fifth in the A100 pool, the rest H100, eight GPUs each."""
    pool = "a100" if n % 5 == 4 else "h100"
    product = "NVIDIA-A100-SXM4-80GB" if pool == "a100" else "NVIDIA-H100-80GB-HBM3"
    name = f"gpu-node-{n:05d}"
    return {
        "metadata": {
            "name": name,
            "uid": uid("node", n),
            "creationTimestamp": "2026-06-01T08:00:00Z",
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": f"{pool}-8x",
                "cloud.example.com/gpu-pool": pool,
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": "8",
                "karpenter.sh/nodepool": f"{pool}-pool",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": managed_fields("kubelet"),
        },
        "spec": {
            "providerID": f"aws:///us-east-1a/i-{n:017x}",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": {"cpu": "192", "memory": "2063731Mi", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "190", "memory": "2061683Mi", "nvidia.com/gpu": "8"},
            "conditions": [
                {
                    "type": kind,
                    "status": "False" if kind != "Ready" else "True",
                    "reason": f"Kubelet{kind}",
                    "message": f"kubelet reports {kind}",
                    "lastHeartbeatTime": NOW,
                    "lastTransitionTime": "2026-06-01T08:05:00Z",
                }
                for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.{n // 65536}.{n // 256 % 256}.{n % 256}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.34.0",
                "containerRuntimeVersion": "containerd://2.1.0",
                "kernelVersion": "6.8.0-1021-aws",
                "osImage": "Ubuntu 24.04.2 LTS",
            },
            "images": images,
        },
    }


def admit(api: Any, count: int) -> int:
    """Admit ``count`` pending workloads upstream (one per queue), with watch events."""
    with api._lock:
        pending = [
            (key[0], key[1], None)
            for key, w in api._stores["workloads"].objects.items()
            if (w["status"].get("conditions") or [{}])[0].get("reason") == "Pending"
        ]
    seen_ns: set[str] = set()
    done = 0
    for namespace, name, _ in pending:
        if namespace in seen_ns:
            continue
        seen_ns.add(namespace)

        def change(obj: dict[str, Any], cq: str = namespace.replace("team-", "cq-")) -> None:
            obj["status"]["conditions"] = [
                {
                    "type": kind,
                    "status": "True",
                    "reason": kind,
                    "message": "admitted by the benchmark",
                    "lastTransitionTime": "2026-08-22T12:00:30Z",
                }
                for kind in ("QuotaReserved", "Admitted")
            ]
            obj["status"]["admission"] = {
                "clusterQueue": cq,
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": PODS_PER_WORKLOAD,
                        "flavors": {"nvidia.com/gpu": "h100"},
                        "resourceUsage": {"nvidia.com/gpu": str(PODS_PER_WORKLOAD * GPUS_PER_POD)},
                    }
                ],
            }

        api.modify("Workload", name, change, namespace=namespace)
        done += 1
        if done >= count:
            break
    return done


def serve(conn: Any, scale: float, seed: int, scheduler: str) -> None:
    """The child process: generate, serve, and change workloads when asked."""
    from tests.kube_api_server import FakeKubeAPI

    source = source_fleet(scheduler)
    if scheduler == "volcano":
        api = FakeKubeAPI(kueue_versions=(), volcano_versions=source.VERSIONS).start()
    elif scheduler == "kai":
        api = FakeKubeAPI(kueue_versions=(), kai_versions=source.VERSIONS).start()
    else:
        api = FakeKubeAPI().start()
    started = time.perf_counter()
    counts = generate(api, scale, seed, scheduler)
    conn.send((api.port, api.token, counts, time.perf_counter() - started))
    while True:
        command = conn.recv()
        if command == "stop":
            api.stop()
            return
        if command == "admit":
            conn.send((source.admit if source is not None else admit)(api, CHANGED))


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the full fleet")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="reuse the database")
    parser.add_argument(
        "--small",
        action="store_true",
        help="the same steps at a scale that takes seconds (tests/bench/test_benches.py runs it)",
    )
    parser.add_argument(
        "--scheduler",
        choices=("kueue", "volcano", "kai"),
        default="kueue",
        help="whose objects the API server serves (bench/_sync_volcano.py, bench/_sync_kai.py)",
    )
    args = parser.parse_args()
    if args.small:
        # 10 ClusterQueues: enough pending workloads (15 each) for the CHANGED admissions.
        args.scale = 0.01

    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    server = ctx.Process(
        target=serve, args=(child, args.scale, args.seed, args.scheduler), daemon=True
    )
    server.start()

    url = os.environ["DATABASE_URL"]
    if url.startswith("postgres"):
        prepare_database(url, args.keep)
    import django

    django.setup()
    from django.core.management import call_command

    migrate(call_command)

    import logging

    logging.getLogger("quotas").setLevel(logging.WARNING)

    from fleet.models import Cluster
    from quotas.sync import sync_cluster

    port, token, counts, generated = parent.recv()
    print(f"fake API server: {counts} generated in {generated:.1f} s (child process)")
    tmp = Path(tempfile.mkdtemp())
    kubeconfig = tmp / "kubeconfig"
    from tests.kube_api_server import write_kubeconfig

    write_kubeconfig(kubeconfig, f"http://127.0.0.1:{port}", token)

    cluster, _ = Cluster.objects.update_or_create(name="bench", defaults={"sync_enabled": True})
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    rss_before = peak_rss_mib()
    started, cpu = time.perf_counter(), time.process_time()
    run = sync_cluster(cluster.pk, kubeconfig=str(kubeconfig))
    full, full_cpu = time.perf_counter() - started, time.process_time() - cpu
    rss = peak_rss_mib()
    print(
        f"full sync: {full:.1f} s wall, {full_cpu:.1f} s CPU of this process; peak RSS {rss:.0f} "
        f"MiB (before: {rss_before:.0f} MiB); {run.status}, read {run.records_read}, wrote "
        f"{run.rows_written}, skipped {run.skipped}"
    )

    started, cpu = time.perf_counter(), time.process_time()
    run = sync_cluster(cluster.pk, kubeconfig=str(kubeconfig))
    again, again_cpu = time.perf_counter() - started, time.process_time() - cpu
    print(
        f"second full sync, nothing changed: {again:.1f} s wall, {again_cpu:.1f} s CPU; "
        f"wrote {run.rows_written}"
    )

    # admit() changes one workload per queue: a scaled-down fleet has fewer than CHANGED.
    changes = min(CHANGED, counts.get("ClusterQueue") or counts["Queue"])
    source = source_fleet(args.scheduler)
    events = source.EVENTS_PER_CHANGE if source is not None else 1
    incremental_sync(cluster, str(kubeconfig), parent, changes, events)
    parent.send("stop")
    server.join(timeout=10)


def incremental_sync(
    cluster: Any, kubeconfig: str, parent: Any, changes: int, events_per_change: int
) -> None:
    """LIST once, then WATCH while ``changes`` pending workloads get admitted upstream (each
    ``events_per_change`` object events for the sync)."""
    from django.utils import timezone

    from fleet.choices import IngestSource, IngestStatus
    from fleet.models import IngestRun
    from quotas.models import Workload
    from quotas.sources import SourceClient
    from quotas.sync import ClusterSync

    client = SourceClient.for_cluster(cluster, kubeconfig=kubeconfig)
    run = IngestRun.objects.create(
        cluster=cluster,
        source=IngestSource.KUEUE,
        status=IngestStatus.RUNNING,
        started_at=timezone.now(),
    )
    sync = ClusterSync(cluster, client, run)
    cpu = time.process_time()
    sync.relist()
    relist_cpu = time.process_time() - cpu
    phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in sync.timings.items())
    print(f"third full sync (for the watch), by phase: {phases}; {relist_cpu:.1f} s CPU")
    holding = ("admitted", "quota_reserved")
    admitted_before = Workload.objects.filter(cluster=cluster, state__in=holding).count()
    marks: dict[str, float] = {}

    def change() -> None:
        time.sleep(1.0)  # let every watch open first
        marks["sent"] = time.perf_counter()
        parent.send("admit")
        marks["changed"] = parent.recv()

    changer = threading.Thread(target=change)
    changer.start()
    flushes: list[float] = []
    flush = sync.flush

    flush_cpu: list[float] = []
    # Full garbage collections during the watch: with ~1 GB of decoded objects alive, one takes
    # about a second, and whether one lands in the timed write is luck.
    gc_seconds: list[float] = []
    gc_started: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            gc_started.append(time.perf_counter())
        elif gc_started:
            gc_seconds.append(time.perf_counter() - gc_started.pop())

    gc.callbacks.append(on_gc)

    def timed_flush(changes: Any) -> None:
        began, began_cpu = time.perf_counter(), time.process_time()
        flush(changes)
        flushes.append(time.perf_counter() - began)
        flush_cpu.append(time.process_time() - began_cpu)

    sync.flush = timed_flush  # type: ignore[method-assign]
    give_up = time.perf_counter() + 30.0
    sync.watch(30.0, stop_after_events=changes * events_per_change)
    # The event count is a floor: a source's queue events may come before its PodGroup events
    # (and a queue event may carry other queues' counts), so the watch can stop before every
    # change is written. Watch on, from where it stopped, until the admitted workloads are.
    changer.join()
    expected = admitted_before + int(marks.get("changed", 0))
    while (
        Workload.objects.filter(cluster=cluster, state__in=holding).count() < expected
        and time.perf_counter() < give_up
    ):
        sync.watch(max(1.0, give_up - time.perf_counter()), stop_after_events=1)
    done = time.perf_counter()
    gc.callbacks.remove(on_gc)
    admitted_after = Workload.objects.filter(cluster=cluster, state__in=holding).count()
    sync.finish(IngestStatus.SUCCESS)
    print(
        f"incremental sync: {done - marks['sent']:.2f} s from {marks['changed']} upstream changes "
        f"to the committed write (holding workloads {admitted_before} -> {admitted_after}); "
        f"{len(flushes)} write(s) of {', '.join(f'{f:.2f} s' for f in flushes)} "
        f"({', '.join(f'{f:.2f} s' for f in flush_cpu)} CPU); "
        f"{len(gc_seconds)} full GC(s) of {sum(gc_seconds):.2f} s during the watch; "
        f"peak RSS {peak_rss_mib():.0f} MiB; load average {os.getloadavg()[0]:.1f}"
    )
    client.close()


if __name__ == "__main__":
    main()
