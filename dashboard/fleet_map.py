"""The fleet map: its filters, the nodes and GPUs behind it, and its nodes × GPUs heatmap.

The page (``dashboard.views.fleet_map``) lists a page of nodes with their figures now; its chart
(``dashboard.charts.fleet_map``) draws the same page of nodes, one cell per GPU coloured by
SM_ACTIVE (the newest window, or the mean over the range). A GPU without telemetry is a grey
cell, never idle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.paginator import Page
from django.db.models import Avg, Exists, F, FloatField, OuterRef, Q, QuerySet, Sum
from django.http import HttpRequest

from core import figures as formulas
from core import plotting
from core.ranges import TimeRange
from dashboard.access import allowed_team_ids
from dashboard.decorators import BadParameter, choice_param, int_param
from dashboard.frame import paginate
from dashboard.queries.holders import HOLDER_FIELDS, Holder, holder_from_row
from dashboard.queries.now import latest_usage
from dashboard.templatetags.formatting import gpu_label
from fleet.models import MIG_COMPUTE_SLICES, Gpu, Node
from ledger.models import GpuUsage
from quotas.access import sees_team
from quotas.models import Team

MAP_NODES_PER_PAGE = 100
MAP_GROUPS = ("flavor", "pool", "none")
MAP_VALUES = ("latest", "mean")


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
    return nodes.select_related("cluster").order_by(*query.order)


def map_page(
    request: HttpRequest, query: MapQuery, windows: dict[int, datetime]
) -> tuple[Page, str]:
    """The page of nodes the map shows (its page and its chart show the same one)."""
    return paginate(request, map_nodes(query, windows), MAP_NODES_PER_PAGE)


def node_choices(field_name: str) -> list[str]:
    """The distinct non-empty values of a node field (flavor, node pool) for a filter."""
    values: QuerySet = (
        Node.objects.present()
        .exclude(**{field_name: ""})
        .values_list(field_name, flat=True)
        .distinct()
        .order_by(field_name)
    )
    return list(values)


def team_choices(allowed: set[int] | None) -> list[Team]:
    """The teams the map's "held by team" filter offers: those the user may see."""
    teams = Team.objects.only("pk", "name", "display_name").order_by("name")
    return list(teams if allowed is None else teams.filter(pk__in=allowed))


@dataclass
class GpuCell:
    gpu: Gpu
    activity: float | None = None
    gpu_util: float | None = None
    allocated: bool = False
    holders: list[Holder] = field(default_factory=list)


def map_cells(
    nodes: Iterable[Node],
    query: MapQuery,
    windows: dict[int, datetime],
    time_range: TimeRange,
    allowed: set[int] | None,
) -> dict[int, list[GpuCell]]:
    """node id → its GPUs with activity (latest window, or mean over the range) and holders."""
    node_ids = [node.pk for node in nodes]
    gpus = list(
        Gpu.objects.physical().filter(node_id__in=node_ids).order_by("node_id", "index", "gi_id")
    )
    cells = {gpu.pk: GpuCell(gpu) for gpu in gpus}
    if cells and windows:
        rows = latest_usage(windows).filter(gpu_id__in=list(cells)).values(*HOLDER_FIELDS)
        for row in rows:
            cell = cells[row["gpu_id"]]
            if row["activity"] is not None:
                cell.activity = row["activity"]
            if row["gpu_util"] is not None:
                cell.gpu_util = row["gpu_util"]
            if row["allocated"]:
                cell.allocated = True
                cell.holders.append(holder_from_row(row, allowed))
    if cells and query.value == "mean":
        for cell in cells.values():
            cell.activity = None
        means = (
            GpuUsage.objects.filter(
                gpu_id__in=list(cells),
                window_end__gt=time_range.start,
                window_end__lte=time_range.end,
                activity__isnull=False,
            )
            .values("gpu_id")
            .annotate(mean=Avg("activity"))
        )
        for row in means:
            cells[row["gpu_id"]].activity = row["mean"]
    by_node: dict[int, list[GpuCell]] = defaultdict(list)
    for gpu in gpus:
        by_node[gpu.node_id].append(cells[gpu.pk])  # type: ignore[index]
    return by_node


def node_summaries(nodes: list[Node], windows: dict[int, datetime]) -> dict[tuple[int, str], dict]:
    """(cluster id, node name) → allocated GPUs and SM_ACTIVE-weighted utilization now."""
    if not nodes or not windows:
        return {}
    with_data = Q(allocated=True, activity__isnull=False)
    rows = (
        latest_usage(windows)
        .filter(node_name__in=[node.name for node in nodes])
        .values("cluster_id", "node_name")
        .annotate(
            held=Sum("gpus", filter=Q(allocated=True)),
            telemetry=Sum("gpus", filter=with_data),
            active=Sum(F("activity") * F("gpus"), filter=with_data, output_field=FloatField()),
            no_data=Sum("capacity_gpus", filter=Q(activity__isnull=True)),
        )
    )
    return {
        (row["cluster_id"], row["node_name"]): {
            "allocated": row["held"] or 0.0,
            "utilization": formulas.utilization(row["active"] or 0.0, row["telemetry"] or 0.0),
            "no_data": row["no_data"] or 0.0,
        }
        for row in rows
    }


def node_label(node: Node, query: MapQuery) -> str:
    group = (
        node.flavor if query.group == "flavor" else node.node_pool if query.group == "pool" else ""
    )
    prefix = f"{group or '—'} · " if query.group != "none" else ""
    # A row label of the heatmap: literal text for Plotly (node names and labels are upstream).
    return plotting.plain(f"{prefix}{node.name}")


def map_figure(
    page_nodes: list[Node], cells: dict[int, list[GpuCell]], query: MapQuery, gpu_url: str
) -> dict[str, Any]:
    """Nodes × GPUs heatmap. MIG instances fill their share of the GPU's 7 compute slices."""
    any_mig = any(cell.gpu.gi_id for node_cells in cells.values() for cell in node_cells)
    sub = MIG_COMPUTE_SLICES if any_mig else 1
    slots = max(
        [node.gpu_capacity for node in page_nodes]
        + [cell.gpu.index + 1 for node_cells in cells.values() for cell in node_cells]
        + [1]
    )
    width = slots * sub
    # Rows bottom-up in Plotly: reverse so the first node is at the top.
    ordered = list(reversed(page_nodes))
    y = [node_label(node, query) for node in ordered]
    z: list[list[float | None]] = [[None] * width for _ in ordered]
    nodata: list[list[int | None]] = [[None] * width for _ in ordered]
    text: list[list[str]] = [[""] * width for _ in ordered]
    ids: list[list[int | None]] = [[None] * width for _ in ordered]
    sliced_x: list[float] = []
    sliced_y: list[str] = []
    free_x: list[float] = []
    free_y: list[str] = []
    value_name = "mean SM_ACTIVE over the range" if query.value == "mean" else "SM_ACTIVE now"
    for row_index, node in enumerate(ordered):
        offsets: dict[int, int] = defaultdict(int)
        for cell in cells.get(node.pk, []):
            gpu = cell.gpu
            span = max(1, round(gpu.slices)) if (gpu.gi_id and sub > 1) else sub
            start = gpu.index * sub + (offsets[gpu.index] if gpu.gi_id else 0)
            offsets[gpu.index] += span
            holders = "<br>".join(plotting.plain(h.label) for h in cell.holders) or "unallocated"
            activity = (
                "no telemetry"
                if cell.activity is None
                else f"{cell.activity * 100:.1f} % {value_name}"
            )
            util = "" if cell.gpu_util is None else f"<br>GPU_UTIL {cell.gpu_util:.0f} %"
            flags = " · time-sliced" if gpu.time_sliced else ""
            label = (
                f"<b>{plotting.plain(node.name)} · {plotting.plain(gpu_label(gpu))}</b>{flags}"
                f"<br>{activity}{util}<br>{plotting.plain(gpu.model_name)}<br>{holders}"
            )
            for column in range(start, min(start + span, width)):
                text[row_index][column] = label
                ids[row_index][column] = gpu.pk
                if cell.activity is None:
                    nodata[row_index][column] = 1
                else:
                    z[row_index][column] = round(cell.activity * 100.0, 2)
            if gpu.time_sliced:
                sliced_x.append(start + span / 2 - 0.5)
                sliced_y.append(y[row_index])
            elif not cell.allocated:
                free_x.append(start + span / 2 - 0.5)
                free_y.append(y[row_index])
    x = list(range(width))
    tickvals = [slot * sub + (sub - 1) / 2 for slot in range(slots)]
    data: list[dict[str, Any]] = [
        {
            "type": "heatmap",
            "name": "SM_ACTIVE",
            "x": x,
            "y": y,
            "z": z,
            "text": text,
            "customdata": ids,
            "hoverongaps": False,
            "hovertemplate": "%{text}<extra></extra>",
            "colorscale": plotting.ACTIVITY_COLORSCALE,
            "zmin": 0,
            "zmax": 100,
            "xgap": 1,
            "ygap": 1,
            "colorbar": {"title": {"text": "SM_ACTIVE %"}, "thickness": 12},
            "showscale": True,
            "showlegend": False,
        },
        {
            "type": "heatmap",
            "name": "No telemetry",
            "x": x,
            "y": y,
            "z": nodata,
            "text": text,
            "customdata": ids,
            "hoverongaps": False,
            "hovertemplate": "%{text}<extra></extra>",
            "colorscale": [[0, plotting.COLORS["no_data"]], [1, plotting.COLORS["no_data"]]],
            "zmin": 0,
            "zmax": 1,
            "xgap": 1,
            "ygap": 1,
            "showscale": False,
            "showlegend": False,
        },
        {
            # Legend entry for grey cells (heatmaps carry no legend item of their own).
            "type": "scatter",
            "mode": "markers",
            "name": "No telemetry (not idle)",
            "x": [None],
            "y": [None],
            "marker": {"symbol": "square", "size": 12, "color": plotting.COLORS["no_data"]},
            "hoverinfo": "skip",
            "showlegend": True,
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "Free (not allocated)",
            "x": free_x,
            "y": free_y,
            "marker": {
                "symbol": "circle",
                "size": 5,
                "color": "#ffffff",
                "line": {"width": 1, "color": "#6b7280"},
            },
            "hoverinfo": "skip",
            "showlegend": True,
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "Time-sliced GPU",
            "x": sliced_x,
            "y": sliced_y,
            "marker": {
                "symbol": "diamond-open",
                "size": 9,
                "color": "#111827",
                "line": {"width": 2},
            },
            "hoverinfo": "skip",
            "showlegend": True,
        },
    ]
    title = "SM_ACTIVE per GPU, " + (
        "mean over the selected range" if query.value == "mean" else "latest window"
    )
    layout = plotting.layout(
        title,
        x_title="GPU (MIG instances drawn as sevenths of a GPU)" if sub > 1 else "GPU",
        y_title="Node",
        height=max(320, 26 * len(page_nodes) + 140),
        hovermode="closest",
        xaxis={
            "tickvals": tickvals,
            "ticktext": [f"GPU {slot}" for slot in range(slots)],
            "range": [-0.5, width - 0.5],
            "showgrid": False,
            "zeroline": False,
            "side": "top",
        },
        yaxis={"type": "category", "automargin": True, "showgrid": False, "rangemode": "normal"},
        plot_bgcolor="#ffffff",
        legend={"y": -0.01, "yanchor": "top"},
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
    return plotting.figure(
        data,
        layout,
        empty_message="No GPU nodes match these filters.",
        meta={"gpu_url": gpu_url, "nodes": len(page_nodes)},
    )
