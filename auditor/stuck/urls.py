from django.urls import path

from auditor.stuck import views

app_name = "stuck"
urlpatterns = [
    path("", views.index, name="index"),
    path("api/items/", views.items_json, name="items"),
    path("diagnose/", views.diagnose_now, name="diagnose"),
]
