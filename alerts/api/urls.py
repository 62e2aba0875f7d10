from rest_framework.routers import DefaultRouter

from alerts.api import views

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("alerts", views.EpisodeViewSet, basename="alert")

urlpatterns = router.urls
