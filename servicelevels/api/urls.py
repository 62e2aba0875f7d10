from django.urls import path

from servicelevels.api import views

urlpatterns = [
    path("admissions/", views.AdmissionsView.as_view(), name="api-admissions"),
    path("queue-levels/", views.QueueLevelsView.as_view(), name="api-queue-levels"),
]
