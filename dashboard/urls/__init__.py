"""The dashboard's URL conf: every page and the JSON views behind its charts, in one namespace
``dashboard`` (``dashboard:team-detail``, ``dashboard:chart-capacity``). The patterns are listed
per area, fleet, quotas, alerts and serving, in the modules of the same name."""

from dashboard.urls import alerts, fleet, quotas, serving

app_name = "dashboard"

urlpatterns = [
    *quotas.urlpatterns,
    *fleet.urlpatterns,
    *alerts.urlpatterns,
    *serving.urlpatterns,
]
