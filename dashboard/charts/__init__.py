"""The small JSON views behind each Plotly figure, one module per page
(docs/conventions.md "Pages and API").

Each is decorated with ``@chart_view`` (login as 401 JSON, GET, the time range as an argument),
reads through ``dashboard.queries`` (or ``dashboard.live`` for detail series) and returns a
``core.plotting.figure``; ``parts`` holds what the figures share. ``static/js/charts.js`` draws
every element with a ``data-chart-url``.
"""

from dashboard.charts.alerts import episode_evidence_chart
from dashboard.charts.busy import busy_teams_chart, busy_time_chart
from dashboard.charts.cluster_queues import (
    cluster_queue_evictions_chart,
    cluster_queue_usage_chart,
)
from dashboard.charts.cohorts import cohort_borrowing_chart, cohort_usage_chart
from dashboard.charts.fleet_map import map_chart
from dashboard.charts.gpus import gpu_activity_chart, gpu_memory_chart
from dashboard.charts.nodes import node_chart
from dashboard.charts.overview import capacity_chart, team_active_chart, team_idle_chart
from dashboard.charts.planner import planner_chart
from dashboard.charts.queue_levels import (
    cluster_queue_waits_chart,
    queue_levels_evictions_chart,
    queue_levels_preemptions_chart,
    queue_levels_waits_chart,
    team_waits_chart,
)
from dashboard.charts.serving import (
    serving_activity_chart,
    serving_latency_chart,
    serving_saturation_chart,
    serving_throughput_chart,
)
from dashboard.charts.teams import team_allocation_chart, team_queues_chart
from dashboard.charts.workloads import workload_activity_chart, workload_timeline_chart

__all__ = [
    "episode_evidence_chart",
    "busy_teams_chart",
    "busy_time_chart",
    "capacity_chart",
    "cluster_queue_evictions_chart",
    "cluster_queue_usage_chart",
    "cluster_queue_waits_chart",
    "cohort_borrowing_chart",
    "cohort_usage_chart",
    "planner_chart",
    "serving_activity_chart",
    "serving_latency_chart",
    "serving_saturation_chart",
    "serving_throughput_chart",
    "gpu_activity_chart",
    "gpu_memory_chart",
    "map_chart",
    "node_chart",
    "queue_levels_evictions_chart",
    "queue_levels_preemptions_chart",
    "queue_levels_waits_chart",
    "team_active_chart",
    "team_allocation_chart",
    "team_idle_chart",
    "team_queues_chart",
    "team_waits_chart",
    "workload_activity_chart",
    "workload_timeline_chart",
]
