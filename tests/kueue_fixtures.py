"""The recorded Kueue fleet of tests/fixtures/kueue (its README describes it), in either Kueue
version's shape, for ``tests.kube_api_server.FakeKubeAPI`` to serve."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.kube_api_server import FakeKubeAPI

KUEUE_GROUP = "kueue.x-k8s.io"
FIXTURES = Path(__file__).parent / "fixtures" / "kueue"

FIXTURE_FILES = {
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "Workload": "workloads",
    "WorkloadPriorityClass": "workloadpriorityclasses",
}


def fixture_items(kind: str, version: str = "v1beta2") -> list[dict[str, Any]]:
    """The fixture objects of one kind in one Kueue version's shape."""
    if kind == "Pod":
        return json.loads((FIXTURES / "pods.v1.json").read_text())["items"]
    if kind == "Node":
        return fixture_nodes()
    base = FIXTURE_FILES[kind]
    path = FIXTURES / f"{base}.{version}.json"
    if not path.exists():
        # WorkloadPriorityClass has the same shape in both versions; only apiVersion differs.
        path = FIXTURES / f"{base}.v1beta2.json"
    items = json.loads(path.read_text())["items"]
    for item in items:
        item["apiVersion"] = f"{KUEUE_GROUP}/{version}"
    return items


def fixture_nodes() -> list[dict[str, Any]]:
    """The fixture fleet's nodes (README "Cluster and quotas"): 8 H100 and 4 A100, 8 GPUs each."""
    nodes = []
    for pool, product, count in (
        ("h100", "NVIDIA-H100-80GB-HBM3", 8),
        ("a100", "NVIDIA-A100-SXM4-80GB", 4),
    ):
        for index in range(1, count + 1):
            name = f"gpu-node-{pool}-{index:02d}"
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "uid": f"00000000-0000-4000-8000-{index:04d}{pool:0>8}",
                        "creationTimestamp": "2026-06-01T08:00:00Z",
                        "labels": {
                            "kubernetes.io/hostname": name,
                            "cloud.example.com/gpu-pool": pool,
                            "nvidia.com/gpu.product": product,
                            "nvidia.com/gpu.count": "8",
                        },
                    },
                    "spec": {
                        "taints": [
                            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
                        ]
                    },
                    "status": {
                        "capacity": {"cpu": "224", "memory": "2063731Mi", "nvidia.com/gpu": "8"},
                        "allocatable": {
                            "cpu": "222",
                            "memory": "2061683Mi",
                            "nvidia.com/gpu": "8",
                        },
                        "conditions": [
                            {
                                "type": "Ready",
                                "status": "True",
                                "reason": "KubeletReady",
                                "lastTransitionTime": "2026-06-01T08:05:00Z",
                            }
                        ],
                        "nodeInfo": {"kubeletVersion": "v1.34.0"},
                    },
                }
            )
    return nodes


def load_fixtures(api: FakeKubeAPI, version: str = "v1beta2") -> FakeKubeAPI:
    """Serve tests/fixtures/kueue in the given Kueue version's shape."""
    for kind in (*FIXTURE_FILES, "Pod", "Node"):
        api.load(kind, fixture_items(kind, version))
    return api
