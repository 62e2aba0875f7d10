"""The fleet inventory: every write of Node and Gpu rows, for both sources that see them.

Nodes are seen by two sources, and this module holds the rules between them:

* The Kubernetes API server (:func:`sync_nodes`, called by ``quotas.store``) owns a node's
  fields: pool, flavor, capacity, labels. A node missing from a complete LIST gets
  ``deleted_at`` and one listed again has it cleared; a WATCH deletion is
  :func:`mark_nodes_deleted`. ``observed_at`` ("last seen") is set on every row written and
  otherwise refreshed once it is ``NODE_SEEN_REFRESH_SECONDS`` old: comparing it would rewrite
  every node on every sync.
* DCGM windows (:func:`ensure_nodes`, called by ``ledger.store``) create a node the API server
  has not listed (name and GPU product only) and fill ``gpu_product`` where it is empty; they
  never change anything else.

``gpu_product`` is the ``nvidia.com/gpu.product`` label when the node has one, else the DCGM
``modelName``: neither source erases what the other filled in.

GPUs come from DCGM only (:func:`upsert_gpus`): identity ``fleet_gpu_identity``, attributes from
the newest window seen, ``first_seen_at`` the earliest window, ``last_seen_at`` refreshed at most
every ``GPU_SEEN_REFRESH_SECONDS``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import BooleanField, ExpressionWrapper, Q
from django.utils import timezone

from core import bulk
from core.timewindows import Window
from fleet import constants as c
from fleet.ingest import GpuRow
from fleet.models import Cluster, Gpu, Node, gpu_key

# --- Nodes ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeInfo:
    """What a window's rows need of a stored node."""

    id: int
    flavor: str
    gpu_product: str


def read_nodes(cluster: Cluster, names: Sequence[str]) -> dict[str, NodeInfo]:
    """The stored nodes of ``cluster`` among ``names``, by name."""
    nodes: dict[str, NodeInfo] = {}
    scope = Node.objects.filter(cluster=cluster)
    for queryset in bulk.filter_in(scope, "name", names, c.LOOKUP_BATCH_SIZE):
        for name, node_id, flavor, product in bulk.fetch_rows(
            queryset, "name", "id", "flavor", "gpu_product"
        ):
            nodes[name] = NodeInfo(id=node_id, flavor=flavor, gpu_product=product)
    return nodes


def ensure_nodes(
    cluster: Cluster, names: Sequence[str], products: Mapping[str, str]
) -> dict[str, NodeInfo]:
    """DCGM's side: the nodes ``names`` (sorted), created when unknown; returns them by name.

    ``products``: node name -> DCGM ``modelName``, written to ``gpu_product`` where it is empty.
    """
    nodes = read_nodes(cluster, names)
    missing = [name for name in names if name not in nodes]
    if missing:
        bulk.insert_rows(
            Node,
            ("cluster_id", "name", "gpu_product"),
            [(cluster.pk, name, products.get(name, "")) for name in missing],
            unique_fields=["cluster", "name"],
        )
        # Read back rather than trust RETURNING: a conflict (the Kubernetes sync created the
        # node meanwhile) returns nothing, and the other fields are the sync's.
        nodes.update(read_nodes(cluster, missing))
    # Fill gpu_product where the Kubernetes sync has not: one UPDATE per GPU model.
    to_fill: dict[str, list[int]] = defaultdict(list)
    for name, info in nodes.items():
        product = products.get(name, "")
        if product and not info.gpu_product:
            to_fill[product].append(info.id)
            nodes[name] = NodeInfo(id=info.id, flavor=info.flavor, gpu_product=product)
    for product, ids in sorted(to_fill.items()):
        bulk.update_in(
            Node.objects.filter(gpu_product=""),
            "id",
            ids,
            c.LOOKUP_BATCH_SIZE,
            gpu_product=product,
            updated_at=timezone.now(),
        )
    return nodes


def sync_nodes(
    cluster: Cluster,
    listed: Mapping[str, Mapping[str, Any]],
    *,
    seen: set[tuple] | None,
    now: datetime,
) -> bulk.Upserted:
    """The API server's side: upsert the nodes ``listed`` (name -> fields) as of ``now``.

    The fields are ``gpu_product`` (the label, or empty), ``node_pool``, ``flavor``,
    ``gpu_capacity``, ``gpu_allocatable``, ``mig_allocatable`` and ``labels``. ``seen``: the
    ``(name,)`` of every node of a complete LIST (None otherwise); the others get ``deleted_at``.
    Returns what was written, with ids by ``(name,)`` for the nodes listed.
    """
    scope = Q(cluster=cluster)
    unlabelled = [(name,) for name, fields in listed.items() if not fields["gpu_product"]]
    products = {
        key[0]: row["gpu_product"]
        for key, row in bulk.read_keys(
            Node.objects.filter(scope),
            ("name",),
            unlabelled,
            ("gpu_product",),
            c.LOOKUP_BATCH_SIZE,
        ).items()
    }
    rows = {
        (name,): {
            **fields,
            # The DCGM modelName may have filled it; an absent label does not erase it.
            "gpu_product": fields["gpu_product"] or products.get(name) or "",
            "deleted_at": None,
        }
        for name, fields in listed.items()
    }
    written = bulk.upsert(
        Node,
        scope,
        ("name",),
        rows,
        parent={"cluster": cluster},
        batch_size=c.NODE_BATCH_SIZE,
        lookup_batch_size=c.LOOKUP_BATCH_SIZE,
        seen=seen,
        deleted_at=now,
        selective=True,
        stamp={"observed_at": now},
    )
    cutoff = now - timedelta(seconds=c.NODE_SEEN_REFRESH_SECONDS)
    old = Q(observed_at__isnull=True) | Q(observed_at__lt=cutoff)
    bulk.update_in(
        Node.objects.filter(scope, old),
        "name",
        sorted(listed),
        c.LOOKUP_BATCH_SIZE,
        observed_at=now,
    )
    return written


def mark_nodes_deleted(cluster: Cluster, names: Iterable[str], at: datetime) -> int:
    """The API server's side: nodes a WATCH saw deleted get ``deleted_at``; returns how many."""
    present = Node.objects.filter(cluster=cluster, deleted_at__isnull=True)
    return bulk.update_in(present, "name", sorted(set(names)), c.LOOKUP_BATCH_SIZE, deleted_at=at)


# --- GPUs ----------------------------------------------------------------------------------------

# Inventory columns a window can change, compared as one tuple against the stored row.
_GPU_ATTRIBUTES = (
    "node_id",
    "index",
    "model_name",
    "pci_bus_id",
    "mig_profile",
    "slices",
    "time_sliced",
)
_GPU_COLUMNS = (
    "cluster_id",
    "host",
    "uuid",
    "gi_id",
    *_GPU_ATTRIBUTES,
    "first_seen_at",
    "last_seen_at",
)


@dataclass
class GpusWritten:
    """What :func:`upsert_gpus` wrote: GPU key -> id and model name, and the counts."""

    ids: dict[str, int]
    models: dict[str, str]
    created: int
    seen_again: int


def upsert_gpus(
    cluster: Cluster,
    gpus: list[GpuRow],
    node_ids: Mapping[str, int],
    window: Window,
) -> GpusWritten:
    """Upsert the GPUs of one window; ``node_ids``: node name -> id of every host in it.

    One SELECT of the stored inventory; only new GPUs and GPUs whose attributes changed are
    upserted, the others get ``last_seen_at`` in one UPDATE (a steady-state window changes
    nothing else, and an upsert of 50,000 unchanged rows was the largest cost of its write).
    """
    end = window.end
    stored = _read_stored_gpus(cluster, sorted({gpu.host for gpu in gpus}), end)
    plan = _plan_gpu_writes(cluster.pk, gpus, node_ids, stored, end)
    if plan.keep_times:
        _restore_kept_times(plan.upserts, plan.keep_times)
    if plan.upserts:
        plan.ids.update(_upsert_gpu_rows(cluster, plan.upserts, plan.upsert_keys))
    bulk.update_in(Gpu.objects.all(), "id", plan.touch, c.LOOKUP_BATCH_SIZE, last_seen_at=end)
    return GpusWritten(
        ids=plan.ids, models=plan.models, created=plan.created, seen_again=len(gpus) - plan.created
    )


def _read_stored_gpus(cluster: Cluster, hosts: Sequence[str], end: datetime) -> dict[str, tuple]:
    """The stored GPUs of ``hosts``: key -> (id, host, uuid, gi_id, newest, current, earlier,
    *attributes), the flags telling how the stored times compare with the window ending ``end``.
    """
    # How the stored times compare with this window, worked out by the database: loading
    # 100,000 timestamps took most of this step's CPU (bench/ingest_pure.py). The times
    # themselves are read later, only for the rows an upsert rewrites.
    flags = {
        "newest": Q(last_seen_at__isnull=True) | Q(last_seen_at__lte=end),
        # Seen recently enough: last_seen_at is inventory bookkeeping, refreshed at most every
        # GPU_SEEN_REFRESH_SECONDS, so a steady-state window does not rewrite 50,000 GPU rows.
        "current": Q(
            last_seen_at__gte=end - timedelta(seconds=c.GPU_SEEN_REFRESH_SECONDS),
            last_seen_at__lte=end,
        ),
        "earlier": Q(first_seen_at__isnull=True) | Q(first_seen_at__gt=end),
    }
    stored_gpus = Gpu.objects.filter(cluster=cluster).annotate(
        **{name: ExpressionWrapper(q, output_field=BooleanField()) for name, q in flags.items()}
    )
    # Unpacked only for GPUs of this window (50,000 rows a window).
    existing: dict[str, tuple] = {}
    for queryset in bulk.filter_in(stored_gpus, "host", hosts, c.LOOKUP_BATCH_SIZE):
        for stored_row in bulk.fetch_rows(
            queryset, "id", "host", "uuid", "gi_id", *flags, *_GPU_ATTRIBUTES
        ):
            existing[gpu_key(stored_row[1], stored_row[2], stored_row[3])] = stored_row
    return existing


@dataclass
class _GpuPlan:
    """What one window's GPUs need written, worked out from the stored rows."""

    # GPU key -> id, for the GPUs already stored (the upsert returns the new ones').
    ids: dict[str, int] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    # Rows for ``_GPU_COLUMNS``, and the GPU key of each.
    upserts: list[tuple] = field(default_factory=list)
    upsert_keys: list[str] = field(default_factory=list)
    # Rows rewritten with a stored time kept: upserts position -> (id, keep first, keep last).
    keep_times: dict[int, tuple[int, bool, bool]] = field(default_factory=dict)
    # Seen again with nothing to change but last_seen_at: one UPDATE, not an upsert.
    touch: list[int] = field(default_factory=list)
    created: int = 0


def _plan_gpu_writes(
    cluster_id: int,
    gpus: list[GpuRow],
    node_ids: Mapping[str, int],
    existing: dict[str, tuple],
    end: datetime,
) -> _GpuPlan:
    """New GPUs and changed ones are upserted; attributes come from the newest window seen, so
    a window older than the stored row rewrites only ``first_seen_at``."""
    plan = _GpuPlan()
    for gpu in gpus:
        key = gpu.key
        plan.models[key] = gpu.model_name
        wanted = (
            node_ids.get(gpu.host),
            gpu.index,
            gpu.model_name,
            gpu.pci_bus_id,
            gpu.mig_profile,
            gpu.slices,
            gpu.time_sliced,
        )
        stored = existing.get(key)
        if stored is None:
            plan.created += 1
            plan.upserts.append((cluster_id, gpu.host, gpu.uuid, gpu.gi_id, *wanted, end, end))
            plan.upsert_keys.append(key)
            continue
        gpu_id, newest, current, earlier = stored[0], stored[4], stored[5], stored[6]
        attributes = stored[7:]
        plan.ids[key] = gpu_id
        changed = newest and attributes != wanted
        if changed or earlier:
            if not earlier or not newest:
                plan.keep_times[len(plan.upserts)] = (gpu_id, not earlier, not newest)
            plan.upserts.append(
                (
                    cluster_id,
                    gpu.host,
                    gpu.uuid,
                    gpu.gi_id,
                    *(wanted if newest else attributes),
                    end,
                    end,
                )
            )
            plan.upsert_keys.append(key)
        elif newest and not current:
            plan.touch.append(gpu_id)
    return plan


def _restore_kept_times(
    upserts: list[tuple], keep_times: dict[int, tuple[int, bool, bool]]
) -> None:
    """Put the stored first/last seen times back into the upsert rows that keep them."""
    times: dict[int, tuple[datetime | None, datetime | None]] = {}
    for queryset in bulk.filter_in(
        Gpu.objects.all(),
        "id",
        sorted(gpu_id for gpu_id, _, _ in keep_times.values()),
        c.LOOKUP_BATCH_SIZE,
    ):
        for gpu_id, first_seen, last_seen in queryset.values_list(
            "id", "first_seen_at", "last_seen_at"
        ):
            times[gpu_id] = (first_seen, last_seen)
    for position, (gpu_id, keep_first, keep_last) in keep_times.items():
        first_seen, last_seen = times[gpu_id]
        row = upserts[position]
        upserts[position] = (
            *row[:-2],
            first_seen if keep_first else row[-2],
            last_seen if keep_last else row[-1],
        )


def _upsert_gpu_rows(
    cluster: Cluster, upserts: list[tuple], upsert_keys: list[str]
) -> dict[str, int]:
    """Upsert the rows; GPU key -> id of each."""
    returned = bulk.insert_rows(
        Gpu,
        _GPU_COLUMNS,
        upserts,
        unique_fields=["cluster", "host", "uuid", "gi_id"],
        returning=True,
        # The attributes a window can change (by field name: ``node_id`` is ``node``), the times.
        update_fields=[
            *("node" if column == "node_id" else column for column in _GPU_ATTRIBUTES),
            "first_seen_at",
            "last_seen_at",
            "updated_at",
        ],
    )
    ids: dict[str, int] = {}
    unresolved: set[str] = set()
    for key, row in zip(upsert_keys, upserts, strict=True):
        gpu_id = returned.get(row[:4])
        if gpu_id is None:
            unresolved.add(row[1])
        else:
            ids[key] = gpu_id
    if unresolved:
        # Databases that cannot return ids from an upsert: read them back.
        ids.update(_read_gpu_ids(cluster, sorted(unresolved)))
    return ids


def _read_gpu_ids(cluster: Cluster, hosts: Sequence[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    scope = Gpu.objects.filter(cluster=cluster)
    for queryset in bulk.filter_in(scope, "host", hosts, c.LOOKUP_BATCH_SIZE):
        for gpu_id, host, uuid, gi_id in queryset.values_list("id", "host", "uuid", "gi_id"):
            ids[gpu_key(host, uuid, gi_id)] = gpu_id
    return ids
