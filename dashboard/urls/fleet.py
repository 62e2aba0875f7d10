"""Fleet pages and the JSON views behind their charts."""

from django.urls import path

from dashboard import charts, views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("fleet/map/", views.fleet_map, name="map"),
    path("fleet/nodes/<int:pk>/", views.node_detail, name="node"),
    path("fleet/gpus/<int:pk>/", views.gpu_detail, name="gpu"),
    path("fleet/busy/", views.busy, name="busy"),
    path("figures/", views.definitions, name="definitions"),
    path("fleet/charts/capacity.json", charts.capacity_chart, name="chart-capacity"),
    path("fleet/charts/team-idle.json", charts.team_idle_chart, name="chart-team-idle"),
    path("fleet/charts/team-active.json", charts.team_active_chart, name="chart-team-active"),
    path("fleet/charts/map.json", charts.map_chart, name="chart-map"),
    path("fleet/charts/nodes/<int:pk>/activity.json", charts.node_chart, name="chart-node"),
    path(
        "fleet/charts/gpus/<int:pk>/activity.json",
        charts.gpu_activity_chart,
        name="chart-gpu-activity",
    ),
    path(
        "fleet/charts/gpus/<int:pk>/memory.json",
        charts.gpu_memory_chart,
        name="chart-gpu-memory",
    ),
    path("fleet/charts/busy-teams.json", charts.busy_teams_chart, name="chart-busy-teams"),
    path("fleet/charts/busy-over-time.json", charts.busy_time_chart, name="chart-busy-time"),
]
