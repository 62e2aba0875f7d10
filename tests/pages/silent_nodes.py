"""Nodes whose dcgm-exporter is silent, and a time-sliced node: a fixture for the GPU-state tests
(tests/pages/test_gpu_states.py and the browser tests)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.pages.conftest import _usage


@pytest.fixture
def silent(fleet_data):
    """node-silent: 8 GPUs seen before, its dcgm-exporter down now, a 8-GPU pod on it (from
    kube-state-metrics). node-dark: 4 GPUs seen before, silent, nobody known to hold them.
    node-sliced: 8 physical GPUs, GPU 7 time-sliced in two replicas (capacity 9)."""
    from fleet.models import Gpu, Node
    from ledger.models import GpuUsage

    cluster = fleet_data.cluster
    nodes = {}
    for name, capacity, count in (
        ("node-silent", 8, 8),
        ("node-dark", 4, 4),
        ("node-sliced", 9, 8),
    ):
        node = Node.objects.create(
            cluster=cluster,
            name=name,
            flavor="h100",
            gpu_product="NVIDIA-H100-80GB-HBM3",
            gpu_capacity=capacity,
            gpu_allocatable=capacity,
        )
        nodes[name] = node
        for index in range(count):
            Gpu.objects.create(
                cluster=cluster,
                node=node,
                host=name,
                uuid=f"GPU-{name}-{index}",
                index=index,
                model_name=node.gpu_product,
                time_sliced=name == "node-sliced" and index == 7,
            )
    GpuUsage.objects.bulk_create(
        [
            # Seen by DCGM an hour ago, silent in the newest window.
            *(
                _usage(cluster, fleet_data.now - timedelta(hours=1), gpu, activity=0.5)
                for gpu in Gpu.objects.filter(node__name__in=["node-silent", "node-dark"])
            ),
            _usage(
                cluster,
                fleet_data.now,
                None,
                allocated=True,
                pod="gang-0",
                activity=None,
                gpus=8.0,
                capacity_gpus=0.0,
                node_name="node-silent",
                team=fleet_data.team_b,
                cluster_queue=fleet_data.cq_b,
                workload=fleet_data.workload_b,
                namespace="ns-beta",
            ),
            *(
                _usage(cluster, fleet_data.now, gpu, activity=0.3, gpu_util=40.0)
                for gpu in Gpu.objects.filter(node__name="node-sliced")
            ),
        ]
    )
    return nodes
