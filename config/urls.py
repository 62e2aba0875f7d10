from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularSwaggerSplitView,
)

from core.api_docs import RedocView, redoc_bundle_js
from dashboard.views.my_teams import LandingLoginView

api_v1 = [
    path("", include("fleet.api.urls")),
    path("", include("quotas.api.urls")),
    path("", include("ledger.api.urls")),
    path("", include("alerts.api.urls")),
    path("", include("servicelevels.api.urls")),
    path("", include("serving.api.urls")),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    # LoginView puts the request's host in site_name (django.contrib.sites is not installed):
    # the page says the site's name instead.
    path(
        "login/",
        LandingLoginView.as_view(
            template_name="front/login.html", extra_context={"site_name": settings.SITE_NAME}
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Sign-in with the identity provider (accounts/oidc.py): 404 unless GPULEDGER_OIDC_ISSUER.
    path("oidc/", include("mozilla_django_oidc.urls")),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline script (CSP).
    path(
        "api/docs/",
        login_required(SpectacularSwaggerSplitView.as_view(url_name="api-schema")),
        name="api-docs",
    ),
    # ReDoc, from a copy of its bundle that loads nothing from a CDN (core.api_docs).
    path(
        "api/redoc/",
        login_required(RedocView.as_view(url_name="api-schema")),
        name="api-redoc",
    ),
    path("api/redoc/redoc.standalone.js", redoc_bundle_js, name="api-redoc-bundle"),
    path("", include("core.urls")),
    # The product's own metrics for Prometheus (README "Metrics").
    path("", include("observability.urls")),
    path("", include("dashboard.urls")),
]

handler403 = "dashboard.views.errors.permission_denied"
handler404 = "dashboard.views.errors.page_not_found"
