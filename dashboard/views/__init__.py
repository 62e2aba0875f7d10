"""The dashboard's pages, one module per page (STYLE rule 15: plain functions).

Each view is decorated with ``@dashboard_page`` (login, GET, the time range as an argument, the
freshness banner), reads through ``dashboard.queries``, builds an explicit context and renders
its template; its Plotly figures load from the JSON views of ``dashboard.charts``.
"""

from dashboard.views.alerts import (
    alert_list,
    episode_acknowledge,
    episode_detail,
    episode_exempt,
    episode_silence,
)
from dashboard.views.busy import busy
from dashboard.views.cluster_queues import cluster_queue_detail, cluster_queue_list
from dashboard.views.cohorts import cohort_detail, cohort_list
from dashboard.views.fleet_map import fleet_map
from dashboard.views.gpus import gpu_detail
from dashboard.views.nodes import node_detail
from dashboard.views.overview import overview
from dashboard.views.teams import team_detail, team_list
from dashboard.views.workloads import workload_detail

__all__ = [
    "alert_list",
    "episode_acknowledge",
    "episode_detail",
    "episode_exempt",
    "episode_silence",
    "busy",
    "cluster_queue_detail",
    "cluster_queue_list",
    "cohort_detail",
    "cohort_list",
    "fleet_map",
    "gpu_detail",
    "node_detail",
    "overview",
    "team_detail",
    "team_list",
    "workload_detail",
]
