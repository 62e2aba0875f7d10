from django.urls import path

from ledger.api import views

urlpatterns = [
    path("chargeback/", views.ChargebackView.as_view(), name="api-chargeback"),
    # OpenCost's path, without a trailing slash.
    path("allocation", views.AllocationView.as_view(), name="api-allocation"),
]
