from rest_framework.routers import DefaultRouter

from quotas.api import views

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("teams", views.TeamViewSet, basename="team")
router.register("cohorts", views.CohortViewSet, basename="cohort")
router.register("cluster-queues", views.ClusterQueueViewSet, basename="clusterqueue")
router.register("local-queues", views.LocalQueueViewSet, basename="localqueue")
router.register("workloads", views.WorkloadViewSet, basename="workload")

urlpatterns = router.urls
