from django.urls import path
from rest_framework.routers import DefaultRouter

from ledger.api import views
from ledger.api.quota_changes import QuotaChangeViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("quota-changes", QuotaChangeViewSet, basename="quotachange")

urlpatterns = [
    path("chargeback/", views.ChargebackView.as_view(), name="api-chargeback"),
    # OpenCost's path, without a trailing slash.
    path("allocation", views.AllocationView.as_view(), name="api-allocation"),
    *router.urls,
]
