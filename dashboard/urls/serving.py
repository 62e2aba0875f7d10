"""The Serving pages, the capacity planner, and the JSON views behind their charts."""

from django.urls import path

from dashboard import charts, views

urlpatterns = [
    path("serving/", views.serving_list, name="serving-list"),
    path("serving/<int:pk>/", views.serving_detail, name="serving-detail"),
    path(
        "serving/<int:pk>/charts/throughput.json",
        charts.serving_throughput_chart,
        name="serving-chart-throughput",
    ),
    path(
        "serving/<int:pk>/charts/activity.json",
        charts.serving_activity_chart,
        name="serving-chart-activity",
    ),
    path(
        "serving/<int:pk>/charts/latency.json",
        charts.serving_latency_chart,
        name="serving-chart-latency",
    ),
    path(
        "serving/<int:pk>/charts/saturation.json",
        charts.serving_saturation_chart,
        name="serving-chart-saturation",
    ),
    path("serving/planner/", views.capacity_planner, name="planner"),
    path("serving/planner/charts/bounds.json", charts.planner_chart, name="planner-chart"),
]
