from django.urls import path

from auditor.lab import views

app_name = "lab"
urlpatterns = [path("", views.index, name="index")]
