from rest_framework.routers import DefaultRouter

from fleet.api import views

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("nodes", views.NodeViewSet, basename="node")
router.register("gpus", views.GpuViewSet, basename="gpu")
router.register("ingest-runs", views.IngestRunViewSet, basename="ingestrun")

urlpatterns = router.urls
