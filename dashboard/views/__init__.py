"""The dashboard's pages, one module per page (plain functions,
docs/conventions.md "Pages and API").

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
from dashboard.views.chargeback import chargeback_page
from dashboard.views.cluster_queues import cluster_queue_detail, cluster_queue_list
from dashboard.views.cohorts import cohort_detail, cohort_list
from dashboard.views.definitions import definitions
from dashboard.views.fleet_map import fleet_map
from dashboard.views.gpus import gpu_detail
from dashboard.views.my_teams import my_teams
from dashboard.views.nodes import node_detail
from dashboard.views.overview import overview
from dashboard.views.planner import capacity_planner
from dashboard.views.queue_levels import queue_levels
from dashboard.views.quota_changes import (
    quota_change_apply,
    quota_change_detail,
    quota_change_list,
    quota_change_new,
    quota_change_patch,
)
from dashboard.views.serving import serving_detail, serving_list
from dashboard.views.teams import team_detail, team_list
from dashboard.views.workload_list import search, workload_list
from dashboard.views.workloads import workload_detail

__all__ = [
    "alert_list",
    "episode_acknowledge",
    "episode_detail",
    "episode_exempt",
    "episode_silence",
    "busy",
    "capacity_planner",
    "serving_detail",
    "serving_list",
    "chargeback_page",
    "cluster_queue_detail",
    "cluster_queue_list",
    "cohort_detail",
    "cohort_list",
    "definitions",
    "fleet_map",
    "gpu_detail",
    "my_teams",
    "node_detail",
    "overview",
    "queue_levels",
    "quota_change_apply",
    "quota_change_detail",
    "quota_change_list",
    "quota_change_new",
    "quota_change_patch",
    "search",
    "team_detail",
    "team_list",
    "workload_detail",
    "workload_list",
]
