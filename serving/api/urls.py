from django.urls import path

from serving.api import views

urlpatterns = [
    path("capacity-plan/", views.CapacityPlanView.as_view(), name="api-capacity-plan"),
]
