"""The Alerts page, the episode page, its chart and its actions."""

from django.urls import path

from dashboard import charts, views

urlpatterns = [
    path("alerts/", views.alert_list, name="alert-list"),
    path("alerts/<int:pk>/", views.episode_detail, name="episode-detail"),
    path(
        "alerts/<int:pk>/charts/evidence.json",
        charts.episode_evidence_chart,
        name="episode-chart-evidence",
    ),
    path("alerts/<int:pk>/acknowledge/", views.episode_acknowledge, name="episode-acknowledge"),
    path("alerts/<int:pk>/silence/", views.episode_silence, name="episode-silence"),
    path("alerts/<int:pk>/exempt/", views.episode_exempt, name="episode-exempt"),
]
