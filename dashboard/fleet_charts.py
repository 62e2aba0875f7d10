"""Fleet figures: the queries behind the fleet pages, and the small JSON views Plotly draws.

Every query here is bounded by the page, not by the data: "now" reads only the newest window of
each cluster (``latest_windows``), trends read hourly rollups, per-GPU history reads one node's or
one GPU's rows. Figures follow DESIGN "Figures"; a GPU-window without telemetry is "no data",
never idle, and is drawn as a gap or a grey cell.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import (
    Avg,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.db.models.functions import Cast, TruncHour
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.urls import NoReverseMatch, reverse

from core import plotting
from core.ranges import TimeRange
from core.timewindows import floor_time
from dashboard.decorators import chart_view, choice_param, int_param
from fleet.choices import ActivitySource
from fleet.models import MIG_COMPUTE_SLICES, Cluster, Gpu, Node
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup
from quotas.access import visible_team_ids
from quotas.models import Team, Workload

logger = logging.getLogger(__name__)

MAP_NODES_PER_PAGE = 100
MAP_GROUPS = ("flavor", "pool", "none")
MAP_VALUES = ("latest", "mean")
RANKING_SIZE = 15
HOLDERS_LIMIT = 200
BUSY_WORKLOADS_LIMIT = 50
BUSY_GPUS_LIMIT = 100
# Detail charts plot raw windows up to this span, hourly means beyond it (Plotly stays smooth
# with ~1,500 points per line; 24 h of 60 s windows is 1,440).
RAW_SPAN = timedelta(hours=24)
# Prometheus range queries: at most this many points per series.
LIVE_MAX_POINTS = 720


def busy_thresholds() -> tuple[float, float]:
    """(GPU_UTIL at or above, SM_ACTIVE below): "busy but not working" (DESIGN "Upstream facts")."""
    return (
        float(getattr(settings, "GPULEDGER_BUSY_GPU_UTIL", 50.0)),
        float(getattr(settings, "GPULEDGER_BUSY_SM_ACTIVE", 0.2)),
    )


def quota_url(name: str, arg: int | str | None) -> str | None:
    """A link to a quota page (team by name, workload by id) when it exists; None otherwise."""
    if arg is None or arg == "":
        return None
    try:
        return reverse(name, args=[arg])
    except NoReverseMatch:
        return None


# --- "Now": the newest window of each cluster ----------------------------------------------------


def latest_windows() -> dict[int, datetime]:
    """cluster id → end of its newest collected window (one query, an index probe per cluster)."""
    newest = GpuUsage.objects.filter(cluster=OuterRef("pk")).order_by("-window_end")
    rows = Cluster.objects.annotate(latest=Subquery(newest.values("window_end")[:1])).values_list(
        "pk", "latest"
    )
    return {pk: latest for pk, latest in rows if latest is not None}


def latest_usage(windows: dict[int, datetime]) -> QuerySet[GpuUsage]:
    if not windows:
        return GpuUsage.objects.none()
    condition = Q()
    for cluster_id, window_end in windows.items():
        condition |= Q(cluster_id=cluster_id, window_end=window_end)
    return GpuUsage.objects.filter(condition)


@dataclass
class FleetNow:
    window_end: datetime | None
    capacity: float = 0.0
    allocated: float = 0.0
    telemetry: float = 0.0
    active: float = 0.0
    idle: float = 0.0
    no_telemetry_allocated: float = 0.0
    no_telemetry_free: float = 0.0
    fallback: float = 0.0
    busy: float = 0.0
    pending_gpus: float = 0.0
    pending_workloads: int = 0

    @property
    def allocation_rate(self) -> float | None:
        return plotting.ratio(self.allocated, self.capacity)

    @property
    def utilization(self) -> float | None:
        return plotting.ratio(self.active, self.telemetry)

    @property
    def coverage(self) -> float | None:
        return plotting.ratio(self.telemetry, self.allocated)

    @property
    def no_telemetry(self) -> float:
        return self.no_telemetry_allocated + self.no_telemetry_free


def fleet_now(windows: dict[int, datetime]) -> FleetNow:
    """The overview's numbers: one aggregate over the newest windows, one over pending workloads."""
    util_min, sm_max = busy_thresholds()
    idle_below = settings.GPULEDGER_IDLE_THRESHOLD
    allocated = Q(allocated=True)
    with_data = Q(allocated=True, activity__isnull=False)
    totals = (
        latest_usage(windows).aggregate(
            sum_capacity=Sum("capacity_gpus"),
            sum_allocated=Sum("gpus", filter=allocated),
            sum_telemetry=Sum("gpus", filter=with_data),
            sum_active=Sum(F("activity") * F("gpus"), filter=with_data, output_field=FloatField()),
            sum_idle=Sum("gpus", filter=Q(allocated=True, activity__lt=idle_below)),
            sum_no_telemetry_allocated=Sum("gpus", filter=Q(allocated=True, activity__isnull=True)),
            sum_no_telemetry_free=Sum(
                "capacity_gpus", filter=Q(allocated=False, activity__isnull=True)
            ),
            sum_fallback=Sum(
                "gpus", filter=Q(allocated=True, activity_source=ActivitySource.GR_ENGINE_ACTIVE)
            ),
            sum_busy=Sum(
                "gpus", filter=Q(allocated=True, gpu_util__gte=util_min, activity__lt=sm_max)
            ),
        )
        if windows
        else {}
    )
    pending = Workload.objects.pending().aggregate(gpus=Sum("requested_gpus"), count=Count("pk"))
    return FleetNow(
        window_end=max(windows.values()) if windows else None,
        pending_gpus=pending["gpus"] or 0.0,
        pending_workloads=pending["count"] or 0,
        **{key.removeprefix("sum_"): value or 0.0 for key, value in totals.items()},
    )


# --- Trends from rollups ------------------------------------------------------------------------


def complete_hours(time_range: TimeRange) -> tuple[datetime, datetime]:
    """[first hour start, end of the last complete hour) inside the range."""
    return time_range.hour_start, floor_time(time_range.end, 3600)


def fleet_hours(time_range: TimeRange) -> dict[datetime, dict[str, Any]]:
    start, stop = complete_hours(time_range)
    rows = (
        HourlyRollup.objects.for_scope(RollupScope.FLEET)
        .between(start, stop)
        .values("hour")
        .annotate(
            capacity=Sum("capacity_gpu_hours"),
            allocated=Sum("allocated_gpu_hours"),
            active=Sum("active_gpu_hours"),
            idle=Sum("idle_gpu_hours"),
            busy=Sum("busy_not_working_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
        )
        .order_by("hour")
    )
    return {row["hour"]: dict(row) for row in rows}


@dataclass
class TeamFigures:
    team_id: int | None
    key: str
    name: str
    allocated: float
    active: float
    telemetry: float
    idle: float
    busy: float
    url: str | None = None

    @property
    def utilization(self) -> float | None:
        return plotting.ratio(self.active, self.telemetry)

    @property
    def idle_share(self) -> float | None:
        return plotting.ratio(self.idle, self.allocated)

    @property
    def coverage(self) -> float | None:
        return plotting.ratio(self.telemetry, self.allocated)

    @property
    def utilization_pct(self) -> float | None:
        return plotting.percent(self.utilization)

    @property
    def idle_share_pct(self) -> float | None:
        return plotting.percent(self.idle_share)

    @property
    def coverage_pct(self) -> float | None:
        return plotting.percent(self.coverage)


def team_figures(time_range: TimeRange, user: Any) -> list[TeamFigures]:
    """Every team's GPU-hours over the range (team-scope rollups), most allocated first.

    Names are fleet-level facts every signed-in user may see; links go only to teams the user
    may open (quotas.access).
    """
    start, stop = complete_hours(time_range)
    # Grouped by the integer team id (a hash aggregate over ~100 groups); names ride along as
    # Max() of a value that is constant per team. Grouping by the text key sorted on disk.
    rows = (
        HourlyRollup.objects.for_scope(RollupScope.TEAM)
        .between(start, stop)
        .values("team_id")
        .annotate(
            team_key=Max("key"),
            team_name=Max("team__name"),
            team_display=Max("team__display_name"),
            allocated=Sum("allocated_gpu_hours"),
            active=Sum("active_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
            idle=Sum("idle_gpu_hours"),
            busy=Sum("busy_not_working_gpu_hours"),
        )
        .order_by("-allocated", "team_key")
    )
    allowed = visible_team_ids(user)
    result = []
    for row in rows:
        team_id = row["team_id"]
        visible = team_id is not None and (allowed is None or team_id in allowed)
        result.append(
            TeamFigures(
                team_id=team_id,
                key=row["team_key"],
                name=row["team_display"] or row["team_key"],
                allocated=row["allocated"] or 0.0,
                active=row["active"] or 0.0,
                telemetry=row["telemetry"] or 0.0,
                idle=row["idle"] or 0.0,
                busy=row["busy"] or 0.0,
                url=quota_url("quotas:team-detail", row["team_name"]) if visible else None,
            )
        )
    return result


def flavor_figures(time_range: TimeRange) -> list[dict[str, Any]]:
    start, stop = complete_hours(time_range)
    hours = max((stop - start).total_seconds() / 3600.0, 0.0)
    rows = (
        HourlyRollup.objects.for_scope(RollupScope.FLAVOR)
        .between(start, stop)
        .values("key")
        .annotate(
            capacity=Sum("capacity_gpu_hours"),
            allocated=Sum("allocated_gpu_hours"),
            active=Sum("active_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
            idle=Sum("idle_gpu_hours"),
        )
        .order_by("-capacity", "key")
    )
    result = []
    for row in rows:
        allocation_rate = plotting.ratio(row["allocated"] or 0.0, row["capacity"] or 0.0)
        utilization = plotting.ratio(row["active"] or 0.0, row["telemetry"] or 0.0)
        result.append(
            {
                **row,
                "avg_capacity": row["capacity"] / hours if hours else None,
                "avg_allocated": row["allocated"] / hours if hours else None,
                "allocation_rate": allocation_rate,
                "allocation_rate_pct": plotting.percent(allocation_rate),
                "utilization": utilization,
                "utilization_pct": plotting.percent(utilization),
            }
        )
    return result


# --- Fleet map ----------------------------------------------------------------------------------


@dataclass
class MapQuery:
    """The fleet map's filters, parsed once for the page and its chart."""

    flavor: str = ""
    pool: str = ""
    team: int | None = None
    q: str = ""
    group: str = "flavor"
    value: str = "latest"
    page: int = 1
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
            page=int_param(request, "page", 1) or 1,
        )
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


def map_page(query: MapQuery, windows: dict[int, datetime]) -> Page:
    paginator = Paginator(map_nodes(query, windows), MAP_NODES_PER_PAGE)
    # Past the end shows the last page: a bookmark outlives a shrinking filter result.
    return paginator.get_page(min(query.page, max(paginator.num_pages, 1)))


@dataclass
class Holder:
    namespace: str
    pod: str
    workload: str
    workload_id: int | None
    team: str
    team_id: int | None
    visible: bool

    @property
    def label(self) -> str:
        if not self.namespace and not self.pod:
            return "unallocated"
        if not self.visible:
            return f"team {self.team}" if self.team else "another team"
        parts = [f"{self.namespace}/{self.pod}"]
        if self.workload:
            parts.append(f"workload {self.workload}")
        if self.team:
            parts.append(f"team {self.team}")
        return " · ".join(parts)


def holder_from_row(row: dict[str, Any], allowed: set[int] | None) -> Holder:
    team_id = row.get("team_id")
    visible = allowed is None or (team_id is not None and team_id in allowed)
    return Holder(
        namespace=row.get("namespace") or "",
        pod=row.get("pod") or "",
        workload=row.get("workload__name") or "",
        workload_id=row.get("workload_id"),
        team=row.get("team__name") or "",
        team_id=team_id,
        visible=visible,
    )


HOLDER_FIELDS = (
    "gpu_id",
    "namespace",
    "pod",
    "workload_id",
    "workload__name",
    "team_id",
    "team__name",
    "allocated",
    "shared",
    "activity",
    "activity_source",
    "gpu_util",
    "gpus",
)


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
    user: Any,
) -> dict[int, list[GpuCell]]:
    """node id → its GPUs with activity (latest window, or mean over the range) and holders."""
    node_ids = [node.pk for node in nodes]
    gpus = list(
        Gpu.objects.physical().filter(node_id__in=node_ids).order_by("node_id", "index", "gi_id")
    )
    cells = {gpu.pk: GpuCell(gpu) for gpu in gpus}
    allowed = visible_team_ids(user)
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
            "utilization": plotting.ratio(row["active"] or 0.0, row["telemetry"] or 0.0),
            "no_data": row["no_data"] or 0.0,
        }
        for row in rows
    }


def gpu_label(gpu: Gpu) -> str:
    if gpu.gi_id:
        return f"GPU {gpu.index} · MIG {gpu.mig_profile or '?'} (GI {gpu.gi_id})"
    return f"GPU {gpu.index}"


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
    y = [_node_label(node, query) for node in ordered]
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
            holders = "<br>".join(h.label for h in cell.holders) or "unallocated"
            activity = (
                "no telemetry"
                if cell.activity is None
                else f"{cell.activity * 100:.1f} % {value_name}"
            )
            util = "" if cell.gpu_util is None else f"<br>GPU_UTIL {cell.gpu_util:.0f} %"
            flags = " · time-sliced" if gpu.time_sliced else ""
            label = (
                f"<b>{node.name} · {gpu_label(gpu)}</b>{flags}<br>{activity}{util}"
                f"<br>{gpu.model_name}<br>{holders}"
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


def _node_label(node: Node, query: MapQuery) -> str:
    group = (
        node.flavor if query.group == "flavor" else node.node_pool if query.group == "pool" else ""
    )
    prefix = f"{group or '—'} · " if query.group != "none" else ""
    return f"{prefix}{node.name}"


# --- One node, one GPU: history, live from Prometheus when configured ----------------------------


@dataclass
class Series:
    name: str
    x: list[datetime] = field(default_factory=list)
    y: list[float | None] = field(default_factory=list)


def _with_gaps(points: list[tuple[datetime, float | None]], step: timedelta | None) -> Series:
    """Points in time order; a gap wider than 1.5 steps becomes a null (a visible break).

    Without a known step (stored windows, whose length is a collector setting that may have
    changed), the smallest spacing between the points is the step.
    """
    if step is None:
        spacings = [b[0] - a[0] for a, b in zip(points, points[1:], strict=False) if b[0] > a[0]]
        step = min(spacings) if spacings else timedelta(hours=1)
    series = Series("")
    previous: datetime | None = None
    for moment, value in points:
        if previous is not None and moment - previous > step * 1.5:
            series.x.append(previous + step)
            series.y.append(None)
        series.x.append(moment)
        series.y.append(value)
        previous = moment
    return series


def stored_gpu_series(
    gpu_ids: list[int], time_range: TimeRange, metric: str, scale: float = 1.0
) -> dict[int, Series]:
    """gpu id → its stored values of ``metric`` (a GpuUsage field) over the range.

    Raw windows up to RAW_SPAN, hourly means beyond; a shared GPU's several rows per window
    carry the same reading, so they are averaged, never summed.
    """
    rows = GpuUsage.objects.filter(
        gpu_id__in=gpu_ids,
        window_end__gt=time_range.start,
        window_end__lte=time_range.end,
    )
    raw = time_range.end - time_range.start <= RAW_SPAN
    step = None if raw else timedelta(hours=1)
    bucket = F("window_end") if raw else TruncHour("window_end")
    values = (
        rows.annotate(moment=bucket)
        .values("gpu_id", "moment")
        .annotate(v=Avg(metric))
        .order_by("gpu_id", "moment")
    )
    points: dict[int, list[tuple[datetime, float | None]]] = defaultdict(list)
    for row in values:
        value = row["v"]
        points[row["gpu_id"]].append(
            (row["moment"], None if value is None else round(value * scale, 3))
        )
    return {gpu_id: _with_gaps(items, step) for gpu_id, items in points.items()}


def promql_string(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def live_step(time_range: TimeRange) -> int:
    seconds = max(60, math.ceil(time_range.seconds / LIVE_MAX_POINTS))
    return int(math.ceil(seconds / 60.0) * 60)


def live_series(
    cluster: Cluster, promql: str, time_range: TimeRange, key_labels: tuple[str, ...], scale: float
) -> dict[tuple[str, ...], Series]:
    """Range query against the cluster's Prometheus; raises fleet.prometheus.PrometheusError."""
    from fleet.prometheus import PrometheusClient

    step = live_step(time_range)
    with PrometheusClient.for_cluster(cluster) as client:
        result = client.query_range(promql, time_range.start, time_range.end, step)
    series: dict[tuple[str, ...], Series] = {}
    for item in result:
        labels = item.get("metric", {})
        key = tuple(str(labels.get(name, "")) for name in key_labels)
        points = []
        for stamp, raw in item.get("values", []):
            value = float(raw)
            moment = datetime.fromtimestamp(float(stamp), tz=time_range.start.tzinfo)
            points.append((moment, None if not math.isfinite(value) else round(value * scale, 3)))
        series[key] = _with_gaps(points, timedelta(seconds=step))
    return series


def _host_selector(host: str) -> tuple[str, str]:
    """dcgm-exporter names the host label `Hostname` up to 4.8.x and `hostname` after."""
    quoted = promql_string(host)
    return f'Hostname="{quoted}"', f'hostname="{quoted}"'


def node_activity_figure(node: Node, time_range: TimeRange) -> dict[str, Any]:
    gpus = list(Gpu.objects.physical().filter(node=node).order_by("index", "gi_id"))
    source = "stored windows"
    notice = ""
    traces: list[dict[str, Any]] = []
    lines: list[tuple[Gpu, Series]] = []
    if node.cluster.prometheus_url:
        old, new = _host_selector(node.name)
        metric = "DCGM_FI_PROF_SM_ACTIVE"
        promql = f"max by (gpu, GPU_I_ID) ({metric}{{{old}}} or {metric}{{{new}}})"
        try:
            live = live_series(node.cluster, promql, time_range, ("gpu", "GPU_I_ID"), 100.0)
            for gpu in gpus:
                found = live.get((str(gpu.index), gpu.gi_id))
                if found is not None:
                    lines.append((gpu, found))
            source = "live from Prometheus"
        except Exception as exc:  # PrometheusError, or a secret that cannot be read
            logger.warning("node %s: Prometheus range query failed: %s", node.pk, exc)
            notice = (
                f"Prometheus could not be queried ({exc}); showing the stored "
                "per-minute history instead."
            )
            lines = []
    if source != "live from Prometheus":
        stored = stored_gpu_series([gpu.pk for gpu in gpus], time_range, "activity", 100.0)
        lines = [(gpu, stored[gpu.pk]) for gpu in gpus if gpu.pk in stored]
        retention_start = time_range.end - timedelta(days=settings.GPULEDGER_USAGE_RETENTION_DAYS)
        if time_range.start < retention_start:
            notice = (notice + " " if notice else "") + (
                f"Per-GPU history is kept {settings.GPULEDGER_USAGE_RETENTION_DAYS} days; "
                "earlier hours are not shown."
            )
    for index, (gpu, series) in enumerate(lines):
        traces.append(
            plotting.line(
                gpu_label(gpu),
                [plotting.iso(moment) for moment in series.x],
                series.y,
                color=plotting.SERIES[index % len(plotting.SERIES)],
                unit="%",
            )
        )
    layout = plotting.layout(
        f"SM_ACTIVE per GPU on {node.name} ({source})",
        x_title="Time (UTC)",
        y_title="SM_ACTIVE (%)",
        yaxis={"range": [0, 100]},
    )
    return plotting.figure(
        traces,
        layout,
        empty_message="No telemetry for this node's GPUs in this time range.",
        meta={"source": source, "notice": notice.strip()},
    )


GPU_METRICS = (
    # (GpuUsage field, dcgm-exporter name, legend, scale to %, colour)
    ("sm_active", "DCGM_FI_PROF_SM_ACTIVE", "SM_ACTIVE", 100.0, plotting.COLORS["active"]),
    (
        "pipe_tensor_active",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Tensor pipe active",
        100.0,
        plotting.COLORS["tensor"],
    ),
    ("dram_active", "DCGM_FI_PROF_DRAM_ACTIVE", "DRAM active", 100.0, plotting.COLORS["dram"]),
    ("gpu_util", "DCGM_FI_DEV_GPU_UTIL", "GPU_UTIL", 1.0, plotting.COLORS["gpu_util"]),
)
FB_METRIC = (
    "fb_used_mib",
    "DCGM_FI_DEV_FB_USED",
    "Framebuffer used",
    1.0 / 1024.0,
    plotting.COLORS["memory"],
)


def gpu_metric_figure(gpu: Gpu, time_range: TimeRange, *, memory: bool) -> dict[str, Any]:
    metrics = (FB_METRIC,) if memory else GPU_METRICS
    source = "stored windows"
    notice = ""
    lines: list[tuple[tuple, Series]] = []
    cluster = gpu.cluster
    if cluster.prometheus_url:
        names = "|".join(metric[1] for metric in metrics)
        promql = (
            f'max by (__name__) ({{__name__=~"{names}", UUID="{promql_string(gpu.uuid)}", '
            f'GPU_I_ID="{promql_string(gpu.gi_id)}"}})'
        )
        try:
            live = live_series(cluster, promql, time_range, ("__name__",), 1.0)
            for metric in metrics:
                found = live.get((metric[1],))
                if found is not None:
                    scale = metric[3]
                    found.y = [None if v is None else round(v * scale, 3) for v in found.y]
                    lines.append((metric, found))
            source = "live from Prometheus"
        except Exception as exc:  # PrometheusError, or a secret that cannot be read
            logger.warning("gpu %s: Prometheus range query failed: %s", gpu.pk, exc)
            notice = (
                f"Prometheus could not be queried ({exc}); showing the stored "
                "per-minute history instead."
            )
    if source != "live from Prometheus":
        lines = []
        for metric in metrics:
            stored = stored_gpu_series([gpu.pk], time_range, metric[0], metric[3])
            if gpu.pk in stored:
                lines.append((metric, stored[gpu.pk]))
    traces = [
        plotting.line(
            metric[2],
            [plotting.iso(moment) for moment in series.x],
            series.y,
            color=metric[4],
            unit="GiB" if memory else "%",
        )
        for metric, series in lines
    ]
    if memory:
        layout = plotting.layout(
            f"Framebuffer memory used on {gpu} ({source})",
            x_title="Time (UTC)",
            y_title="Memory used (GiB)",
        )
    else:
        layout = plotting.layout(
            f"Activity of {gpu} ({source})",
            x_title="Time (UTC)",
            y_title="Activity (%)",
            yaxis={"range": [0, 100]},
        )
    return plotting.figure(
        traces,
        layout,
        empty_message="No telemetry for this GPU in this time range.",
        meta={"source": source, "notice": notice},
    )


def holders_over_range(
    gpu_ids: list[int], time_range: TimeRange, user: Any
) -> list[dict[str, Any]]:
    """Who held these GPUs in the range: first/last window, GPU-hours and mean activity.

    Rows are grouped by window length too, so GPU-hours stay right when the collection interval
    changed inside the range; the groups of one holder are merged here.
    """
    allowed = visible_team_ids(user)
    holder_fields = (
        "gpu_id",
        "namespace",
        "pod",
        "workload_id",
        "workload__name",
        "team_id",
        "team__name",
    )
    rows = (
        GpuUsage.objects.filter(
            gpu_id__in=gpu_ids,
            allocated=True,
            window_end__gt=time_range.start,
            window_end__lte=time_range.end,
        )
        .annotate(
            span=ExpressionWrapper(
                F("window_end") - F("window_start"), output_field=DurationField()
            )
        )
        .values(*holder_fields, "span")
        .annotate(
            windows=Count("pk"),
            since=Min("window_start"),
            until=Max("window_end"),
            held=Sum("gpus"),
            mean_activity=Avg("activity"),
            mean_gpu_util=Avg("gpu_util"),
            any_shared=Max(Cast("shared", IntegerField())),
        )
        .order_by("-until", "gpu_id")[:HOLDERS_LIMIT]
    )
    merged: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = tuple(row[name] for name in holder_fields)
        span = row["span"]
        hours = (row["held"] or 0.0) * (span.total_seconds() / 3600.0 if span else 0.0)
        entry = merged.get(key)
        if entry is None:
            merged[key] = {**row, "gpu_hours": hours}
            continue
        total = entry["windows"] + row["windows"]
        for name in ("mean_activity", "mean_gpu_util"):
            values = [(entry[name], entry["windows"]), (row[name], row["windows"])]
            known = [(v, n) for v, n in values if v is not None]
            entry[name] = sum(v * n for v, n in known) / sum(n for _, n in known) if known else None
        entry["windows"] = total
        entry["gpu_hours"] += hours
        entry["since"] = min(entry["since"], row["since"])
        entry["until"] = max(entry["until"], row["until"])
        entry["any_shared"] = max(entry["any_shared"] or 0, row["any_shared"] or 0)
    result = []
    for row in merged.values():
        holder = holder_from_row(row, allowed)
        result.append(
            {
                "gpu_id": row["gpu_id"],
                "holder": holder,
                "workload_url": quota_url("quotas:workload-detail", row["workload_id"])
                if holder.visible
                else None,
                "team_url": quota_url("quotas:team-detail", row["team__name"])
                if holder.visible
                else None,
                "windows": row["windows"],
                "since": row["since"],
                "until": row["until"],
                "gpu_hours": row["gpu_hours"],
                "activity": row["mean_activity"],
                "activity_pct": plotting.percent(row["mean_activity"]),
                "gpu_util": row["mean_gpu_util"],
                "shared": bool(row["any_shared"]),
            }
        )
    return result


# --- Busy but not working -----------------------------------------------------------------------


def busy_by_team(time_range: TimeRange) -> list[dict[str, Any]]:
    start, stop = complete_hours(time_range)
    rows = (
        HourlyRollup.objects.for_scope(RollupScope.TEAM)
        .between(start, stop)
        .values("team_id")
        .annotate(
            team_key=Max("key"),
            team_display=Max("team__display_name"),
            busy=Sum("busy_not_working_gpu_hours"),
            allocated=Sum("allocated_gpu_hours"),
            util=Sum("gpu_util_gpu_hours"),
            util_covered=Sum("gpu_util_covered_gpu_hours"),
            active=Sum("active_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
        )
        .filter(busy__gt=0)
        .order_by("-busy", "team_key")
    )
    return [
        {
            **row,
            "key": row["team_key"],
            "name": row["team_display"] or row["team_key"],
            "busy_share_pct": plotting.percent(
                plotting.ratio(row["busy"], row["allocated"] or 0.0)
            ),
            # GPU_UTIL is already 0-100; the rollup keeps Σ GPU_UTIL/100 × GPU-hours.
            "mean_gpu_util_pct": plotting.percent(
                plotting.ratio(row["util"] or 0.0, row["util_covered"] or 0.0)
            ),
            "utilization_pct": plotting.percent(
                plotting.ratio(row["active"] or 0.0, row["telemetry"] or 0.0)
            ),
        }
        for row in rows
    ]


def busy_by_workload(time_range: TimeRange, user: Any) -> tuple[list[dict[str, Any]], float]:
    """Workloads the user may see, most busy-not-working GPU-hours first; plus the hidden rest."""
    start, stop = complete_hours(time_range)
    allowed = visible_team_ids(user)
    rows = (
        HourlyRollup.objects.for_scope(RollupScope.WORKLOAD)
        .between(start, stop)
        .filter(busy_not_working_gpu_hours__gt=0)
    )
    hidden = 0.0
    if allowed is not None:
        hidden = (
            rows.exclude(team_id__in=allowed).aggregate(busy=Sum("busy_not_working_gpu_hours"))[
                "busy"
            ]
            or 0.0
        )
        rows = rows.filter(team_id__in=allowed)
    # Sums per workload id only (an index-only scan of fleet_rollup_busy_hour on PostgreSQL);
    # names for the top rows come from one more query, so the scan carries no text.
    grouped = list(
        rows.values("workload_id")
        .annotate(
            workload_team=Max("team_id"),
            busy=Sum("busy_not_working_gpu_hours"),
            allocated=Sum("allocated_gpu_hours"),
            util=Sum("gpu_util_gpu_hours"),
            util_covered=Sum("gpu_util_covered_gpu_hours"),
            active=Sum("active_gpu_hours"),
            telemetry=Sum("telemetry_gpu_hours"),
            peak=Max("peak_allocated_gpus"),
        )
        .order_by("-busy", "workload_id")[:BUSY_WORKLOADS_LIMIT]
    )
    names = {
        row["pk"]: row
        for row in Workload.objects.filter(
            pk__in=[row["workload_id"] for row in grouped if row["workload_id"]]
        ).values("pk", "namespace", "name")
    }
    teams = {
        team.pk: team
        for team in Team.objects.filter(
            pk__in={row["workload_team"] for row in grouped if row["workload_team"]}
        ).only("pk", "name", "display_name")
    }
    result = []
    for row in grouped:
        workload = names.get(row["workload_id"])
        team = teams.get(row["workload_team"])
        result.append(
            {
                **row,
                "key": f"{workload['namespace']}/{workload['name']}" if workload else "(deleted)",
                "team_id": row["workload_team"],
                "team": str(team) if team else "",
                "url": quota_url("quotas:workload-detail", row["workload_id"]),
                "team_url": quota_url("quotas:team-detail", team.name if team else None),
                "mean_gpu_util_pct": plotting.percent(
                    plotting.ratio(row["util"] or 0.0, row["util_covered"] or 0.0)
                ),
                "utilization_pct": plotting.percent(
                    plotting.ratio(row["active"] or 0.0, row["telemetry"] or 0.0)
                ),
            }
        )
    return result, hidden


def busy_gpus_now(windows: dict[int, datetime], user: Any) -> tuple[list[dict[str, Any]], float]:
    util_min, sm_max = busy_thresholds()
    rows = latest_usage(windows).filter(allocated=True, gpu_util__gte=util_min, activity__lt=sm_max)
    total = rows.aggregate(gpus=Sum("gpus"))["gpus"] or 0.0 if windows else 0.0
    allowed = visible_team_ids(user)
    result = []
    for row in rows.values(*HOLDER_FIELDS, "node_name", "gpu__index", "gpu__gi_id").order_by(
        "-gpu_util", "node_name", "gpu__index"
    )[:BUSY_GPUS_LIMIT]:
        holder = holder_from_row(row, allowed)
        result.append(
            {
                **row,
                "holder": holder,
                "activity_pct": plotting.percent(row["activity"]),
                "workload_url": quota_url("quotas:workload-detail", row["workload_id"])
                if holder.visible
                else None,
            }
        )
    return result, total


# --- JSON views ---------------------------------------------------------------------------------


@chart_view
def capacity_chart(request: HttpRequest) -> dict[str, Any]:
    """Capacity vs allocated vs active GPUs per hour (fleet-scope rollups; GPU-hours/h = GPUs)."""
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    rows = fleet_hours(time_range)
    hours = time_range.complete_hours()
    x = [plotting.iso(hour) for hour in hours]

    def series(name: str) -> list[float | None]:
        return [round(rows[h][name] or 0.0, 2) if h in rows else None for h in hours]

    data = [
        plotting.line(
            "Capacity",
            x,
            series("capacity"),
            color=plotting.COLORS["capacity"],
            unit="GPUs",
            dash="dot",
        ),
        plotting.line(
            "Allocated",
            x,
            series("allocated"),
            color=plotting.COLORS["allocated"],
            unit="GPUs",
            fill="tozeroy",
        ),
        plotting.line(
            "Active (SM_ACTIVE-weighted)",
            x,
            series("active"),
            color=plotting.COLORS["active"],
            unit="GPUs",
            fill="tozeroy",
        ),
        plotting.line(
            "Idle (allocated, SM_ACTIVE < threshold)",
            x,
            series("idle"),
            color=plotting.COLORS["idle"],
            unit="GPUs",
        ),
    ]
    layout = plotting.layout(
        "Capacity, allocation and real use",
        x_title="Hour (UTC)",
        y_title="GPUs (GPU-hours per hour)",
    )
    return plotting.figure(data, layout, empty_message="No hourly rollups in this range yet.")


def _ranking(request: HttpRequest, field_name: str, title: str, color: str) -> dict[str, Any]:
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    teams = team_figures(time_range, request.user)
    ranked = sorted(
        (team for team in teams if getattr(team, field_name) > 0),
        key=lambda team: (-getattr(team, field_name), team.key),
    )[:RANKING_SIZE]
    ranked.reverse()  # horizontal bars: biggest on top
    trace = plotting.bar(
        title.split(" by ")[0],
        [round(getattr(team, field_name), 2) for team in ranked],
        [team.name for team in ranked],
        color=color,
        unit="GPU-hours",
        orientation="h",
    )
    trace["customdata"] = [team.url or "" for team in ranked]
    layout = plotting.layout(
        title,
        x_title="GPU-hours",
        y_title="Team",
        height=max(300, 28 * len(ranked) + 120),
        hovermode="closest",
        yaxis={"type": "category", "rangemode": "normal"},
    )
    return plotting.figure([trace], layout, empty_message="No team rollups in this range yet.")


@chart_view
def team_idle_chart(request: HttpRequest) -> dict[str, Any]:
    return _ranking(request, "idle", "Idle GPU-hours by team", plotting.COLORS["idle"])


@chart_view
def team_active_chart(request: HttpRequest) -> dict[str, Any]:
    return _ranking(
        request, "active", "Effective (active) GPU-hours by team", plotting.COLORS["active"]
    )


@chart_view
def map_chart(request: HttpRequest) -> dict[str, Any]:
    query = MapQuery.from_request(request)
    windows = latest_windows()
    page = map_page(query, windows)
    nodes = list(page.object_list)
    cells = map_cells(nodes, query, windows, request.time_range, request.user)  # type: ignore[attr-defined]
    gpu_url = reverse("fleet:gpu", args=[0])
    return map_figure(nodes, cells, query, gpu_url)


@chart_view
def node_chart(request: HttpRequest, pk: int) -> dict[str, Any]:
    node = get_object_or_404(Node.objects.select_related("cluster"), pk=pk)
    return node_activity_figure(node, request.time_range)  # type: ignore[attr-defined]


@chart_view
def gpu_activity_chart(request: HttpRequest, pk: int) -> dict[str, Any]:
    gpu = get_object_or_404(Gpu.objects.select_related("cluster"), pk=pk)
    return gpu_metric_figure(gpu, request.time_range, memory=False)  # type: ignore[attr-defined]


@chart_view
def gpu_memory_chart(request: HttpRequest, pk: int) -> dict[str, Any]:
    gpu = get_object_or_404(Gpu.objects.select_related("cluster"), pk=pk)
    return gpu_metric_figure(gpu, request.time_range, memory=True)  # type: ignore[attr-defined]


@chart_view
def busy_teams_chart(request: HttpRequest) -> dict[str, Any]:
    teams = busy_by_team(request.time_range)[:RANKING_SIZE]  # type: ignore[attr-defined]
    teams.reverse()
    trace = plotting.bar(
        "Busy but not working",
        [round(team["busy"], 2) for team in teams],
        [team["name"] for team in teams],
        color=plotting.COLORS["busy"],
        unit="GPU-hours",
        orientation="h",
    )
    layout = plotting.layout(
        "Busy-but-not-working GPU-hours by team",
        x_title="GPU-hours",
        y_title="Team",
        height=max(300, 28 * len(teams) + 120),
        hovermode="closest",
        yaxis={"type": "category", "rangemode": "normal"},
    )
    return plotting.figure([trace], layout, empty_message="No busy-but-not-working GPU-hours.")


@chart_view
def busy_time_chart(request: HttpRequest) -> dict[str, Any]:
    time_range: TimeRange = request.time_range  # type: ignore[attr-defined]
    rows = fleet_hours(time_range)
    hours = time_range.complete_hours()
    x = [plotting.iso(hour) for hour in hours]
    busy = [round(rows[h]["busy"] or 0.0, 2) if h in rows else None for h in hours]
    idle = [round(rows[h]["idle"] or 0.0, 2) if h in rows else None for h in hours]
    data = [
        plotting.line(
            "Busy but not working",
            x,
            busy,
            color=plotting.COLORS["busy"],
            unit="GPUs",
            fill="tozeroy",
        ),
        plotting.line("Idle", x, idle, color=plotting.COLORS["idle"], unit="GPUs", dash="dot"),
    ]
    layout = plotting.layout(
        "Busy-but-not-working and idle GPUs over time",
        x_title="Hour (UTC)",
        y_title="GPUs (GPU-hours per hour)",
    )
    return plotting.figure(data, layout, empty_message="No hourly rollups in this range yet.")


def team_choices() -> list[Team]:
    return list(Team.objects.only("pk", "name", "display_name").order_by("name"))
