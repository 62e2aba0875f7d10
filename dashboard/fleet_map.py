"""The fleet map: its filters, the nodes and GPUs behind it, and its nodes × GPUs heatmap.

The page (``dashboard.views.fleet_map``) lists a page of nodes with their figures now; its chart
(``dashboard.charts.fleet_map``) draws the same page of nodes, one cell per GPU coloured by its
state now (``dashboard.queries.gpu_states``: the story the node and GPU pages tell), by the team
holding it, or by the mean SM_ACTIVE over the range. A GPU without telemetry is never free or
idle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.paginator import Page
from django.db.models import Avg, Exists, OuterRef, Q, QuerySet
from django.http import HttpRequest

from core import plotting
from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.decorators import BadParameter, choice_param, int_param
from dashboard.frame import paginate
from dashboard.queries.gpu_states import (
    FREE,
    HELD_NO_TELEMETRY,
    IDLE,
    NO_TELEMETRY,
    GpuState,
    GpuStates,
    NodeStory,
    gpu_refs,
    gpu_states,
    node_gpus,
    node_story,
)
from dashboard.queries.now import latest_usage
from dashboard.templatetags.formatting import gpu_label
from fleet.models import MIG_COMPUTE_SLICES, Gpu, Node
from ledger.models import GpuUsage
from quotas.access import sees_team
from quotas.models import Team

MAP_NODES_PER_PAGE = 100
MAP_GROUPS = ("flavor", "pool", "none")
MAP_VALUES = ("latest", "mean", "team")
# What the map's table and chart show of a node and its cluster: not the JSON columns (labels,
# MIG allocatable, Prometheus headers) nor the cluster's settings, read 100 times a page.
MAP_NODE_FIELDS = (
    "cluster_id",
    "name",
    "gpu_product",
    "node_pool",
    "flavor",
    "gpu_capacity",
    "cluster__name",
    "cluster__display_name",
)


@dataclass
class MapQuery:
    """The fleet map's filters, parsed once for the page and its chart."""

    flavor: str = ""
    pool: str = ""
    team: int | None = None
    q: str = ""
    group: str = "flavor"
    value: str = "latest"
    params: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_request(cls, request: HttpRequest) -> MapQuery:
        query = cls(
            flavor=request.GET.get("flavor", "").strip(),
            pool=request.GET.get("pool", "").strip(),
            team=int_param(request, "team"),
            q=request.GET.get("q", "").strip()[:200],
            group=choice_param(request, "group", MAP_GROUPS, "flavor"),
            value=choice_param(request, "value", MAP_VALUES, "latest"),
        )
        if query.team is not None and not sees_team(allowed_team_ids(request), query.team):
            # The same answer for a team that does not exist: which nodes another team holds
            # is that team's detail (quotas.access).
            raise BadParameter(f"team={query.team} is not a team you can filter by")
        query.params = {
            key: str(value)
            for key, value in (
                ("flavor", query.flavor),
                ("pool", query.pool),
                ("team", query.team or ""),
                ("q", query.q),
                ("group", query.group),
                ("value", query.value),
            )
            if value
        }
        return query

    @property
    def order(self) -> list[str]:
        if self.group == "flavor":
            return ["flavor", "cluster__name", "name"]
        if self.group == "pool":
            return ["node_pool", "cluster__name", "name"]
        return ["cluster__name", "name"]


def map_nodes(query: MapQuery, windows: dict[int, datetime]) -> QuerySet[Node]:
    # MIG nodes under the "mixed" strategy advertise nvidia.com/gpu: 0, so GPUs seen count too.
    nodes = Node.objects.present().filter(
        Q(gpu_capacity__gt=0) | Exists(Gpu.objects.filter(node=OuterRef("pk")))
    )
    if query.flavor:
        nodes = nodes.filter(flavor=query.flavor)
    if query.pool:
        nodes = nodes.filter(node_pool=query.pool)
    if query.q:
        nodes = nodes.filter(name__icontains=query.q)
    if query.team is not None:
        held = latest_usage(windows).filter(team_id=query.team, allocated=True)
        nodes = nodes.filter(
            cluster_id__in=list(windows), name__in=held.values("node_name").distinct()
        )
    return nodes.select_related("cluster").only(*MAP_NODE_FIELDS).order_by(*query.order)


def map_page(
    request: HttpRequest, query: MapQuery, windows: dict[int, datetime]
) -> tuple[Page, str]:
    """The page of nodes the map shows (its page and its chart show the same one)."""
    return paginate(request, map_nodes(query, windows), MAP_NODES_PER_PAGE)


def node_choices() -> tuple[list[str], list[str]]:
    """The distinct non-empty flavors and node pools of present nodes, for the filters: one
    query (the distinct pairs are few)."""
    pairs = Node.objects.present().values_list("flavor", "node_pool").distinct().order_by()
    flavors: set[str] = set()
    pools: set[str] = set()
    for flavor, pool in pairs:
        flavors.add(flavor)
        pools.add(pool)
    return sorted(flavors - {""}), sorted(pools - {""})


def team_choices(allowed: set[int] | None) -> list[Team]:
    """The teams the map's "held by team" filter offers: those the user may see."""
    teams = Team.objects.only("pk", "name", "display_name").order_by("name")
    return list(teams if allowed is None else teams.filter(pk__in=allowed))


def page_states(
    nodes: Iterable[Node],
    windows: dict[int, datetime],
    allowed: set[int] | None,
    *,
    holders: bool = True,
) -> GpuStates:
    """The states now of the GPUs of these nodes (``gpu_states``, the story the node and GPU
    pages tell), in node, index and MIG instance order: three queries.

    ``holders=False`` for the node table, which counts held GPUs and names no holder.
    """
    nodes = list(nodes)
    names = {node.pk: node.name for node in nodes}
    gpus = node_gpus(list(names))
    return gpu_states(
        gpu_refs(gpus),
        windows,
        allowed,
        node_names=names,
        holders=holders,
        gpu_query=gpus,
        nodes=[(node.cluster_id, node.name) for node in nodes],
    )


def states_by_node(states: GpuStates) -> dict[int, list[GpuState]]:
    by_node: dict[int, list[GpuState]] = defaultdict(list)
    for state in states.values():
        if state.gpu.node_id is not None:
            by_node[state.gpu.node_id].append(state)
    return by_node


def mean_activity(gpu_ids: list[int], time_range: TimeRange) -> dict[int, float]:
    """gpu id → its mean SM_ACTIVE over the hours the range counts (windows with telemetry only;
    the hour in progress left out, as every range figure).

    The ids go as a literal list: with a subquery instead, PostgreSQL hash-joins a scan of every
    usage row of the range rather than probing the (gpu, window_end) index per GPU.
    """
    if not gpu_ids:
        return {}
    after, until = time_range.counted_windows()
    means = (
        GpuUsage.objects.filter(
            gpu_id__in=gpu_ids,
            window_end__gt=after,
            window_end__lte=until,
            activity__isnull=False,
        )
        .values("gpu_id")
        .annotate(mean=Avg("activity"))
    )
    return {row["gpu_id"]: row["mean"] for row in means}


def node_summaries(nodes: list[Node], states: GpuStates) -> dict[int, NodeStory]:
    """node id → its held GPUs, their utilization and the GPUs without telemetry now."""
    by_node = states_by_node(states)
    return {
        node.pk: node_story(
            by_node.get(node.pk, []), states.unplaced_on(node.cluster_id, node.name)
        )
        for node in nodes
    }


def node_label(node: Node, query: MapQuery) -> str:
    group = (
        node.flavor if query.group == "flavor" else node.node_pool if query.group == "pool" else ""
    )
    prefix = f"{group or '—'} · " if query.group != "none" else ""
    # A row label of the heatmap: literal text for Plotly (node names and labels are upstream).
    return plotting.plain(f"{prefix}{node.name}")


@dataclass(frozen=True)
class NodeCapacity:
    """A node's GPUs, said one way on the fleet map and the node page."""

    gpus: float
    devices: int


def node_capacity(node: Node, states: Iterable[GpuState]) -> NodeCapacity:
    """The node's physical GPUs as capacity GPU-hours count them (docs/architecture.md
    "Figures"): a whole GPU 1, a MIG instance its slices/7, a time-sliced GPU once whatever its
    replicas; and the devices DCGM reports (each MIG instance one). Kubernetes' advertised
    ``nvidia.com/gpu`` counts neither way (a MIG node in the mixed strategy advertises 0, a
    time-sliced GPU once per replica), so it counts only for a node DCGM has not reported yet.
    """
    seen = list(states)
    if not seen:
        return NodeCapacity(float(node.gpu_capacity), 0)
    return NodeCapacity(sum(state.gpu.fraction for state in seen), len(seen))


def node_capacities(nodes: list[Node], states: GpuStates) -> dict[int, NodeCapacity]:
    """node id → ``node_capacity`` of each node, from the page's GPU states."""
    by_node = states_by_node(states)
    return {node.pk: node_capacity(node, by_node.get(node.pk, [])) for node in nodes}


def node_slots(node: Node, states: list[GpuState]) -> int:
    """Columns a node needs: its physical GPUs. A time-sliced GPU's replicas inflate the
    node's advertised ``nvidia.com/gpu`` capacity, so such a node counts the GPUs seen."""
    seen = max((state.gpu.index + 1 for state in states), default=0)
    if any(state.gpu.time_sliced for state in states):
        return seen
    return max(node.gpu_capacity, seen)


# Cell colours by state now (the CSS swatches in static/css/app.css match).
STATE_COLORS = {
    FREE: "#ffffff",
    IDLE: "#dc2626",
    HELD_NO_TELEMETRY: "#64748b",
    NO_TELEMETRY: "#d6d9de",
}
STATE_LEGEND = {
    FREE: "Free (not held)",
    IDLE: "Held · idle (SM_ACTIVE below the idle threshold)",
    HELD_NO_TELEMETRY: "Held · no telemetry",
    NO_TELEMETRY: "No telemetry (holder unknown; never free or idle)",
}
OTHER_TEAMS_COLOR = "#94a3b8"
# The mark drawn over a free GPU's white cell, and the legend's free entry.
FREE_MARK = {
    "symbol": "line-ne-open",
    "size": 12,
    "color": "#9ca3af",
    "line": {"width": 1, "color": "#9ca3af"},
}


def _team_colors(cells: dict[int, list[GpuState]]) -> dict[str, str]:
    """Team → colour, the teams holding the most GPUs on the page first; the rest share one."""
    held: dict[str, float] = defaultdict(float)
    for states in cells.values():
        for state in states:
            if state.holders:
                held[_team_of(state)] += state.gpu.fraction
    ranked = sorted(held, key=lambda team: (-held[team], team))
    return {
        team: plotting.SERIES[i] if i < len(plotting.SERIES) else OTHER_TEAMS_COLOR
        for i, team in enumerate(ranked)
    }


def _team_of(state: GpuState) -> str:
    holder = state.holders[0]
    return holder.team or "(no team)"


def _tooltip(node: Node, state: GpuState, value_name: str) -> str:
    gpu = state.gpu
    holders = "<br>".join(plotting.plain(h.label) for h in state.holders) or (
        "nobody" if state.state == FREE else "holder unknown"
    )
    if state.holders and not state.placed:
        holders += "<br><i>from kube-state-metrics; DCGM silent, GPU inferred</i>"
    activity = (
        "no telemetry" if state.activity is None else f"{state.activity * 100:.1f} % {value_name}"
    )
    util = "" if state.gpu_util is None else f"<br>GPU_UTIL {state.gpu_util:.0f} %"
    flags = " · time-sliced" if gpu.time_sliced else ""
    return (
        f"<b>{plotting.plain(node.name)} · {plotting.plain(gpu_label(gpu))}</b>{flags}"
        f"<br><b>{state.label}</b> · {activity}{util}<br>{plotting.plain(gpu.model_name)}"
        f"<br>{holders}"
    )


@dataclass
class _Grid:
    """The heatmap's cells (row = node, bottom-up; column = a GPU slot or a seventh of one) and
    the points of the marks drawn over them."""

    rows: list[str]
    width: int
    value: list[list[float | None]] = field(default_factory=list)
    category: list[list[int | None]] = field(default_factory=list)
    text: list[list[str]] = field(default_factory=list)
    ids: list[list[int | None]] = field(default_factory=list)
    sliced: tuple[list[float], list[str]] = field(default_factory=lambda: ([], []))
    free: tuple[list[float], list[str]] = field(default_factory=lambda: ([], []))
    silent: tuple[list[float], list[str]] = field(default_factory=lambda: ([], []))

    def __post_init__(self) -> None:
        self.value = [[None] * self.width for _ in self.rows]
        self.category = [[None] * self.width for _ in self.rows]
        self.text = [[""] * self.width for _ in self.rows]
        self.ids = [[None] * self.width for _ in self.rows]


def _colouring(
    state: GpuState, query: MapQuery, means: dict[int, float] | None, label: str
) -> tuple[float | None, str | None, str]:
    """What colours a GPU's cells: an SM_ACTIVE value or a category, and its tooltip."""
    if query.value == "mean":
        mean = (means or {}).get(state.gpu.pk)
        if mean is None:
            return None, NO_TELEMETRY if state.state != FREE else FREE, label
        return mean, None, label + f"<br>{mean * 100:.1f} % mean SM_ACTIVE over the range"
    if query.value == "team" and state.holders:
        team = _team_of(state)
        return None, team, label + f"<br>colour: team {plotting.plain(team)}"
    if state.state == "active":
        return state.activity, None, label
    return None, state.state, label


def _fill_grid(
    grid: _Grid,
    ordered: list[Node],
    cells: dict[int, list[GpuState]],
    query: MapQuery,
    means: dict[int, float] | None,
    sub: int,
    category_index: dict[str, int],
) -> None:
    """Each GPU's cells (a MIG instance its share of the GPU's ``sub`` slices) and marks."""
    for row_index, node in enumerate(ordered):
        row = grid.rows[row_index]
        offsets: dict[int, int] = defaultdict(int)
        for state in cells.get(node.pk, []):
            gpu = state.gpu
            span = max(1, round(gpu.slices)) if (gpu.gi_id and sub > 1) else sub
            start = gpu.index * sub + (offsets[gpu.index] if gpu.gi_id else 0)
            offsets[gpu.index] += span
            value, category, label = _colouring(
                state, query, means, _tooltip(node, state, "SM_ACTIVE now")
            )
            for column in range(start, min(start + span, grid.width)):
                grid.text[row_index][column] = label
                grid.ids[row_index][column] = gpu.pk
                if value is not None:
                    grid.value[row_index][column] = round(value * 100.0, 2)
                if category is not None:
                    grid.category[row_index][column] = category_index[category]
            middle = start + span / 2 - 0.5
            marks = []
            if gpu.time_sliced:
                marks.append(grid.sliced)
            if state.state == FREE:
                marks.append(grid.free)
            elif state.state == HELD_NO_TELEMETRY and query.value == "latest":
                marks.append(grid.silent)
            for xs, ys in marks:
                xs.append(middle)
                ys.append(row)


def _heatmaps(grid: _Grid, colors: list[str], query: MapQuery) -> list[dict[str, Any]]:
    """The category heatmap (discrete colours) under the SM_ACTIVE heatmap (the scale)."""
    n = len(colors)
    discrete: list[list[Any]] = []
    for i, color in enumerate(colors):
        discrete += [[i / n, color], [(i + 1) / n, color]]
    common = {
        "type": "heatmap",
        "x": list(range(grid.width)),
        "y": grid.rows,
        "text": grid.text,
        "customdata": grid.ids,
        "hoverongaps": False,
        "hovertemplate": "%{text}<extra></extra>",
        "xgap": 1,
        "ygap": 1,
        "showlegend": False,
    }
    return [
        {
            **common,
            "name": "State",
            "z": grid.category,
            "colorscale": discrete,
            "zmin": -0.5,
            "zmax": n - 0.5,
            "showscale": False,
        },
        {
            **common,
            "name": "SM_ACTIVE",
            "z": grid.value,
            "colorscale": plotting.ACTIVITY_COLORSCALE,
            "zmin": 0,
            "zmax": 100,
            "colorbar": {"title": {"text": "SM_ACTIVE %"}, "thickness": 12},
            "showscale": query.value != "team",
        },
    ]


def _legend(
    shown: list[str], teams: dict[str, str], colors: list[str], category_index: dict[str, int]
) -> list[dict[str, Any]]:
    """Legend entries for the categories shown (heatmaps carry none of their own). Free's is
    the free mark (``FREE_MARK``), as drawn over a free GPU's white cell."""
    return [
        {
            "type": "scatter",
            "mode": "markers",
            "name": STATE_LEGEND.get(name) or f"team {plotting.plain(name)}",
            "legendgroup": "teams" if name in teams else "states",
            "x": [None],
            "y": [None],
            "marker": FREE_MARK
            if name == FREE
            else {
                "symbol": "square",
                "size": 12,
                "color": colors[category_index[name]],
                "line": {"width": 1, "color": "#9ca3af"},
            },
            "hoverinfo": "skip",
            "showlegend": True,
        }
        for name in shown
    ]


def _mark(
    name: str, points: tuple[list[float], list[str]], marker: dict[str, Any], *, legend: bool
) -> dict[str, Any]:
    xs, ys = points
    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": xs,
        "y": ys,
        "marker": marker,
        "hoverinfo": "skip",
        "showlegend": legend,
    }


def _marks(grid: _Grid) -> list[dict[str, Any]]:
    """The marks drawn over the cells: free a diagonal, held-silent crossed, time-sliced
    diamond."""
    return [
        # Free must look free, whatever the colour mode: a white cell crossed by one grey
        # diagonal, in the legend as on the cells and as the page's legend (``.swatch-free``).
        _mark("free (hatched)", grid.free, FREE_MARK, legend=False),
        # Slate alone is close to the scale's blues.
        _mark(
            "held · no telemetry (crossed)",
            grid.silent,
            {
                "symbol": "x-thin-open",
                "size": 9,
                "color": "#ffffff",
                "line": {"width": 1.5, "color": "#ffffff"},
            },
            legend=False,
        ),
        _mark(
            "Time-sliced GPU",
            grid.sliced,
            {"symbol": "diamond-open", "size": 9, "color": "#111827", "line": {"width": 2}},
            legend=True,
        ),
    ]


def _map_layout(query: MapQuery, sub: int, slots: int, width: int, nodes: int) -> dict[str, Any]:
    """Title by colour mode, one tick per GPU slot on top, a line between GPUs split in MIG."""
    title = {
        "mean": "Mean SM_ACTIVE per GPU over the selected range",
        "team": "GPUs by the team holding them now",
    }.get(query.value, "GPU state and SM_ACTIVE now (latest window)")
    layout = plotting.layout(
        title,
        x_title="GPU (MIG instances drawn as sevenths of a GPU)" if sub > 1 else "GPU",
        y_title="Node",
        height=max(320, 26 * nodes + 160),
        hovermode="closest",
        xaxis={
            "tickvals": [slot * sub + (sub - 1) / 2 for slot in range(slots)],
            "ticktext": [f"GPU {slot}" for slot in range(slots)],
            "range": [-0.5, width - 0.5],
            "showgrid": False,
            "zeroline": False,
            "side": "top",
        },
        yaxis={"type": "category", "automargin": True, "showgrid": False, "rangemode": "normal"},
        plot_bgcolor="#ffffff",
        legend={"y": -0.01, "yanchor": "top", "orientation": "h"},
        margin={"t": 90},
    )
    if sub > 1:
        layout["shapes"] = [
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": slot * sub - 0.5,
                "x1": slot * sub - 0.5,
                "y0": 0,
                "y1": 1,
                "line": {"color": "#64748b", "width": 1},
            }
            for slot in range(1, slots)
        ]
    return layout


def map_figure(
    page_nodes: list[Node],
    cells: dict[int, list[GpuState]],
    query: MapQuery,
    gpu_url: str,
    means: dict[int, float] | None = None,
) -> dict[str, Any]:
    """Nodes × GPUs heatmap. MIG instances fill their share of the GPU's 7 compute slices.

    Colours: by state now (free white crossed by a grey diagonal, idle red, held without
    telemetry slate, silent light grey; held and active by SM_ACTIVE), by the holder's team
    (``colour=team``), or by the mean SM_ACTIVE over the range (``value=mean``; GPUs free now
    still crossed).
    """
    any_mig = any(state.gpu.gi_id for states in cells.values() for state in states)
    sub = MIG_COMPUTE_SLICES if any_mig else 1
    slots = max([node_slots(node, cells.get(node.pk, [])) for node in page_nodes] + [1])
    # Rows bottom-up in Plotly: reverse so the first node is at the top.
    ordered = list(reversed(page_nodes))
    grid = _Grid([node_label(node, query) for node in ordered], slots * sub)
    teams = _team_colors(cells) if query.value == "team" else {}
    categories = [FREE, IDLE, HELD_NO_TELEMETRY, NO_TELEMETRY, *teams]
    category_index = {name: i for i, name in enumerate(categories)}
    _fill_grid(grid, ordered, cells, query, means, sub, category_index)
    colors = [STATE_COLORS[name] if name in STATE_COLORS else teams[name] for name in categories]
    shown = [FREE, NO_TELEMETRY] if query.value == "mean" else categories
    data = [
        *_heatmaps(grid, colors, query),
        *_legend(shown, teams, colors, category_index),
        *_marks(grid),
    ]
    return plotting.figure(
        data,
        _map_layout(query, sub, slots, grid.width, len(page_nodes)),
        empty_message="No GPU nodes match these filters.",
        meta={"gpu_url": gpu_url, "nodes": len(page_nodes), "slots": slots},
    )
