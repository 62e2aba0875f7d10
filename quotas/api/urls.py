from django.urls import path
from rest_framework.routers import DefaultRouter

from quotas.api import views

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("teams", views.TeamViewSet, basename="team")
router.register("cohorts", views.CohortViewSet, basename="cohort")
router.register("cluster-queues", views.ClusterQueueViewSet, basename="clusterqueue")
router.register("local-queues", views.LocalQueueViewSet, basename="localqueue")
router.register("workloads", views.WorkloadViewSet, basename="workload")

urlpatterns = [
    path("chargeback/", views.ChargebackView.as_view(), name="api-chargeback"),
    # OpenCost's path, without a trailing slash.
    path("allocation", views.AllocationView.as_view(), name="api-allocation"),
    *router.urls,
]
