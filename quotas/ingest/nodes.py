"""GPU Nodes -> rows: capacity, allocatable GPUs and MIG instances, pool and flavor.

A Node's flavor is the ResourceFlavor whose ``nodeLabels`` all match the node's labels; the one
with the most labels wins, then the name. Flavors without ``nodeLabels`` match no node, except
the flavor a quota source serves for a cluster whose quotas name no node pool (labelled
``gpu-ledger.io/scheduler`` other than kueue, ``quotas.sources.common.source_flavor``): it holds
every GPU node no other flavor matches. A flavor without the GPU product in its ``nodeLabels``
takes its nodes' most common product.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from core.mig import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from quotas import constants as c
from quotas.ingest.fields import read_dict, read_quantity
from quotas.ingest.rows import FlavorRow, NodeRow, ObjectMeta


def _count(value: object, what: str) -> int:
    amount = read_quantity(value, what)
    return int(amount) if amount > 0 else 0


def _whole_cluster(flavor: FlavorRow) -> bool:
    """The flavor a quota source serves for its cluster's every GPU node."""
    scheduler = flavor.meta.labels.get(c.LABEL_SCHEDULER, c.DEFAULT_SCHEDULER)
    return not flavor.node_labels and scheduler != c.DEFAULT_SCHEDULER


def parse_node(
    item: dict, meta: ObjectMeta, flavors: list[FlavorRow], pool_labels: Sequence[str]
) -> NodeRow | None:
    """A Node's row; None for a node with no GPUs, MIG instances or GPU product label."""
    status = read_dict(item.get("status"), "status")
    capacity = read_dict(status.get("capacity"), "status.capacity")
    allocatable = read_dict(status.get("allocatable"), "status.allocatable")
    mig = {
        name: _count(value, f"allocatable {name}")
        for name, value in sorted(allocatable.items())
        if name.startswith(MIG_RESOURCE_PREFIX)
    }
    gpu_capacity = _count(capacity.get(GPU_RESOURCE, "0"), "capacity nvidia.com/gpu")
    product = meta.labels.get(c.LABEL_GPU_PRODUCT, "")
    if not gpu_capacity and not mig and not product:
        return None
    matching = [
        flavor
        for flavor in flavors
        if flavor.node_labels
        and all(meta.labels.get(k) == v for k, v in flavor.node_labels.items())
    ]
    matching.sort(key=lambda flavor: (-len(flavor.node_labels), flavor.meta.name))
    matching += [flavor for flavor in flavors if _whole_cluster(flavor)]
    return NodeRow(
        meta=meta,
        gpu_product=product,
        node_pool=next((meta.labels[k] for k in pool_labels if meta.labels.get(k)), ""),
        flavor=matching[0].meta.name if matching else "",
        gpu_capacity=gpu_capacity,
        gpu_allocatable=_count(allocatable.get(GPU_RESOURCE, "0"), "allocatable nvidia.com/gpu"),
        mig_allocatable=mig,
    )


def fill_flavor_gpu_models(flavors: list[FlavorRow], nodes: list[NodeRow]) -> None:
    """A flavor without the product in its nodeLabels takes its nodes' most common product."""
    products: dict[str, Counter[str]] = defaultdict(Counter)
    for node in nodes:
        if node.flavor and node.gpu_product:
            products[node.flavor][node.gpu_product] += 1
    for flavor in flavors:
        if not flavor.gpu_model and products.get(flavor.meta.name):
            counts = products[flavor.meta.name]
            flavor.gpu_model = min(counts, key=lambda p: (-counts[p], p))
