"""fleet.inventory: Node rows from the API server sync and from DCGM windows, one set of rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleet.constants import NODE_SEEN_REFRESH_SECONDS
from fleet.inventory import ensure_nodes, mark_nodes_deleted, read_nodes, sync_nodes
from fleet.models import Node

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"


def listed(name: str, gpu_product: str = "", **fields) -> dict[str, dict]:
    return {
        name: {
            "gpu_product": gpu_product,
            "node_pool": "pool-a",
            "flavor": "h100",
            "gpu_capacity": 8,
            "gpu_allocatable": 8,
            "mig_allocatable": {},
            "labels": {"pool": "a"},
            **fields,
        }
    }


def test_a_window_creates_unknown_nodes_with_their_gpu_product_only(cluster):
    nodes = ensure_nodes(cluster, ["gpu-1", "gpu-2"], {"gpu-1": H100})

    assert sorted(nodes) == ["gpu-1", "gpu-2"]
    assert (nodes["gpu-1"].gpu_product, nodes["gpu-2"].gpu_product) == (H100, "")
    gpu_1 = Node.objects.get(cluster=cluster, name="gpu-1")
    assert (gpu_1.flavor, gpu_1.gpu_capacity, gpu_1.observed_at) == ("", 0, None)


def test_the_sync_takes_over_a_window_created_node_and_keeps_its_dcgm_product(cluster):
    ensure_nodes(cluster, ["gpu-1"], {"gpu-1": H100})

    written = sync_nodes(cluster, listed("gpu-1"), seen=None, now=NOW)

    node = Node.objects.get(cluster=cluster, name="gpu-1")
    assert (written.created, written.updated) == (0, 1)
    assert written.ids == {("gpu-1",): node.pk}
    assert (node.gpu_product, node.flavor, node.gpu_capacity, node.observed_at) == (
        H100,
        "h100",
        8,
        NOW,
    )


def test_a_window_fills_an_empty_product_but_never_overwrites_the_label(cluster):
    sync_nodes(
        cluster, {**listed("plain"), **listed("labelled", "NVIDIA-H100")}, seen=None, now=NOW
    )

    ensure_nodes(cluster, ["labelled", "plain"], {"labelled": H100, "plain": H100})

    products = dict(Node.objects.values_list("name", "gpu_product"))
    assert products == {"labelled": "NVIDIA-H100", "plain": H100}
    # The sync's fields stay the sync's.
    assert set(Node.objects.values_list("flavor", flat=True)) == {"h100"}


def test_the_same_listing_twice_writes_nothing_and_last_seen_is_refreshed_when_old(cluster):
    sync_nodes(cluster, listed("gpu-1"), seen=None, now=NOW)
    soon = NOW + timedelta(seconds=NODE_SEEN_REFRESH_SECONDS - 1)
    later = NOW + timedelta(seconds=NODE_SEEN_REFRESH_SECONDS + 1)

    again = sync_nodes(cluster, listed("gpu-1"), seen=None, now=soon)
    assert (again.created, again.updated) == (0, 0)
    assert Node.objects.get(name="gpu-1").observed_at == NOW

    sync_nodes(cluster, listed("gpu-1"), seen=None, now=later)
    assert Node.objects.get(name="gpu-1").observed_at == later


def test_nodes_missing_from_a_complete_list_or_deleted_by_a_watch_are_marked_and_come_back(
    cluster,
):
    sync_nodes(cluster, {**listed("a"), **listed("b"), **listed("c")}, seen=None, now=NOW)
    later = NOW + timedelta(minutes=1)

    written = sync_nodes(cluster, listed("a"), seen={("a",), ("b",)}, now=later)
    assert [Node.objects.get(pk=pk).name for pk in written.deleted] == ["c"]
    assert mark_nodes_deleted(cluster, ["b", "c", "unknown"], later) == 1

    assert dict(Node.objects.values_list("name", "deleted_at")) == {
        "a": None,
        "b": later,
        "c": later,
    }
    sync_nodes(cluster, listed("b"), seen=None, now=later)
    assert Node.objects.get(name="b").deleted_at is None
    assert sorted(read_nodes(cluster, ["a", "b", "c", "unknown"])) == ["a", "b", "c"]
