from django.urls import path

from auditor.canary import views

app_name = "canary"
urlpatterns = [
    path("", views.index, name="index"),
    path("api/points/", views.points_json, name="points"),
]
