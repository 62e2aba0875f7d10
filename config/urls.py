from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularSwaggerSplitView,
)

api_v1 = [
    path("", include("fleet.api.urls")),
    path("", include("quotas.api.urls")),
    path("", include("ledger.api.urls")),
    path("", include("alerts.api.urls")),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(template_name="front/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline script (CSP).
    path(
        "api/docs/",
        login_required(SpectacularSwaggerSplitView.as_view(url_name="api-schema")),
        name="api-docs",
    ),
    path("", include("core.urls")),
    path("", include("dashboard.urls.quotas")),
    path("", include("dashboard.urls.fleet")),
    path("", include("dashboard.urls.alerts")),
]
