from django.urls import path

from auditor.metrics import views

app_name = "metrics"
urlpatterns = [
    path("", views.metrics, name="metrics"),
]
