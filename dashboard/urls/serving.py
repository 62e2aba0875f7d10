"""The capacity planner page and the JSON view behind its chart."""

from django.urls import path

from dashboard import charts, views

urlpatterns = [
    path("serving/planner/", views.capacity_planner, name="planner"),
    path("serving/planner/charts/bounds.json", charts.planner_chart, name="planner-chart"),
]
