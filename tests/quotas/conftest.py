"""The recorded Kueue fleet's names and figures, the names the quota tests give the shared
``kube`` fixture, and helpers that read back what a sync wrote (shared by the sync tests)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from fleet.models import Cluster, Node
from quotas.models import (
    Allocation,
    ClusterQueue,
    ClusterQueueQuota,
    ClusterQueueSample,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
    WorkloadTransition,
)
from tests.kube_api_server import FakeKubeAPI
from tests.kueue_fixtures import FIXTURES


@pytest.fixture
def expected() -> dict[str, Any]:
    """The fixture README's figures, machine-readable."""
    return json.loads((FIXTURES / "expected.json").read_text())


@pytest.fixture
def kube_api(kube: FakeKubeAPI) -> FakeKubeAPI:
    """The recorded fleet on a Kueue v1beta2 API server (``kube`` in tests/conftest.py)."""
    return kube


@pytest.fixture
def kube_cluster(db: None) -> Any:
    return Cluster.objects.create(name="gpu-east", display_name="GPU east")


# --- the fixture fleet's names, and what a sync wrote --------------------------------------------

GPU = "nvidia.com/gpu"
A1 = ("team-a", "job-llama-pretrain-8b-fbe70")
A3 = ("team-a", "job-llama-eval-70b-755d0")
B1 = ("team-b", "job-vit-ablation-3-73ebc")
B1_POD = ("team-b", "vit-ablation-3-0-ccthr")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def workload(key: tuple[str, str]) -> Workload:
    return Workload.objects.get(namespace=key[0], name=key[1])


def transitions(key: tuple[str, str]) -> list[tuple[str, datetime]]:
    return sorted(
        WorkloadTransition.objects.filter(
            workload__namespace=key[0], workload__name=key[1]
        ).values_list("kind", "at"),
        key=lambda pair: (pair[1], pair[0]),
    )


def while_watching(api: FakeKubeAPI, kind: str, action: Callable[[], None]) -> threading.Thread:
    """Run ``action`` once the sync has opened its WATCH of ``kind``."""

    def wait_then_act() -> None:
        deadline = time.monotonic() + 20
        while api.watch_count(kind) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def rows(cluster: Cluster) -> dict[str, Any]:
    """Everything a sync wrote for a cluster, without ids and bookkeeping times."""

    def strip(values: list[dict[str, Any]]) -> list[dict[str, Any]]:
        dropped = {"id", "cluster_id", "created_at", "updated_at", "observed_at"}
        return sorted(
            (
                {k: v for k, v in row.items() if k not in dropped and not k.endswith("_id")}
                for row in values
            ),
            key=repr,
        )

    return {
        "flavors": strip(list(ResourceFlavor.objects.filter(cluster=cluster).values())),
        "cohorts": strip(list(Cohort.objects.filter(cluster=cluster).values())),
        "queues": strip(
            list(ClusterQueue.objects.filter(cluster=cluster).values("cohort__name", "team__name"))
            + list(ClusterQueue.objects.filter(cluster=cluster).values())
        ),
        "quotas": strip(
            list(
                ClusterQueueQuota.objects.filter(cluster_queue__cluster=cluster).values(
                    "cluster_queue__name",
                    "flavor_name",
                    "resource",
                    "position",
                    "nominal",
                    "borrowing_limit",
                    "lending_limit",
                )
            )
        ),
        "local_queues": strip(list(LocalQueue.objects.filter(cluster=cluster).values())),
        "classes": strip(list(WorkloadPriorityClass.objects.filter(cluster=cluster).values())),
        "workloads": strip(
            list(Workload.objects.filter(cluster=cluster).values())
            + list(
                Workload.objects.filter(cluster=cluster).values(
                    "name", "local_queue__name", "cluster_queue__name"
                )
            )
        ),
        "transitions": strip(
            list(
                WorkloadTransition.objects.filter(workload__cluster=cluster).values(
                    "workload__name", "kind", "at", "reason", "message", "preemptor_uid"
                )
            )
        ),
        "allocations": strip(
            list(
                Allocation.objects.filter(cluster=cluster).values(
                    "namespace", "pod", "pod_uid", "node_name", "gpus", "workload__name"
                )
            )
        ),
        "nodes": strip(
            list(
                Node.objects.filter(cluster=cluster).values(
                    "name", "gpu_product", "flavor", "gpu_capacity", "gpu_allocatable"
                )
            )
        ),
        "samples": strip(
            list(
                ClusterQueueSample.objects.filter(cluster_queue__cluster=cluster).values(
                    "cluster_queue__name", "flavor_name", "total", "borrowed", "pending_demand"
                )
            )
        ),
    }
