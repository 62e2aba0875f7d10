"""Who holds each GPU now and what it does: the one story the node page, the GPU page, the fleet
map's cells, tooltips and node table tell (issue 11, "One story per GPU").

A GPU's state comes from its cluster's newest collection window (``latest_windows``):

- a usage row of the GPU that is allocated: **held**, and ``active`` or ``idle`` by its SM_ACTIVE
  against the idle threshold, or **held · no telemetry** when the row has no activity;
- a usage row that is not allocated: **free** (dcgm-exporter reported it without a pod);
- no usage row: the GPU's dcgm-exporter said nothing. Allocation still comes from
  kube-state-metrics / the API server: the window's allocated rows without a GPU (``gpu`` empty)
  on the GPU's node are its holders. DCGM does not say which of the node's GPUs a pod holds, so
  they are placed on the node's silent GPUs in index order (``placed=False``), each drawn
  **held · no telemetry** with its holder, then on GPUs DCGM reports without a pod (lost pod
  labels). A silent GPU no allocation covers is **no telemetry**: never "free", never "idle".
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings

from core import figures as formulas
from dashboard.queries.holders import HOLDER_FIELDS, Holder, holder_from_row
from dashboard.queries.now import latest_usage
from fleet.models import Gpu

FREE = "free"
ACTIVE = "active"
IDLE = "idle"
HELD_NO_TELEMETRY = "held_no_telemetry"
NO_TELEMETRY = "no_telemetry"
HELD = (ACTIVE, IDLE, HELD_NO_TELEMETRY)
STATE_LABELS = {
    FREE: "free",
    ACTIVE: "held · active",
    IDLE: "held · idle",
    HELD_NO_TELEMETRY: "held · no telemetry",
    NO_TELEMETRY: "no telemetry",
}
# Floating-point slack when MIG fractions add up to a holder's GPUs.
_EPSILON = 1e-6


@dataclass
class GpuState:
    """One GPU now: its reading (None without telemetry), holders and state."""

    gpu: Gpu
    activity: float | None = None
    gpu_util: float | None = None
    fb_used_mib: float | None = None
    reported: bool = False
    holders: list[Holder] = field(default_factory=list)
    shared: bool = False
    # False when the holders come from the allocation alone (DCGM silent): which of the node's
    # GPUs they hold is inferred.
    placed: bool = True

    @property
    def state(self) -> str:
        if self.holders:
            if self.activity is None:
                return HELD_NO_TELEMETRY
            return IDLE if self.activity < settings.GPULEDGER_IDLE_THRESHOLD else ACTIVE
        return FREE if self.reported else NO_TELEMETRY

    @property
    def held(self) -> bool:
        return bool(self.holders)

    @property
    def label(self) -> str:
        return STATE_LABELS[self.state]

    @property
    def activity_pct(self) -> float | None:
        return None if self.activity is None else self.activity * 100.0

    @property
    def fb_used_gib(self) -> float | None:
        return None if self.fb_used_mib is None else self.fb_used_mib / 1024.0


def _node_name(gpu: Gpu, node_names: dict[int, str] | None) -> str:
    if gpu.node_id is None:
        return gpu.host
    if node_names is not None and gpu.node_id in node_names:
        return node_names[gpu.node_id]
    return gpu.node.name  # type: ignore[union-attr]


class GpuStates(dict[int, GpuState]):
    """gpu id → ``GpuState``, plus the held GPUs no GPU of their node could take (``unplaced``:
    (cluster id, node name) → GPUs), so a node's held count never drops an allocation."""

    def __init__(self, states: dict[int, GpuState]) -> None:
        super().__init__(states)
        self.unplaced: dict[tuple[int, str], float] = defaultdict(float)

    def unplaced_on(self, cluster_id: int, node_name: str) -> float:
        return self.unplaced.get((cluster_id, node_name), 0.0)


def gpu_states(
    gpus: list[Gpu],
    windows: dict[int, datetime],
    allowed: set[int] | None,
    node_names: dict[int, str] | None = None,
) -> GpuStates:
    """gpu id → its ``GpuState`` in its cluster's newest window (two queries at most).

    ``gpus`` should carry their node (``select_related("node")``, or ``node_names``: node id →
    name) and include every GPU of the nodes asked about, so an allocation without DCGM series
    is placed across all of them: first on the node's silent GPUs, then on those DCGM reports
    without a pod (their pod labels were lost: the allocation says they are held); whole GPUs on
    whole GPUs, MIG slices on MIG instances.
    """
    states = GpuStates({gpu.pk: GpuState(gpu) for gpu in gpus})
    if not states or not windows:
        return states
    rows = (
        latest_usage(windows).filter(gpu_id__in=list(states)).values(*HOLDER_FIELDS, "fb_used_mib")
    )
    for row in rows:
        state = states[row["gpu_id"]]
        state.reported = True
        if row["activity"] is not None:
            state.activity = row["activity"]
        if row["gpu_util"] is not None:
            state.gpu_util = row["gpu_util"]
        if row["fb_used_mib"] is not None:
            state.fb_used_mib = row["fb_used_mib"]
        if row["allocated"]:
            state.holders.append(holder_from_row(row, allowed))
            state.shared = state.shared or bool(row["shared"])
    by_node: dict[tuple[int, str], list[GpuState]] = defaultdict(list)
    for state in states.values():
        by_node[(state.gpu.cluster_id, _node_name(state.gpu, node_names))].append(state)
    unplaced = (
        latest_usage(windows)
        .filter(
            gpu_id__isnull=True,
            allocated=True,
            cluster_id__in={cluster_id for cluster_id, _ in by_node},
            node_name__in={name for _, name in by_node},
        )
        .values(*HOLDER_FIELDS, "cluster_id", "node_name")
        .order_by("namespace", "pod")
    )
    for row in unplaced:
        key = (row["cluster_id"], row["node_name"])
        candidates = sorted(
            (s for s in by_node.get(key, []) if not s.held),
            key=lambda s: (s.reported, s.gpu.index, s.gpu.gi_id),
        )
        needed = float(row["gpus"] or 0.0)
        # Whole GPUs (nvidia.com/gpu) never sit on a MIG instance; MIG slices only there.
        whole = abs(needed - round(needed)) <= _EPSILON
        holder = holder_from_row(row, allowed)
        for state in candidates:
            if needed <= _EPSILON:
                break
            if whole == bool(state.gpu.gi_id):
                continue
            state.holders.append(holder)
            state.placed = False
            needed -= state.gpu.fraction
        if needed > _EPSILON:
            states.unplaced[key] += needed
    return states


@dataclass
class NodeStory:
    """A node's GPUs now, summed from its ``GpuState``s."""

    devices: int = 0
    gpus: float = 0.0
    held: float = 0.0
    held_devices: int = 0
    held_no_telemetry: float = 0.0
    no_telemetry: float = 0.0
    idle: float = 0.0
    active_sum: float = 0.0
    telemetry: float = 0.0

    @property
    def utilization(self) -> float | None:
        return formulas.utilization(self.active_sum, self.telemetry)


def node_story(states: list[GpuState], unplaced: float = 0.0) -> NodeStory:
    """Held GPUs (MIG by slices), how many of them lack telemetry, and their utilization.

    ``unplaced``: GPUs the allocation says are held on the node beyond those it could be placed
    on (``GpuStates.unplaced_on``); they count as held without telemetry.
    """
    story = NodeStory(held=unplaced, held_no_telemetry=unplaced, no_telemetry=unplaced)
    for state in states:
        fraction = state.gpu.fraction
        story.devices += 1
        story.gpus += fraction
        if state.held:
            story.held += fraction
            story.held_devices += 1
            if state.activity is None:
                story.held_no_telemetry += fraction
            else:
                story.telemetry += fraction
                story.active_sum += state.activity * fraction
                if state.state == IDLE:
                    story.idle += fraction
        if state.activity is None:
            story.no_telemetry += fraction
    return story
