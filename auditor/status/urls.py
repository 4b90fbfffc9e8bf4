from django.urls import path

from auditor.status import views

app_name = "status"
urlpatterns = [
    path("", views.index, name="index"),
    path("api/", views.snapshot_json, name="api"),
]
