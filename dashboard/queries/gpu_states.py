"""Who holds each GPU now and what it does: the one story the node page, the GPU page, the fleet
map's cells, tooltips and node table tell.

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

The node and GPU pages pass their few ``Gpu`` instances; the fleet map passes ``GpuRef`` tuples
(``gpu_refs``) for its hundreds of GPUs, and its node table, which shows counts, not holders,
reads the states without the holders' names (``holders=False``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol

from django.db.models import QuerySet

from core import ratios as formulas
from dashboard.queries.holders import HOLDER_IDENTITY, Holder, holder_from_row
from dashboard.queries.now import latest_usage
from fleet.models import MIG_COMPUTE_SLICES, Gpu
from ledger.figures import IDLE as IDLE_ROWS
from ledger.figures import thresholds

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


class GpuLike(Protocol):
    """What a GPU's state needs of it: a ``Gpu`` or a ``GpuRef``."""

    @property
    def pk(self) -> Any: ...
    @property
    def cluster_id(self) -> int: ...
    @property
    def node_id(self) -> int | None: ...
    @property
    def host(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def gi_id(self) -> str: ...
    @property
    def mig_profile(self) -> str: ...
    @property
    def model_name(self) -> str: ...
    @property
    def slices(self) -> int: ...
    @property
    def time_sliced(self) -> bool: ...
    @property
    def fraction(self) -> float: ...


@dataclass(frozen=True, slots=True)
class GpuRef:
    """The columns of a ``Gpu`` its state and the fleet map's cell need, read as one tuple.

    The map shows 800 GPUs a page: model instances of them (every column, four timestamps)
    cost more than reading their states.
    """

    FIELDS: ClassVar[tuple[str, ...]] = (
        "pk",
        "cluster_id",
        "node_id",
        "host",
        "index",
        "gi_id",
        "mig_profile",
        "model_name",
        "slices",
        "time_sliced",
    )

    pk: int
    cluster_id: int
    node_id: int | None
    host: str
    index: int
    gi_id: str
    mig_profile: str
    model_name: str
    slices: int
    time_sliced: bool

    @property
    def fraction(self) -> float:
        """As ``Gpu.fraction``: 1 for a whole GPU, N/7 for a MIG `Ng` instance."""
        return self.slices / MIG_COMPUTE_SLICES


def node_gpus(node_ids: list[int]) -> QuerySet[Gpu]:
    """The physical GPUs of these nodes in node, index and MIG instance order."""
    return Gpu.objects.physical().filter(node_id__in=node_ids).order_by("node_id", "index", "gi_id")


def gpu_refs(gpus: QuerySet[Gpu]) -> list[GpuRef]:
    """These GPUs as ``GpuRef`` tuples, in the query's order (one query)."""
    return [GpuRef(*row) for row in gpus.values_list(*GpuRef.FIELDS)]


@dataclass
class GpuState:
    """One GPU now: its reading (None without telemetry), holders and state.

    ``allocated``: a pod holds it. ``holders`` names them, unless the states were read without
    holders (``gpu_states(holders=False)``), where it stays empty.
    """

    gpu: GpuLike
    activity: float | None = None
    gpu_util: float | None = None
    fb_used_mib: float | None = None
    reported: bool = False
    allocated: bool = False
    holders: list[Holder] = field(default_factory=list)
    shared: bool = False
    # False when the holders come from the allocation alone (DCGM silent): which of the node's
    # GPUs they hold is inferred.
    placed: bool = True

    @property
    def state(self) -> str:
        if self.allocated:
            if self.activity is None:
                return HELD_NO_TELEMETRY
            held = {"allocated": True, "activity": self.activity}
            return IDLE if IDLE_ROWS.test(held, thresholds()) else ACTIVE
        return FREE if self.reported else NO_TELEMETRY

    @property
    def held(self) -> bool:
        return self.allocated

    @property
    def label(self) -> str:
        return STATE_LABELS[self.state]

    @property
    def activity_pct(self) -> float | None:
        return None if self.activity is None else self.activity * 100.0

    @property
    def fb_used_gib(self) -> float | None:
        return None if self.fb_used_mib is None else self.fb_used_mib / 1024.0


def _node_name(gpu: GpuLike, node_names: dict[int, str] | None) -> str:
    if gpu.node_id is None:
        return gpu.host
    if node_names is not None and gpu.node_id in node_names:
        return node_names[gpu.node_id]
    if isinstance(gpu, Gpu):
        return gpu.node.name  # type: ignore[union-attr]
    raise ValueError(f"node_names has no name for node {gpu.node_id} of GPU {gpu.pk}")


class GpuStates(dict[int, GpuState]):
    """gpu id → ``GpuState``, plus the held GPUs no GPU of their node could take (``unplaced``:
    (cluster id, node name) → GPUs), so a node's held count never drops an allocation."""

    def __init__(self, states: dict[int, GpuState]) -> None:
        super().__init__(states)
        self.unplaced: dict[tuple[int, str], float] = defaultdict(float)

    def unplaced_on(self, cluster_id: int, node_name: str) -> float:
        return self.unplaced.get((cluster_id, node_name), 0.0)


# A GPU's reading in a window; with holders, the holder's fields (``HOLDER_IDENTITY``) too.
_READING = ("gpu_id", "allocated", "shared", "activity", "gpu_util", "fb_used_mib")
_IDENTITY = tuple(name for name in HOLDER_IDENTITY if name not in _READING)


def gpu_states(
    gpus: Sequence[GpuLike],
    windows: dict[int, datetime],
    allowed: set[int] | None,
    node_names: dict[int, str] | None = None,
    *,
    holders: bool = True,
    gpu_query: QuerySet[Gpu] | None = None,
    nodes: Iterable[tuple[int, str]] = (),
) -> GpuStates:
    """gpu id → its ``GpuState`` in its cluster's newest window (two queries at most).

    ``gpus`` should carry their node (``select_related("node")``, or ``node_names``: node id →
    name) and include every GPU of the nodes asked about, so an allocation without DCGM series
    is placed across all of them: first on the node's silent GPUs, then on those DCGM reports
    without a pod (their pod labels were lost: the allocation says they are held); whole GPUs on
    whole GPUs, MIG slices on MIG instances.

    ``holders=False`` reads who holds nothing but that someone does (``GpuState.allocated``;
    ``holders`` stay empty): the states and every figure of ``node_story`` are the same, without
    the joins to workloads and teams.

    ``gpu_query``: the same GPUs as a query, which the usage read then takes as a subquery; an
    800-id literal list costs more to send than the rows it finds.

    ``nodes``: (cluster id, node name) of the nodes asked about, so a node DCGM has never
    reported a GPU of still counts what its pods hold (all of it unplaced).
    """
    states = GpuStates({gpu.pk: GpuState(gpu) for gpu in gpus})
    asked = list(nodes)
    if not windows or not (states or asked):
        return states
    identity = _IDENTITY if holders else ()
    usage = latest_usage(windows)
    if gpu_query is None:
        usage = usage.filter(gpu_id__in=list(states))
    else:
        usage = usage.filter(gpu_id__in=gpu_query.values("pk"))
    rows = usage.values_list(*identity, *_READING)
    names = (*identity, *_READING)
    for values in rows:
        row = dict(zip(names, values, strict=True))
        state = states[row["gpu_id"]]
        state.reported = True
        if row["activity"] is not None:
            state.activity = row["activity"]
        if row["gpu_util"] is not None:
            state.gpu_util = row["gpu_util"]
        if row["fb_used_mib"] is not None:
            state.fb_used_mib = row["fb_used_mib"]
        if row["allocated"]:
            state.allocated = True
            if holders:
                state.holders.append(holder_from_row(row, allowed))
            state.shared = state.shared or bool(row["shared"])
    by_node: dict[tuple[int, str], list[GpuState]] = defaultdict(list)
    for state in states.values():
        by_node[(state.gpu.cluster_id, _node_name(state.gpu, node_names))].append(state)
    for key in asked:
        by_node.setdefault(key, [])
    unplaced = (
        latest_usage(windows)
        .filter(
            gpu_id__isnull=True,
            allocated=True,
            cluster_id__in={cluster_id for cluster_id, _ in by_node},
            node_name__in={name for _, name in by_node},
        )
        .order_by("namespace", "pod")
        .values_list(*identity, "cluster_id", "node_name", "gpus")
    )
    unplaced_names = (*identity, "cluster_id", "node_name", "gpus")
    for values in unplaced:
        row = dict(zip(unplaced_names, values, strict=True))
        key = (row["cluster_id"], row["node_name"])
        candidates = sorted(
            (s for s in by_node.get(key, []) if not s.held),
            key=lambda s: (s.reported, s.gpu.index, s.gpu.gi_id),
        )
        needed = float(row["gpus"] or 0.0)
        # Whole GPUs (nvidia.com/gpu) never sit on a MIG instance; MIG slices only there.
        whole = abs(needed - round(needed)) <= _EPSILON
        holder = holder_from_row(row, allowed) if holders else None
        for state in candidates:
            if needed <= _EPSILON:
                break
            if whole == bool(state.gpu.gi_id):
                continue
            state.allocated = True
            if holder is not None:
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
