"""GpuUsage rows of one window: replaced as a whole, so a re-run or late data leaves one copy.

The facts of (cluster, window_end) are deleted and written again with their holdings
(``ledger.models.usage``): PostgreSQL gets the facts by binary COPY straight into the window's
partition, other databases by ``core.bulk.insert_rows``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime

from django.db import connection

from core.timewindows import Window
from fleet.ingest import UsageRow
from fleet.inventory import NodeInfo
from fleet.models import Cluster
from ledger.models.usage import (
    FACT_COUNTS,
    FACT_FIGURES,
    HOLDING_COLUMNS,
    UsageFact,
    UsageHolding,
    UsageWindow,
    write_wide_rows,
)
from ledger.store.owners import Owner
from quotas.allocations import PodKey

# A wide row's columns, in ``usage_values``'s order: the window, the holding's (all but its
# window length, which the window gives), then the figures.
USAGE_COLUMNS = (
    "cluster_id",
    "window_start",
    "window_end",
    *HOLDING_COLUMNS[:-1],
    "sm_active",
    "pipe_tensor_active",
    "dram_active",
    "gr_engine_active",
    "gpu_util",
    "fb_used_mib",
    "activity",
    "activity_source",
    "samples",
    "expected_samples",
    "created_at",
)


def usage_values(
    cluster: Cluster,
    rows: Iterable[UsageRow],
    window: Window,
    gpu_ids: Mapping[str, int],
    gpu_models: Mapping[str, str],
    nodes: Mapping[str, NodeInfo],
    owners: Mapping[PodKey, Owner],
    now: datetime,
) -> Iterator[tuple]:
    """GpuUsage rows as tuples in ``USAGE_COLUMNS`` order.

    What rows share is worked out once (per node, GPU and pod), not once per row: the
    per-row lookups and attribute reads were most of the ~0.2 s of CPU this took for 50,000
    rows (bench/ingest_pure.py).
    """
    cluster_id, start, end = cluster.pk, window.start, window.end
    # node name -> (flavor, GPU product); GPU key -> (id, model); pod -> owner ids.
    node_facts = {name: (node.flavor, node.gpu_product) for name, node in nodes.items()}
    gpu_facts = {key: (gpu_ids.get(key), model) for key, model in gpu_models.items()}
    no_owner = (None, None, None, None)
    owner_ids = {
        pod: (owner.workload_id, owner.local_queue_id, owner.cluster_queue_id, owner.team_id)
        for pod, owner in owners.items()
    }
    for row in rows:
        node = node_facts.get(row.node_name) or node_facts.get(row.host)
        key = row.gpu_key
        if key:
            gpu_id, model = gpu_facts.get(key) or (gpu_ids.get(key), "")
        else:
            gpu_id, model = None, node[1] if node else ""
        yield (
            cluster_id,
            start,
            end,
            gpu_id,
            key,
            row.namespace,
            row.pod,
            row.container,
            row.node_name,
            node[0] if node else "",
            model,
            *(owner_ids.get((row.namespace, row.pod), no_owner) if row.pod else no_owner),
            row.allocated,
            row.gpus,
            row.capacity_gpus,
            row.shared,
            row.sm_active,
            row.pipe_tensor_active,
            row.dram_active,
            row.gr_engine_active,
            row.gpu_util,
            row.fb_used_mib,
            row.activity,
            row.activity_source,
            row.samples,
            row.expected_samples,
            now,
        )


# Where a holding's and a fact's values sit in a ``usage_values`` tuple.
_AT = {name: position for position, name in enumerate(USAGE_COLUMNS)}
_HELD = [_AT[name] for name in HOLDING_COLUMNS[:-1]]
_FIGURES = [_AT[name] for name in (*FACT_FIGURES, *FACT_COUNTS)]


def replace_usage(
    cluster: Cluster,
    rows: list[UsageRow],
    window: Window,
    gpu_ids: Mapping[str, int],
    gpu_models: Mapping[str, str],
    nodes: Mapping[str, NodeInfo],
    owners: Mapping[PodKey, Owner],
    now: datetime,
) -> int:
    delete_window(cluster.pk, window.end)
    if not rows:
        return 0
    seconds = (window.end - window.start).total_seconds()
    identities = []
    figures = []
    for values in usage_values(cluster, rows, window, gpu_ids, gpu_models, nodes, owners, now):
        identities.append((*(values[i] for i in _HELD), seconds))
        figures.append(tuple(values[i] for i in _FIGURES))
    write_wide_rows(cluster.pk, window.start, window.end, identities, figures)
    return len(rows)


def delete_window(cluster_id: int, end: datetime) -> int:
    """Delete the cluster's facts of the window ending at ``end`` and its window row."""
    deleted, _ = UsageWindow.objects.filter(cluster_id=cluster_id, window_end=end).delete()
    if not deleted:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {UsageFact._meta.db_table} WHERE window_end = %s AND holding_id IN "  # noqa: S608
            f"(SELECT id FROM {UsageHolding._meta.db_table} WHERE cluster_id = %s)",
            [connection.ops.adapt_datetimefield_value(end), cluster_id],
        )
        return cursor.rowcount
