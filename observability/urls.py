from django.urls import path

from observability import views

app_name = "observability"

urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
]
